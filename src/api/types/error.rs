//! The error answer every route gives, and its codes with their HTTP statuses.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An error answer: `{"error": {"code", "message", "field"?}}` with the status of its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A machine word: invalid, unauthorized, forbidden, not_found, conflict, too_large,
    /// too_many_requests, no_space, unavailable, internal; approval_rejected and
    /// approval_expired (both `403`) for a command that waited for approval and did not get it.
    #[schema(example = "not_found")]
    pub code: String,
    /// A sentence for a person.
    pub message: String,
    /// The camelCase request field the error is about, so a form can show it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The error codes, each with the one HTTP status it is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    Invalid,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    TooLarge,
    TooManyRequests,
    NoSpace,
    Unavailable,
    Internal,
    /// A command waited for approval and was rejected (by a person, or at once by an
    /// auto-deny token).
    ApprovalRejected,
    /// A command waited for approval and nobody answered in `sessions.approval_timeout`.
    ApprovalExpired,
}

impl ErrorCode {
    /// Each status's own code comes before the codes that share its status.
    pub const ALL: [ErrorCode; 12] = [
        ErrorCode::Invalid,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::TooLarge,
        ErrorCode::TooManyRequests,
        ErrorCode::NoSpace,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
        ErrorCode::ApprovalRejected,
        ErrorCode::ApprovalExpired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Invalid => "invalid",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::TooManyRequests => "too_many_requests",
            ErrorCode::NoSpace => "no_space",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::ApprovalRejected => "approval_rejected",
            ErrorCode::ApprovalExpired => "approval_expired",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            ErrorCode::Invalid => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::TooManyRequests => 429,
            ErrorCode::NoSpace => 507,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
            ErrorCode::ApprovalRejected | ErrorCode::ApprovalExpired => 403,
        }
    }

    pub fn parse(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The general code answered with `status`, if the API uses that status.
    pub fn for_status(status: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.status() == status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_code_has_one_status_and_back() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            let general = ErrorCode::for_status(code.status());
            match code {
                ErrorCode::ApprovalRejected | ErrorCode::ApprovalExpired => {
                    assert_eq!(general, Some(ErrorCode::Forbidden))
                }
                _ => assert_eq!(general, Some(code)),
            }
        }
        assert_eq!(ErrorCode::parse("teapot"), None);
        assert_eq!(ErrorCode::for_status(418), None);
    }
}

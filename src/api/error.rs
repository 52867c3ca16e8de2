//! The API's error: `{"error": {"code", "message", "field"?}}` with a fitting status.

use agenthold_proto::{ChannelError, ErrorCode};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::lifecycle::LifecycleError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The camelCase request field the error is about, so a form can show it there.
    pub field: Option<&'static str>,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A machine word: invalid, unauthorized, forbidden, not_found, conflict, too_large,
    /// too_many_requests, unavailable, internal.
    pub code: String,
    /// A sentence for a person.
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
    }

    pub fn invalid_field(field: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            field: Some(field),
            ..ApiError::invalid(message)
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid token is required: send Authorization: Bearer <token>",
        )
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    pub fn too_many_requests(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests", message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(code = self.code, "{}", self.message);
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
                field: self.field.map(str::to_string),
            },
        };
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<LifecycleError> for ApiError {
    fn from(e: LifecycleError) -> ApiError {
        let message = e.to_string();
        match e {
            LifecycleError::NotFound(_) => ApiError::not_found(message),
            LifecycleError::Conflict { .. } => ApiError::conflict(message),
            LifecycleError::NameTaken(_) => ApiError {
                field: Some("name"),
                ..ApiError::conflict(message)
            },
            LifecycleError::Driver(_) | LifecycleError::Tunnel { .. } => {
                ApiError::unavailable(message)
            }
            LifecycleError::WakeFailed(_) => ApiError::conflict(message),
            LifecycleError::BadChange { field, .. } => ApiError::invalid_field(field, message),
            LifecycleError::Store(_) => ApiError::internal(message),
        }
    }
}

impl From<ChannelError> for ApiError {
    fn from(e: ChannelError) -> ApiError {
        let (status, code) = match e.code {
            ErrorCode::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ErrorCode::Invalid | ErrorCode::IsDir | ErrorCode::NotDir => {
                (StatusCode::BAD_REQUEST, "invalid")
            }
            ErrorCode::Exists | ErrorCode::Busy => (StatusCode::CONFLICT, "conflict"),
            ErrorCode::PermissionDenied | ErrorCode::Unauthorized => {
                (StatusCode::FORBIDDEN, "forbidden")
            }
            ErrorCode::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ErrorCode::NoSpace => (StatusCode::INSUFFICIENT_STORAGE, "no_space"),
            ErrorCode::UnknownChannel => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ErrorCode::Io => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, e.message)
    }
}

impl From<agenthold_proto::OpenError> for ApiError {
    fn from(e: agenthold_proto::OpenError) -> ApiError {
        match e {
            agenthold_proto::OpenError::Refused(c) => c.into(),
            agenthold_proto::OpenError::Proto(p) => {
                ApiError::unavailable(format!("the sandbox connection failed: {p}"))
            }
        }
    }
}

impl From<crate::tunnel::registry::TunnelError> for ApiError {
    fn from(e: crate::tunnel::registry::TunnelError) -> ApiError {
        use crate::tunnel::registry::TunnelError;
        match e {
            TunnelError::TooManyStreams(_) => ApiError::too_many_requests(e.to_string()),
            TunnelError::Timeout(_) | TunnelError::NotConnected | TunnelError::Mux(_) => {
                ApiError::unavailable(e.to_string())
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        match r {
            JsonRejection::BytesRejection(b) if b.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::too_large(b.body_text())
            }
            other => ApiError::invalid(other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::invalid(r.body_text())
    }
}

/// `Json` whose rejections are [`ApiError`]s.
#[derive(axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// `Query` whose rejections are [`ApiError`]s.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

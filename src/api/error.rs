//! The API's error: `{"error": {"code", "message", "field"?}}` with a fitting status.

use agenthold_proto::{ChannelError, ErrorCode as ChannelCode};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::types::ErrorCode;
pub use super::types::{ErrorBody, ErrorDetail};
use crate::agents::spec::SpecError;
use crate::launch::CommandError;
use crate::lifecycle::LifecycleError;
use crate::teams::password::PasswordError;
use crate::teams::TeamsError;
use crate::tunnel::conn::{ConnError, NoSuchProcess};

#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// The camelCase request field the error is about, so a form can show it there.
    pub field: Option<&'static str>,
    /// Seconds a client should wait before it tries again, sent as `Retry-After` with every
    /// `429` and `503` ([`DEFAULT_RETRY_AFTER`] when not set).
    pub retry_after: Option<u64>,
}

/// `Retry-After` of a `429` or `503` that says nothing better: the refusals are brief
/// (a channel frees up, a sandbox reconnects).
pub const DEFAULT_RETRY_AFTER: u64 = 1;
/// `Retry-After` when a wake took longer than `server.wake_timeout`: the agent is still on
/// its way up.
pub const WAKE_RETRY_AFTER: u64 = 5;

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Invalid, message)
    }

    pub fn invalid_field(field: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            field: Some(field),
            ..ApiError::invalid(message)
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            ErrorCode::Unauthorized,
            "a valid token is required: send Authorization: Bearer <token>",
        )
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Conflict, message)
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::TooLarge, message)
    }

    pub fn too_many_requests(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::TooManyRequests, message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Unavailable, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Internal, message)
    }
}

impl ApiError {
    /// The error as a response body says it (for an answer that reports several).
    pub fn detail(self) -> ErrorDetail {
        ErrorDetail {
            code: self.code.as_str().to_string(),
            message: self.message,
            field: self.field.map(str::to_string),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::warn!(code = self.code.as_str(), "{}", self.message);
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.as_str().to_string(),
                message: self.message,
                field: self.field.map(str::to_string),
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        if matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        ) {
            let secs = self.retry_after.unwrap_or(DEFAULT_RETRY_AFTER);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        response
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
            LifecycleError::WakeTimeout { .. } => ApiError {
                retry_after: Some(WAKE_RETRY_AFTER),
                ..ApiError::unavailable(message)
            },
            LifecycleError::Conn(c) => c.into(),
            LifecycleError::BadChange { field, .. } => ApiError::invalid_field(field, message),
            LifecycleError::Unfit { field, .. } => ApiError {
                field: Some(field),
                ..ApiError::conflict(message)
            },
            LifecycleError::Store(_) => ApiError::internal(message),
            LifecycleError::Refused(_) => ApiError::conflict(message),
            LifecycleError::Forbidden(_) => ApiError {
                field: Some("access"),
                ..ApiError::forbidden(message)
            },
        }
    }
}

impl From<TeamsError> for ApiError {
    fn from(e: TeamsError) -> ApiError {
        let message = e.to_string();
        match e {
            TeamsError::UserNotFound(_) | TeamsError::TokenNotFound(_) => {
                ApiError::not_found(message)
            }
            TeamsError::AgentNotFound(_) => ApiError {
                field: Some("agents"),
                ..ApiError::not_found(message)
            },
            TeamsError::NameTaken(_) => ApiError {
                field: Some("name"),
                ..ApiError::conflict(message)
            },
            TeamsError::LastAdmin | TeamsError::BuiltIn(_) | TeamsError::NotProtected { .. } => {
                ApiError::conflict(message)
            }
            TeamsError::NotMember { .. } => ApiError::not_found(message),
            TeamsError::WrongAccessToken(_) => ApiError {
                field: Some("accessToken"),
                ..ApiError::forbidden(message)
            },
            TeamsError::Invalid { field, .. } => ApiError::invalid_field(field, message),
            TeamsError::Beyond(_) => ApiError::forbidden(message),
            TeamsError::Password(PasswordError::Length) => {
                ApiError::invalid_field("password", message)
            }
            TeamsError::Password(_) | TeamsError::Store(_) => {
                tracing::error!("users and tokens: {message}");
                ApiError::internal(message)
            }
        }
    }
}

impl From<crate::secrets::SecretsError> for ApiError {
    fn from(e: crate::secrets::SecretsError) -> ApiError {
        use crate::secrets::SecretsError;
        let message = e.to_string();
        match e {
            SecretsError::Invalid(s) => ApiError::invalid_field(s.field, message),
            SecretsError::NotFound(_) => ApiError::not_found(message),
            SecretsError::TooMany => ApiError::conflict(message),
            SecretsError::Vault(_) | SecretsError::Store(_) => {
                tracing::error!("secrets: {message}");
                ApiError::internal(message)
            }
        }
    }
}

impl From<crate::audit::AuditError> for ApiError {
    fn from(e: crate::audit::AuditError) -> ApiError {
        match e {
            crate::audit::AuditError::Query(q) => ApiError::invalid_field(q.field, q.why),
            crate::audit::AuditError::Store(s) => {
                tracing::error!("reading the audit log: {s}");
                ApiError::internal(format!("the audit log could not be read: {s}"))
            }
        }
    }
}

impl From<crate::audit::QueryError> for ApiError {
    fn from(q: crate::audit::QueryError) -> ApiError {
        ApiError::invalid_field(q.field, q.why)
    }
}

/// A setting that breaks its rule is the request's fault, in the field of the same name.
impl From<SpecError> for ApiError {
    fn from(e: SpecError) -> ApiError {
        ApiError::invalid_field(e.field, e.why)
    }
}

/// A command the request describes that may not run: the request's fault, in the field it is
/// about; one over exec's size limits is too large, except for its cwd.
impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> ApiError {
        let field = Some(e.field());
        let message = e.to_string();
        match e {
            CommandError::TooLarge(agenthold_proto::ExecTooLarge::Cwd(_))
            | CommandError::NoProgram
            | CommandError::NulInCommand
            | CommandError::BadEnv(_)
            | CommandError::NulInCwd
            | CommandError::ExecTimeout { .. }
            | CommandError::ProcessTimeout
            | CommandError::BadTag(_)
            | CommandError::TooManyVars(_) => ApiError {
                field,
                ..ApiError::invalid(message)
            },
            CommandError::TooLarge(_) => ApiError {
                field,
                ..ApiError::too_large(message)
            },
        }
    }
}

/// Root asked of an agent that does not allow it: the agent's setting refuses it, not the
/// request's shape.
impl From<crate::launch::RootNotAllowed> for ApiError {
    fn from(e: crate::launch::RootNotAllowed) -> ApiError {
        ApiError {
            field: Some("user"),
            ..ApiError::forbidden(e.to_string())
        }
    }
}

impl From<NoSuchProcess> for ApiError {
    fn from(e: NoSuchProcess) -> ApiError {
        ApiError::not_found(e.to_string())
    }
}

impl From<ConnError> for ApiError {
    fn from(e: ConnError) -> ApiError {
        let message = e.to_string();
        match e {
            ConnError::Tunnel(t) => t.into(),
            ConnError::Refused(c) => c.into(),
            ConnError::Proto(p) => {
                ApiError::unavailable(format!("the sandbox connection failed: {p}"))
            }
            ConnError::Lost
            | ConnError::MalformedReport
            | ConnError::ListingCut(_)
            | ConnError::UploadFailed(_)
            | ConnError::Unconfirmed(_)
            | ConnError::ConfirmedEarly
            | ConnError::CodeOutputOverflow => ApiError::unavailable(message),
            ConnError::BadListing(_) => ApiError::internal(message),
            ConnError::StdinClosed | ConnError::StdinCut(_) | ConnError::UploadCut(_) => {
                ApiError::invalid(message)
            }
            ConnError::FileTooLarge { .. } => ApiError::too_large(message),
        }
    }
}

impl From<ChannelError> for ApiError {
    fn from(e: ChannelError) -> ApiError {
        let code = match e.code {
            ChannelCode::NotFound => ErrorCode::NotFound,
            ChannelCode::Invalid => ErrorCode::Invalid,
            // What the path names now, not the request, is in the way: a conflict.
            ChannelCode::IsDir | ChannelCode::NotDir | ChannelCode::Conflict => ErrorCode::Conflict,
            // Unsupported: the image lacks what the channel needs (python3-ipykernel).
            ChannelCode::Exists | ChannelCode::Busy | ChannelCode::Unsupported => {
                ErrorCode::Conflict
            }
            ChannelCode::PermissionDenied | ChannelCode::Unauthorized => ErrorCode::Forbidden,
            ChannelCode::TooLarge => ErrorCode::TooLarge,
            ChannelCode::NoSpace => ErrorCode::NoSpace,
            ChannelCode::UnknownChannel | ChannelCode::Refused => ErrorCode::Unavailable,
            ChannelCode::Io => ErrorCode::Internal,
        };
        ApiError::new(code, e.message)
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

/// `Json` whose rejections are [`ApiError`]s, and which takes a JSON object only: serde reads a
/// struct from an array too (`[null, null]` as its first two fields), which no body of the API
/// is.
pub struct ApiJson<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let bytes = bytes::Bytes::from_request(
            axum::extract::Request::from_parts(parts.clone(), body),
            state,
        )
        .await
        .map_err(JsonRejection::from)?;
        let again =
            axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes.clone()));
        let axum::Json(value) = axum::Json::<T>::from_request(again, state).await?;
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::invalid(
                "Failed to deserialize the JSON body into the target type: expected a JSON object",
            ));
        }
        Ok(ApiJson(value))
    }
}

/// `Query` whose rejections are [`ApiError`]s.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

impl From<crate::code::CodeInvalid> for ApiError {
    fn from(e: crate::code::CodeInvalid) -> ApiError {
        let field = Some(e.field());
        let too_large = matches!(
            e,
            crate::code::CodeInvalid::Run(agenthold_proto::CodeRunInvalid::TooLarge(_))
        );
        let message = e.to_string();
        let base = if too_large {
            ApiError::too_large(message)
        } else {
            ApiError::invalid(message)
        };
        ApiError { field, ..base }
    }
}

//! The bodies of `POST /api/v1/agents/{id}/code` and of its contexts (`/code/contexts`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::whole;

/// `POST /api/v1/agents/{id}/code`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCode {
    /// The code; at most 1 MiB (`413` beyond). The last expression's value is a result.
    #[schema(example = "x = 41\nx + 1")]
    pub code: String,
    /// `python`, the only language (and the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "python")]
    pub language: Option<String>,
    /// The context to run in: an id from `POST …/code/contexts`, or `default` (when absent):
    /// the agent's own, made on first use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(default|[a-z0-9]{16})$", example = "default")]
    pub context: Option<String>,
    /// The code is interrupted after this long (1 to `server.exec_max_timeout`) and the run
    /// ends with a `TimeoutError`; the server's exec default applies when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(minimum = 1, example = 60000)]
    pub timeout_ms: Option<u64>,
}

/// The exception that ended a run, or why the kernel could not finish it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CodeError {
    /// The exception's class (`ZeroDivisionError`); `KernelOutOfMemory` when the kernel was
    /// killed for memory, `KernelDied` when it died otherwise (both: its variables are gone,
    /// and the next run starts a new kernel), `TimeoutError` past `timeoutMs`.
    #[schema(example = "ZeroDivisionError")]
    pub name: String,
    #[schema(example = "division by zero")]
    pub value: String,
    /// As Python prints it, without colours.
    pub traceback: String,
}

/// The answer to a run, once it has ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// What the code displayed and the last expression's value, in order: each its
    /// representations keyed by MIME type (`text/plain`; `image/png` and other binary types
    /// as base64).
    #[schema(value_type = Vec<Object>, example = json!([{"text/plain": "42"}]))]
    pub results: Vec<serde_json::Map<String, serde_json::Value>>,
    pub stdout: String,
    pub stderr: String,
    pub error: Option<CodeError>,
    /// The kernel's count for this run; null when the kernel died before it counted it.
    pub execution_count: Option<u64>,
    /// Output past 8 MiB (stdout, stderr, results and the error together) was dropped.
    pub truncated: bool,
}

/// One code context: a kernel with its own variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeContext {
    #[schema(example = "default")]
    pub id: String,
    #[schema(example = "python")]
    pub language: String,
    /// RFC 3339.
    pub created_at: String,
    /// Runs so far in its kernel (0 after a start or restart).
    pub execution_count: u64,
    /// Code runs in it now.
    pub busy: bool,
}

impl From<agenthold_proto::CodeContext> for CodeContext {
    fn from(c: agenthold_proto::CodeContext) -> CodeContext {
        let agenthold_proto::CodeContext {
            id,
            language,
            created_at_ms,
            execution_count,
            busy,
        } = c;
        let created_at = chrono::DateTime::from_timestamp_millis(created_at_ms as i64)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        CodeContext {
            id,
            language,
            created_at,
            execution_count,
            busy,
        }
    }
}

impl From<agenthold_proto::CodeError> for CodeError {
    fn from(e: agenthold_proto::CodeError) -> CodeError {
        let agenthold_proto::CodeError {
            name,
            value,
            traceback,
        } = e;
        CodeError {
            name,
            value,
            traceback,
        }
    }
}

impl From<crate::code::Execution> for Execution {
    fn from(e: crate::code::Execution) -> Execution {
        let crate::code::Execution {
            results,
            stdout,
            stderr,
            error,
            execution_count,
            truncated,
        } = e;
        Execution {
            results,
            stdout,
            stderr,
            error: error.map(Into::into),
            execution_count,
            truncated,
        }
    }
}

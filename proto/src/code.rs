//! The `code.*` channels: code run in a Jupyter kernel that keeps its state between runs.
//!
//! A *context* is one kernel with its own variables. `code.run` runs code in a context (the
//! agent's default one, [`DEFAULT_CONTEXT`], made on first use, when the header names none);
//! after its `ok` reply sandboxd sends [`CodeEvent`]s, each framed as a header is (see
//! [`crate::header`]) but within [`MAX_CODE_EVENT_LEN`], the last one [`CodeEvent::Done`].

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::header::{read_body, write_limited, ProtoError};
use crate::session_id::is_session_id;

/// The context `code.run` uses when its header names none.
pub const DEFAULT_CONTEXT: &str = "default";
/// Largest piece of code one run takes, in bytes.
pub const MAX_CODE_LEN: usize = 1024 * 1024;
/// Most contexts (kernels) one sandbox keeps at once, the default one included.
pub const MAX_CONTEXTS: usize = 16;
/// Most bytes of output one run reports: stdout, stderr, results and the error together.
/// What comes after is dropped and the run's [`CodeDone::truncated`] says so.
pub const MAX_CODE_OUTPUT: usize = 8 * 1024 * 1024;
/// Largest single event: one result may take the whole output budget, plus its JSON.
pub const MAX_CODE_EVENT_LEN: usize = MAX_CODE_OUTPUT + 64 * 1024;
/// The only language there is a kernel for.
pub const PYTHON: &str = "python";

/// Opens `code.run`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CodeRun {
    pub code: String,
    /// The context to run in; [`DEFAULT_CONTEXT`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The kernel is interrupted after this many milliseconds, and the run ends with a
    /// `TimeoutError`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The agent's env, over the sandbox's own: a kernel this run starts begins with it (one
    /// already running keeps what it began with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
}

/// The bytes `env` takes as a process's environment (each `KEY=VALUE` with its NUL).
pub fn env_len(env: &[(String, String)]) -> usize {
    env.iter().map(|(k, v)| k.len() + v.len() + 2).sum()
}

/// Why a `code.run` header cannot be sent or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeRunInvalid {
    #[error(
        "the code and the agent's env take {0} bytes; at most {MAX_CODE_LEN} bytes (1 MiB) are \
         accepted"
    )]
    TooLarge(usize),
    #[error(transparent)]
    Context(#[from] ContextIdInvalid),
}

impl CodeRun {
    /// Checks the code's size and the context's name; both sides check.
    pub fn check(&self) -> Result<(), CodeRunInvalid> {
        let len = self.code.len() + env_len(&self.env);
        if len > MAX_CODE_LEN {
            return Err(CodeRunInvalid::TooLarge(len));
        }
        if let Some(c) = &self.context {
            check_context_id(c)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "context {0:?} is not a context id: contexts are \"{DEFAULT_CONTEXT}\" or an id that \
     creating one returned"
)]
pub struct ContextIdInvalid(pub String);

/// Whether `id` can name a context: the default one, or an id sandboxd made.
pub fn check_context_id(id: &str) -> Result<(), ContextIdInvalid> {
    if id == DEFAULT_CONTEXT || is_session_id(id) {
        Ok(())
    } else {
        Err(ContextIdInvalid(id.chars().take(64).collect()))
    }
}

/// Opens `code.context.create`: a new context with a kernel of its own, started at once with
/// the agent's `env` over the sandbox's own.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CodeContextCreate {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
}

/// Opens `code.context.list`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CodeContextList {}

/// Opens `code.context.restart`: the context's kernel is started anew, its variables gone.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CodeContextRestart {
    pub context: String,
    /// As [`CodeContextCreate::env`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
}

/// Opens `code.context.remove`: the context's kernel and everything it started are killed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CodeContextRemove {
    pub context: String,
}

/// One context, as the `code.context.*` channels report it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CodeContext {
    pub id: String,
    pub language: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The kernel's count of runs so far (0 after a start or restart).
    pub execution_count: u64,
    /// Whether code runs in it now.
    pub busy: bool,
}

/// What a run produced, one event at a time, in the order the kernel produced it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum CodeEvent {
    Stdout(String),
    Stderr(String),
    /// The last expression's value (`execute_result`) or something displayed
    /// (`display_data`): its representations keyed by MIME type (`text/plain`, `image/png`
    /// as base64...).
    Result(serde_json::Map<String, serde_json::Value>),
    /// The exception that ended the run, or the kernel's death.
    Error(CodeError),
    /// Always the last event.
    Done(CodeDone),
}

/// An exception, or why the kernel could not finish the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CodeError {
    /// The exception's class (`ZeroDivisionError`); [`KERNEL_DIED`], [`KERNEL_OUT_OF_MEMORY`]
    /// or [`TIMEOUT`] when the run did not end by itself.
    pub name: String,
    pub value: String,
    /// The traceback as Python prints it, without colours.
    pub traceback: String,
}

/// The error name of a run whose kernel died (the context starts a new one on its next run).
pub const KERNEL_DIED: &str = "KernelDied";
/// The error name of a run whose kernel the out-of-memory killer ended.
pub const KERNEL_OUT_OF_MEMORY: &str = "KernelOutOfMemory";
/// The error name of a run interrupted at its `timeoutMs`.
pub const TIMEOUT: &str = "TimeoutError";

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CodeDone {
    /// The kernel's count for this run; absent when the kernel died before it counted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_count: Option<u64>,
    /// Output past [`MAX_CODE_OUTPUT`] was dropped.
    #[serde(default)]
    pub truncated: bool,
}

impl CodeEvent {
    /// The bytes of output it counts against [`MAX_CODE_OUTPUT`].
    pub fn output_len(&self) -> usize {
        match self {
            CodeEvent::Stdout(s) | CodeEvent::Stderr(s) => s.len(),
            CodeEvent::Result(m) => m
                .iter()
                .map(|(k, v)| k.len() + v.as_str().map_or_else(|| v.to_string().len(), str::len))
                .sum(),
            CodeEvent::Error(e) => e.name.len() + e.value.len() + e.traceback.len(),
            CodeEvent::Done(_) => 0,
        }
    }
}

/// Writes one event of `code.run`.
pub async fn write_code_event<W: AsyncWrite + Unpin>(
    w: &mut W,
    event: &CodeEvent,
) -> Result<(), ProtoError> {
    write_limited(w, event, MAX_CODE_EVENT_LEN).await
}

/// Reads one event of `code.run`, refusing one over [`MAX_CODE_EVENT_LEN`] before reading it.
pub async fn read_code_event<R: AsyncRead + Unpin>(r: &mut R) -> Result<CodeEvent, ProtoError> {
    let body = read_body(r, MAX_CODE_EVENT_LEN).await?;
    serde_json::from_slice(&body).map_err(|e| ProtoError::Malformed(e.to_string()))
}

//! Code in the sandbox's kernels (`code.*`): a run's events as they come, and its contexts.

use agenthold_proto::{
    self as proto, CodeContext, CodeContextCreate, CodeContextList, CodeContextRemove,
    CodeContextRestart, CodeEvent, CodeRun, MAX_CODE_OUTPUT,
};

use super::{ConnError, SandboxConn};
use crate::activity::{Use, UseGuard};
use crate::tunnel::registry::LinkStream;

/// A run in progress. Dropping it ends the stream, which interrupts the code; while it lives,
/// the agent counts as in use.
pub struct CodeRunStream {
    stream: LinkStream,
    done: bool,
    /// Output bytes so far: sandboxd keeps a run within [`MAX_CODE_OUTPUT`], and a sandbox
    /// that sends more is cut off (what runs in a sandbox may stand in for sandboxd).
    seen: usize,
    _hold: UseGuard,
}

impl CodeRunStream {
    /// The next event; `None` after `done`. A stream that ends before `done`, or carries more
    /// than a run may, gives an error.
    pub async fn next(&mut self) -> Option<Result<CodeEvent, ConnError>> {
        if self.done {
            return None;
        }
        let event = match proto::read_code_event(&mut self.stream).await {
            Ok(e) => e,
            Err(_) => {
                self.done = true;
                return Some(Err(ConnError::Lost));
            }
        };
        self.seen = self.seen.saturating_add(event.output_len());
        // An error's report may be cut to its first 4 KiB past the budget: allow for it.
        if self.seen > MAX_CODE_OUTPUT + 2 * 4096 {
            self.done = true;
            return Some(Err(ConnError::CodeOutputOverflow));
        }
        self.done = matches!(event, CodeEvent::Done(_));
        Some(Ok(event))
    }
}

impl SandboxConn {
    /// Runs code in a context once its kernel is ready (starting it if need be).
    pub async fn run_code(&self, run: CodeRun) -> Result<CodeRunStream, ConnError> {
        let hold = self.activity.hold(&self.id, Use::Exec);
        let (stream, _) = self.open(run).await?;
        Ok(CodeRunStream {
            stream,
            done: false,
            seen: 0,
            _hold: hold,
        })
    }

    /// `env`: the agent's, which the new kernel starts with (see [`crate::code::kernel_env`]).
    pub async fn create_code_context(
        &self,
        env: Vec<(String, String)>,
    ) -> Result<CodeContext, ConnError> {
        self.activity.touch(&self.id);
        Ok(self.open(CodeContextCreate { env }).await?.1)
    }

    pub async fn list_code_contexts(&self) -> Result<Vec<CodeContext>, ConnError> {
        Ok(self.open(CodeContextList {}).await?.1)
    }

    pub async fn restart_code_context(
        &self,
        context: &str,
        env: Vec<(String, String)>,
    ) -> Result<CodeContext, ConnError> {
        self.activity.touch(&self.id);
        let header = CodeContextRestart {
            context: context.into(),
            env,
        };
        Ok(self.open(header).await?.1)
    }

    pub async fn remove_code_context(&self, context: &str) -> Result<(), ConnError> {
        self.activity.touch(&self.id);
        let header = CodeContextRemove {
            context: context.into(),
        };
        self.open(header).await?;
        Ok(())
    }
}

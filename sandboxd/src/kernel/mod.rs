//! Code contexts: each one a Jupyter kernel (ipykernel) run as the sandbox's account and spoken
//! to over the Jupyter messaging protocol, keeping its variables between runs.
//!
//! Contexts belong to the [`Sandbox`](crate::Sandbox): they outlive tunnel reconnects and end
//! with it (a sleeping agent has none). A context whose kernel died (the OOM killer, `exit()`)
//! starts a new kernel on its next run.

mod launch;
mod oom;
mod run;
mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenthold_proto::code::{DEFAULT_CONTEXT, PYTHON};
use agenthold_proto::{ChannelError, CodeContext, ErrorCode, MAX_CONTEXTS};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::sync::OwnedMutexGuard;

pub use run::{EventTx, Outcome};

use crate::sandbox::Sandbox;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(
        "this sandbox's image has no Jupyter kernel for Python: install Debian's \
         python3-ipykernel in the image to run code ({0})"
    )]
    Missing(String),
    #[error("the code kernel could not start: {0}")]
    Start(String),
    #[error("no code context {0:?}")]
    NotFound(String),
    #[error("this sandbox has {MAX_CONTEXTS} code contexts already: remove one first")]
    TooMany,
}

impl KernelError {
    pub fn to_channel_error(&self) -> ChannelError {
        let code = match self {
            KernelError::Missing(_) => ErrorCode::Unsupported,
            KernelError::Start(_) => ErrorCode::Io,
            KernelError::NotFound(_) => ErrorCode::NotFound,
            KernelError::TooMany => ErrorCode::Busy,
        };
        ChannelError::new(code, self.to_string())
    }
}

/// One context: its kernel (started on demand) and what `code.context.list` reports.
struct Context {
    id: String,
    created_at_ms: u64,
    kernel: Arc<tokio::sync::Mutex<Option<launch::Started>>>,
    /// The kernel's process group while it runs, 0 without one: lets a remove or restart kill
    /// a kernel that a run holds.
    pgid: AtomicI32,
    busy: AtomicBool,
    execution_count: AtomicU64,
}

impl Context {
    fn new(id: String) -> Arc<Context> {
        Arc::new(Context {
            id,
            created_at_ms: crate::terminal::session::now_ms(),
            kernel: Arc::default(),
            pgid: AtomicI32::new(0),
            busy: AtomicBool::new(false),
            execution_count: AtomicU64::new(0),
        })
    }

    fn info(&self) -> CodeContext {
        CodeContext {
            id: self.id.clone(),
            language: PYTHON.into(),
            created_at_ms: self.created_at_ms,
            execution_count: self.execution_count.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
        }
    }

    fn kill(&self) {
        let pgid = self.pgid.swap(0, Ordering::AcqRel);
        if pgid > 0 {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }

    /// Starts the kernel if the context has none, with `env` (the agent's) over the sandbox's.
    async fn ensure_started(
        &self,
        sb: &Sandbox,
        slot: &mut Option<launch::Started>,
        env: &[(String, String)],
    ) -> Result<(), KernelError> {
        if slot.as_ref().is_some_and(|k| k.exited.borrow().is_none()) {
            return Ok(());
        }
        *slot = None;
        self.execution_count.store(0, Ordering::Relaxed);
        let started = launch::start(sb, env).await?;
        self.pgid.store(started.pgid, Ordering::Release);
        *slot = Some(started);
        Ok(())
    }
}

/// A context held for one run: nothing else runs in it until this is dropped.
pub struct Held {
    context: Arc<Context>,
    kernel: OwnedMutexGuard<Option<launch::Started>>,
}

impl Held {
    /// Runs the code, sending its events to `tx`, the last one `done`.
    pub async fn execute(mut self, code: String, timeout: Option<Duration>, tx: &EventTx) {
        let Some(k) = self.kernel.as_mut() else {
            return;
        };
        self.context.busy.store(true, Ordering::Relaxed);
        let outcome = run::execute(k, code, timeout, tx).await;
        self.context.busy.store(false, Ordering::Relaxed);
        match outcome {
            Outcome::Finished { execution_count } => {
                if let Some(n) = execution_count {
                    self.context.execution_count.store(n, Ordering::Relaxed);
                }
            }
            Outcome::KernelGone => {
                self.context.pgid.store(0, Ordering::Release);
                *self.kernel = None;
            }
        }
    }
}

/// The sandbox's contexts by id.
#[derive(Default, Clone)]
pub struct Kernels {
    inner: Arc<Mutex<HashMap<String, Arc<Context>>>>,
}

impl Kernels {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Context>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, id: &str) -> Result<Arc<Context>, KernelError> {
        self.map()
            .get(id)
            .cloned()
            .ok_or_else(|| KernelError::NotFound(id.to_string()))
    }

    fn insert(&self, id: String) -> Result<Arc<Context>, KernelError> {
        let mut map = self.map();
        if let Some(c) = map.get(&id) {
            return Ok(c.clone());
        }
        if map.len() >= MAX_CONTEXTS {
            return Err(KernelError::TooMany);
        }
        let c = Context::new(id.clone());
        map.insert(id, c.clone());
        Ok(c)
    }

    /// Takes a context for a run once its kernel is ready; the default one is made on first
    /// use. Waits while another run holds it.
    pub async fn hold(
        &self,
        sb: &Sandbox,
        id: Option<&str>,
        env: &[(String, String)],
    ) -> Result<Held, KernelError> {
        let context = match id {
            None | Some(DEFAULT_CONTEXT) => self.insert(DEFAULT_CONTEXT.into())?,
            Some(id) => self.get(id)?,
        };
        let mut kernel = context.kernel.clone().lock_owned().await;
        if let Err(e) = context.ensure_started(sb, &mut kernel, env).await {
            // A default context that never started is not kept: listing it would mislead.
            if context.id == DEFAULT_CONTEXT {
                self.map().remove(DEFAULT_CONTEXT);
            }
            return Err(e);
        }
        Ok(Held { context, kernel })
    }

    pub async fn create(
        &self,
        sb: &Sandbox,
        env: &[(String, String)],
    ) -> Result<CodeContext, KernelError> {
        let context = self.insert(crate::terminal::new_id())?;
        let mut kernel = context.kernel.lock().await;
        if let Err(e) = context.ensure_started(sb, &mut kernel, env).await {
            self.map().remove(&context.id);
            return Err(e);
        }
        Ok(context.info())
    }

    pub fn list(&self) -> Vec<CodeContext> {
        let mut all: Vec<CodeContext> = self.map().values().map(|c| c.info()).collect();
        all.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        all
    }

    /// Kills the kernel (a run in it ends with `KernelDied`) and starts a new one.
    pub async fn restart(
        &self,
        sb: &Sandbox,
        id: &str,
        env: &[(String, String)],
    ) -> Result<CodeContext, KernelError> {
        let context = self.get(id)?;
        context.kill();
        let mut kernel = context.kernel.lock().await;
        *kernel = None;
        context.ensure_started(sb, &mut kernel, env).await?;
        Ok(context.info())
    }

    pub fn remove(&self, id: &str) -> Result<(), KernelError> {
        let context = self
            .map()
            .remove(id)
            .ok_or_else(|| KernelError::NotFound(id.to_string()))?;
        context.kill();
        Ok(())
    }
}

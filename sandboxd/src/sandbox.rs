//! What every channel of every session shares: the options, the process table, the CPU meter and
//! the tasks to wait for at shutdown. It outlives tunnel reconnects.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenthold_proto::LOGICAL_HOME;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::account::{Account, UnknownUser};
use crate::channels::fs::WatchBudget;
use crate::cpu::{CpuMeter, CpuScope};
use crate::fsid::FsIdentity;
use crate::kernel::Kernels;
use crate::paths::PathMap;
use crate::process::Processes;
use crate::procs::ProcessTable;
use crate::terminal::Terminals;
use crate::uploads::Uploads;

#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// Where `/home/agent` really is.
    pub home: PathBuf,
    /// Refuse paths outside the home instead of serving them as they are.
    pub confine_to_home: bool,
    pub cpu_scope: CpuScope,
    /// Shells and commands run as this account.
    pub account: Account,
    pub activity_interval: Duration,
    pub ping_interval: Duration,
    /// Where `fs.write` records its uploads in progress, outside the home and out of the
    /// agent's reach (see [`crate::uploads`]); `None` keeps no records.
    pub upload_records: Option<PathBuf>,
    /// Variables every shell and command starts with, after the account's own (boot.json's
    /// `env`).
    pub env: Vec<(String, String)>,
    /// Where background processes keep their records and output, outside the home and out of
    /// the account's reach; `None` runs none.
    pub process_dir: Option<PathBuf>,
    /// The program that holds each background process's tree ([`crate::process::shim`]);
    /// `None` starts them in a process group of their own instead.
    pub shim: Option<PathBuf>,
    /// The image's variables every program keeps (`PATH`, `VIRTUAL_ENV`: see
    /// [`crate::spawn::env::image_env`]).
    pub image_env: Vec<(String, String)>,
}

pub const DEFAULT_ACTIVITY_INTERVAL: Duration = Duration::from_secs(5);
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(15);
/// The container's record directory: in the container's own filesystem, which a wake keeps
/// (a rebuild does not, and what its records named stays).
pub const CONTAINER_UPLOAD_RECORDS: &str = "/var/lib/agenthold/uploads";
/// The container's process directory, beside the upload records and for the same reasons.
pub const CONTAINER_PROCESS_DIR: &str = "/var/lib/agenthold/processes";

impl SandboxOptions {
    /// Inside a sandbox container: the real `/home/agent`, the whole container's CPU, the
    /// `agent` account when the image has one, else the image's `USER`.
    pub fn container() -> Result<SandboxOptions, UnknownUser> {
        Ok(SandboxOptions {
            home: PathBuf::from(LOGICAL_HOME),
            confine_to_home: false,
            cpu_scope: CpuScope::Container,
            account: Account::detect()?,
            activity_interval: DEFAULT_ACTIVITY_INTERVAL,
            ping_interval: DEFAULT_PING_INTERVAL,
            upload_records: Some(PathBuf::from(CONTAINER_UPLOAD_RECORDS)),
            env: Vec::new(),
            process_dir: Some(PathBuf::from(CONTAINER_PROCESS_DIR)),
            shim: crate::process::shim::self_exe(),
            image_env: crate::spawn::env::image_env(),
        })
    }

    /// Inside the server (the fake driver): `home` stands in for `/home/agent`, nothing outside
    /// it is served, commands run as the server's own user.
    pub fn fake(home: PathBuf) -> SandboxOptions {
        SandboxOptions {
            home,
            confine_to_home: true,
            cpu_scope: CpuScope::Descendants,
            account: Account::current(),
            activity_interval: DEFAULT_ACTIVITY_INTERVAL,
            ping_interval: DEFAULT_PING_INTERVAL,
            upload_records: None,
            env: Vec::new(),
            process_dir: None,
            shim: crate::process::shim::self_exe(),
            // The server's own environment is not an image's.
            image_env: vec![("PATH".into(), crate::spawn::env::PATH.into())],
        }
    }
}

/// How long shutdown waits for channels to kill and reap their processes before it kills
/// whatever is left itself.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The shared state; cloning is cheap.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    opts: SandboxOptions,
    paths: PathMap,
    procs: ProcessTable,
    uploads: Uploads,
    fs_identity: FsIdentity,
    /// The `fs.watch` channels' share of inotify.
    watch_budget: WatchBudget,
    cpu: Mutex<CpuMeter>,
    /// Terminal sessions: they outlive tunnel reconnects and end with the sandbox.
    terminals: Terminals,
    /// Background processes: they outlive tunnel reconnects; the sandbox's end makes them
    /// `lost`.
    processes: Processes,
    /// Code contexts: their kernels outlive tunnel reconnects and end with the sandbox.
    kernels: Kernels,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

impl Sandbox {
    pub fn new(opts: SandboxOptions) -> Sandbox {
        let paths = PathMap {
            home: opts.home.clone(),
            confine_to_home: opts.confine_to_home,
        };
        let cpu = Mutex::new(CpuMeter::new(opts.cpu_scope));
        let uploads = Uploads::new(
            opts.upload_records.clone(),
            opts.home.clone(),
            opts.account.uid,
        );
        let fs_identity = FsIdentity::of(&opts.account);
        let processes = Processes::load(opts.process_dir.clone());
        Sandbox {
            inner: Arc::new(Inner {
                fs_identity,
                watch_budget: WatchBudget::default(),
                opts,
                paths,
                procs: ProcessTable::default(),
                uploads,
                cpu,
                terminals: Terminals::default(),
                processes,
                kernels: Kernels::default(),
                tasks: TaskTracker::new(),
                cancel: CancellationToken::new(),
            }),
        }
    }

    pub fn options(&self) -> &SandboxOptions {
        &self.inner.opts
    }

    pub fn account(&self) -> &Account {
        &self.inner.opts.account
    }

    /// Who the file channels act as (see [`crate::fsid`]).
    pub fn fs_identity(&self) -> &FsIdentity {
        &self.inner.fs_identity
    }

    pub fn watch_budget(&self) -> &WatchBudget {
        &self.inner.watch_budget
    }

    pub fn paths(&self) -> &PathMap {
        &self.inner.paths
    }

    pub fn procs(&self) -> &ProcessTable {
        &self.inner.procs
    }

    pub fn uploads(&self) -> &Uploads {
        &self.inner.uploads
    }

    pub fn terminals(&self) -> &Terminals {
        &self.inner.terminals
    }

    pub fn processes(&self) -> &Processes {
        &self.inner.processes
    }

    pub fn kernels(&self) -> &Kernels {
        &self.inner.kernels
    }

    /// Cancelled when the sandbox shuts down; channels kill their processes then.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// Runs a channel's task so that shutdown can wait for it.
    pub fn spawn<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.inner.tasks.spawn(fut);
    }

    /// Total CPU milliseconds so far, never decreasing.
    pub async fn cpu_ms(&self) -> u64 {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut meter = this.inner.cpu.lock().unwrap_or_else(|e| e.into_inner());
            meter.sample(&this.inner.procs)
        })
        .await
        .unwrap_or(0)
    }

    /// Stops every channel and kills every process sandboxd started.
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.inner.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("channels did not end in time; killing what is left");
        }
        self.inner.procs.kill_all();
    }
}

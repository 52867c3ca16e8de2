//! Starting a background process: under its [shim](super::shim) when sandboxd has one, or, in
//! test binaries that run sandboxd in-process and cannot be their own shim, directly in a
//! process group of its own (then a kill reaches the group and what `/proc` shows below the
//! command, but not what escaped with `setsid` after its parent died).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::shim::{Ended, ShimArgs, StatusLine};
use crate::procs;
use crate::sandbox::Sandbox;
use crate::spawn::{pre_exec, Prepared};

/// How long a shim may take to say its command runs.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// What starting a process gave.
pub enum Start {
    Running(Box<Launched>),
    /// The command could not be run: exit code 127 (not found) or 126, and why.
    CannotStart {
        code: i32,
        message: String,
    },
}

/// A running process and its pipes.
pub struct Launched {
    /// The command's pid: the leader of its process group.
    pub pid: i32,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    /// The shim, or the command itself when there is none.
    child: Child,
    /// The shim's status pipe.
    status: Option<Lines<BufReader<pipe::Receiver>>>,
}

/// Starts `command` with `p`'s cwd and env, as `p` says (the sandbox's account, or root).
///
/// Call from a task on the runtime's own threads, never from `spawn_blocking`: the shim's
/// parent-death signal fires when the thread that started it ends.
pub async fn launch(
    sb: &Sandbox,
    command: &[String],
    p: &Prepared,
    with_stdin: bool,
) -> std::io::Result<Start> {
    let stdin = || {
        if with_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    match &sb.options().shim {
        Some(shim) => {
            let account = p.switch.as_ref().map(|s| {
                let groups = s.groups.iter().map(|g| g.as_raw()).collect();
                (s.uid, s.gid, groups)
            });
            launch_shim(shim, command, p, account, stdin()).await
        }
        None => {
            let switch = p.switch.clone();
            let mut cmd = Command::new(&command[0]);
            cmd.args(&command[1..]);
            configure(&mut cmd, p, stdin());
            // SAFETY: the closure only makes async-signal-safe calls and allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    pre_exec::default_signals()?;
                    if let Some(s) = &switch {
                        s.apply()?;
                    }
                    Ok(())
                });
            }
            match cmd.spawn() {
                Ok(child) => Ok(Start::Running(Box::new(Launched::from_child(child, None)))),
                Err(e) => Ok(cannot_start(&command[0], &e)),
            }
        }
    }
}

fn configure(cmd: &mut Command, p: &Prepared, stdin: Stdio) {
    cmd.env_clear()
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&p.cwd)
        .process_group(0)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
}

fn cannot_start(program: &str, e: &std::io::Error) -> Start {
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Start::CannotStart {
        code,
        message: format!("cannot run {program:?}: {e}"),
    }
}

async fn launch_shim(
    shim: &Path,
    command: &[String],
    p: &Prepared,
    account: Option<(u32, u32, Vec<u32>)>,
    stdin: Stdio,
) -> std::io::Result<Start> {
    let (status_r, status_w) = std::io::pipe()?;
    let status_fd = status_w.as_raw_fd();
    let args = ShimArgs {
        status_fd,
        parent: std::process::id() as i32,
        account,
        command: command.to_vec(),
    };
    let mut cmd = Command::new(shim);
    cmd.args(args.to_args());
    configure(&mut cmd, p, stdin);
    // SAFETY: one fcntl, async-signal-safe; the descriptor stays open in the parent until
    // after the spawn.
    unsafe {
        cmd.pre_exec(move || {
            // The shim inherits its end of the status pipe (the parent's copy is close-on-exec).
            if nix::libc::fcntl(status_fd, nix::libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn();
    drop(status_w);
    let mut child = child?;
    let mut lines = BufReader::new(pipe::Receiver::from_owned_fd(OwnedFd::from(status_r))?).lines();
    let first = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await;
    match first {
        Ok(Ok(Some(line))) => match StatusLine::parse(&line) {
            Some(StatusLine::Pid(pid)) => {
                let mut l = Launched::from_child(child, Some(lines));
                l.pid = pid;
                Ok(Start::Running(Box::new(l)))
            }
            Some(StatusLine::CannotStart { code, message }) => {
                let _ = child.wait().await;
                Ok(Start::CannotStart { code, message })
            }
            _ => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                Err(std::io::Error::other(format!(
                    "the process shim said {line:?}"
                )))
            }
        },
        Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
            let _ = child.start_kill();
            let status = child.wait().await;
            Err(std::io::Error::other(format!(
                "the process shim ended before the command started ({status:?})"
            )))
        }
    }
}

impl Launched {
    fn from_child(mut child: Child, status: Option<Lines<BufReader<pipe::Receiver>>>) -> Launched {
        Launched {
            pid: child.id().map(|p| p as i32).unwrap_or(-1),
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child,
            status,
        }
    }

    /// The pid sandboxd itself started (the shim's, or the command's): the group its
    /// [`crate::procs::ProcessTable`] entry names.
    pub fn own_pid(&self) -> Option<i32> {
        self.child.id().map(|p| p as i32)
    }

    /// Waits for the command's end; with a shim, for its whole tree's. `None` when the shim
    /// died without saying (killed by hand inside the sandbox).
    pub async fn wait(&mut self) -> Option<Ended> {
        match self.status.as_mut() {
            Some(lines) => {
                let mut ended = None;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(StatusLine::Ended(e)) = StatusLine::parse(&line) {
                        ended = Some(e);
                    }
                }
                let _ = self.child.wait().await;
                ended
            }
            None => {
                use std::os::unix::process::ExitStatusExt;
                let status = self.child.wait().await.ok()?;
                // What it left running in its group goes with it.
                let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
                match (status.code(), status.signal()) {
                    (Some(c), _) => Some(Ended::Exited(c)),
                    (None, Some(s)) => Some(Ended::Signaled(s)),
                    _ => None,
                }
            }
        }
    }

    /// A handle that can signal and kill the process while another task waits for it.
    pub fn control(&self) -> Control {
        Control {
            pid: self.pid,
            shim: self.status.as_ref().and_then(|_| self.own_pid()),
        }
    }
}

/// Signals a running process.
#[derive(Debug, Clone, Copy)]
pub struct Control {
    pid: i32,
    shim: Option<i32>,
}

impl Control {
    /// Sends `sig` to the command's process group.
    pub fn signal(&self, sig: Signal) -> nix::Result<()> {
        killpg(Pid::from_raw(self.pid), sig)
    }

    /// Kills the whole tree: the shim does it; without one, the group and what `/proc` shows
    /// below the command.
    pub fn kill_tree(&self) {
        match self.shim {
            Some(shim) => {
                let _ = kill(Pid::from_raw(shim), Signal::SIGTERM);
            }
            None => {
                let below = procs::descendants(self.pid, &procs::all_processes());
                let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
                for p in below {
                    let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
                }
            }
        }
    }
}

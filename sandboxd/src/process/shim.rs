//! The shim: a small parent that holds one background process's whole tree.
//!
//! A process group is not a tree: anything can leave it with `setsid`, and a killed parent's
//! children move to init. So every background process gets a parent of its own, this shim
//! (sandboxd's own binary, run with [`SHIM_ARG`]), which is a *child subreaper*: whatever the
//! command starts and orphans is re-parented to the shim instead of init, so the tree never
//! leaves it. When the command ends, or sandboxd sends the shim `SIGTERM` (a kill, a timeout, a
//! shutdown), or sandboxd dies (the parent-death signal), the shim kills every process below
//! it, reaps them all, and reports how the command itself ended.
//!
//! It talks to sandboxd over a pipe (the status fd): a line `pid N` once the command runs (or
//! `error CODE MESSAGE` when it cannot be started), then `exit CODE` or `signal N` at the end.
//! The shim runs as sandboxd does (root in a container); the command runs as the account, so
//! the account cannot signal the shim.

use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, signal, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::procs;
use crate::spawn::pre_exec;

/// The first argument that makes sandboxd (or agenthold) a shim.
pub const SHIM_ARG: &str = "__agenthold-process-shim";

static CAN_BE_SHIM: AtomicBool = AtomicBool::new(false);

/// Call first thing in `main` of a binary that links sandboxd: when the process was started as
/// a shim, runs it and returns the exit code to exit with; otherwise notes that this binary
/// can serve as its own shim ([`self_exe`]) and returns `None`.
pub fn run_if_invoked() -> Option<i32> {
    let mut args = std::env::args();
    if args.nth(1).as_deref() == Some(SHIM_ARG) {
        return Some(main(args.collect()));
    }
    CAN_BE_SHIM.store(true, Ordering::Relaxed);
    None
}

/// The program to run as the shim: this binary, when its `main` called [`run_if_invoked`].
/// Test binaries that run sandboxd in-process cannot, and start processes without a shim.
pub fn self_exe() -> Option<std::path::PathBuf> {
    CAN_BE_SHIM
        .load(Ordering::Relaxed)
        .then(|| std::path::PathBuf::from("/proc/self/exe"))
}

/// What the shim is told on its command line (after [`SHIM_ARG`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ShimArgs {
    pub status_fd: RawFd,
    pub parent: i32,
    /// `Some((uid, gid, groups))` when the command must switch to the account.
    pub account: Option<(u32, u32, Vec<u32>)>,
    pub command: Vec<String>,
}

impl ShimArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut out = vec![
            SHIM_ARG.to_string(),
            self.status_fd.to_string(),
            self.parent.to_string(),
        ];
        match &self.account {
            Some((uid, gid, groups)) => {
                out.push(format!("{uid}:{gid}"));
                out.push(
                    groups
                        .iter()
                        .map(|g| g.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                );
            }
            None => {
                out.push("-".into());
                out.push("-".into());
            }
        }
        out.push("--".into());
        out.extend(self.command.iter().cloned());
        out
    }

    fn parse(args: &[String]) -> Option<ShimArgs> {
        let [fd, parent, ids, groups, dashes, command @ ..] = args else {
            return None;
        };
        if dashes != "--" || command.is_empty() {
            return None;
        }
        let account = if ids == "-" {
            None
        } else {
            let (uid, gid) = ids.split_once(':')?;
            let groups = if groups.is_empty() {
                Vec::new()
            } else {
                groups
                    .split(',')
                    .map(|g| g.parse().ok())
                    .collect::<Option<Vec<u32>>>()?
            };
            Some((uid.parse().ok()?, gid.parse().ok()?, groups))
        };
        Some(ShimArgs {
            status_fd: fd.parse().ok()?,
            parent: parent.parse().ok()?,
            account,
            command: command.to_vec(),
        })
    }
}

/// How the command ended, as the shim reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
}

/// One line of the status pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusLine {
    Pid(i32),
    CannotStart { code: i32, message: String },
    Ended(Ended),
}

impl StatusLine {
    pub fn parse(line: &str) -> Option<StatusLine> {
        let (word, rest) = line.trim_end().split_once(' ')?;
        match word {
            "pid" => rest.parse().ok().map(StatusLine::Pid),
            "exit" => rest
                .parse()
                .ok()
                .map(|c| StatusLine::Ended(Ended::Exited(c))),
            "signal" => rest
                .parse()
                .ok()
                .map(|s| StatusLine::Ended(Ended::Signaled(s))),
            "error" => {
                let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
                Some(StatusLine::CannotStart {
                    code: code.parse().ok()?,
                    message: message.to_string(),
                })
            }
            _ => None,
        }
    }
}

fn main(args: Vec<String>) -> i32 {
    let Some(args) = ShimArgs::parse(&args) else {
        eprintln!("{SHIM_ARG}: bad arguments (this mode is sandboxd's own)");
        return 2;
    };
    // SAFETY: sandboxd handed us this descriptor for our own use, and nothing else owns it.
    let mut status = unsafe { std::fs::File::from_raw_fd(args.status_fd) };
    // The command must not hold the status pipe.
    let _ = nix::fcntl::fcntl(
        &status,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    close_inherited(args.status_fd);
    let _ = nix::sys::prctl::set_child_subreaper(true);
    // If sandboxd dies, the tree goes with it (SIGTERM is our "kill the tree").
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    if nix::unistd::getppid().as_raw() != args.parent {
        return 1;
    }
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGTERM);
    waited.add(Signal::SIGCHLD);
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&waited), None);
    // Nothing but our own SIGTERM (and the kernel's SIGKILL) ends the shim: a tree whose
    // holder died would leave the tree to init, unwatched. The command gets the default
    // dispositions back before it runs.
    for sig in Signal::iterator() {
        if !matches!(
            sig,
            Signal::SIGTERM | Signal::SIGCHLD | Signal::SIGKILL | Signal::SIGSTOP
        ) {
            // SAFETY: only sets a disposition; no handler of ours.
            let _ = unsafe { signal(sig, SigHandler::SigIgn) };
        }
    }

    let mut cmd = std::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..]).process_group(0);
    let account = args.account.clone();
    let groups: Vec<nix::unistd::Gid> = account
        .as_ref()
        .map(|(_, _, g)| g.iter().map(|g| nix::unistd::Gid::from_raw(*g)).collect())
        .unwrap_or_default();
    // SAFETY: the closure only makes async-signal-safe calls and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            pre_exec::default_signals()?;
            if let Some((uid, gid, _)) = account {
                pre_exec::drop_privileges(uid, gid, &groups)?;
            }
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let _ = writeln!(status, "error {code} cannot run {:?}: {e}", args.command[0]);
            return 0;
        }
    };
    let main_pid = child.id() as i32;
    let _ = writeln!(status, "pid {main_pid}");
    // Only the tree holds the command's pipes from now on, so their end is the tree's end.
    let _ = release_stdio();
    let mut shim = Shim {
        main: Pid::from_raw(main_pid),
        main_ended: None,
    };
    loop {
        match waited.wait() {
            Ok(Signal::SIGTERM) => {
                shim.kill_tree();
                break;
            }
            Ok(_) => {
                shim.reap();
                if shim.main_ended.is_some() {
                    shim.kill_tree();
                    break;
                }
            }
            Err(_) => {}
        }
    }
    let line = match shim.main_ended {
        Some(Ended::Exited(c)) => format!("exit {c}"),
        Some(Ended::Signaled(s)) => format!("signal {s}"),
        None => "signal 9".into(),
    };
    let _ = writeln!(status, "{line}");
    0
}

/// Closes every descriptor but the standard three and the status pipe: what the parent let
/// leak must not reach the command (a pipe held open there would outlive the tree).
fn close_inherited(status_fd: RawFd) {
    let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if fd > 2 && fd != status_fd {
            // SAFETY: this process owns its descriptors and uses none of these; the one the
            // directory listing held is already closed, and closing it again fails harmlessly.
            unsafe {
                nix::libc::close(fd);
            }
        }
    }
}

fn release_stdio() -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    let null = std::fs::File::open("/dev/null").map_err(|_| Errno::ENOENT)?;
    for fd in 0..=2 {
        // SAFETY: dup2 onto the standard descriptors, which this process owns.
        if unsafe { nix::libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(Errno::last());
        }
    }
    Ok(())
}

struct Shim {
    main: Pid,
    main_ended: Option<Ended>,
}

impl Shim {
    /// Reaps every child that has ended; notes the command's own end.
    fn reap(&mut self) -> bool {
        loop {
            match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => return true,
                Ok(WaitStatus::Exited(pid, code)) if pid == self.main => {
                    self.main_ended = Some(Ended::Exited(code));
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == self.main => {
                    self.main_ended = Some(Ended::Signaled(sig as i32));
                }
                Ok(_) => {}
                Err(Errno::EINTR) => {}
                // No children left at all.
                Err(_) => return false,
            }
        }
    }

    /// SIGKILLs every process below the shim until none is left, reaping as it goes.
    fn kill_tree(&mut self) {
        let me = std::process::id() as i32;
        // A process the kernel cannot kill yet (stuck in uninterruptible sleep) must not hold
        // the shim forever: after this many rounds the shim reports and leaves it.
        for _ in 0..KILL_ROUNDS {
            let below = procs::descendants(me, &procs::all_processes());
            for p in below.iter().filter(|p| !p.zombie) {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            }
            if !self.reap() {
                return;
            }
            // Killed processes take a moment to die and reach us; their children, forked
            // before the kill, are in the next round.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Rounds of `kill_tree` (2 ms apart, so about ten seconds).
const KILL_ROUNDS: u32 = 5000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip() {
        for account in [None, Some((1000, 1000, vec![])), Some((5, 6, vec![7, 8]))] {
            let a = ShimArgs {
                status_fd: 9,
                parent: 123,
                account,
                command: vec!["sh".into(), "-c".into(), "echo -- hi".into()],
            };
            let args = a.to_args();
            assert_eq!(args[0], SHIM_ARG);
            assert_eq!(ShimArgs::parse(&args[1..]), Some(a));
        }
        assert_eq!(ShimArgs::parse(&["1".into()]), None);
    }

    #[test]
    fn status_lines() {
        assert_eq!(StatusLine::parse("pid 42\n"), Some(StatusLine::Pid(42)));
        assert_eq!(
            StatusLine::parse("exit 3"),
            Some(StatusLine::Ended(Ended::Exited(3)))
        );
        assert_eq!(
            StatusLine::parse("signal 15"),
            Some(StatusLine::Ended(Ended::Signaled(15)))
        );
        assert_eq!(
            StatusLine::parse("error 127 cannot run \"x\": not found"),
            Some(StatusLine::CannotStart {
                code: 127,
                message: "cannot run \"x\": not found".into()
            })
        );
        assert_eq!(StatusLine::parse("junk"), None);
    }
}

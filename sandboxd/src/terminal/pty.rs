//! Opening a terminal and starting a shell on it as the account.
//!
//! Spawned by hand (openpty + `setsid` + `TIOCSCTTY` in `pre_exec`) because portable-pty can
//! neither switch users nor avoid `getpwuid`, which a static binary must not call.

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::libc;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, Command};

use crate::sandbox::Sandbox;
use crate::spawn::{env, pre_exec};

pub const DEFAULT_TERM: &str = "xterm-256color";
/// How long a hung-up shell gets to exit before its session is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(2);

pub type Master = AsyncFd<OwnedFd>;

pub struct Terminal {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

pub fn open_terminal(cols: u16, rows: u16) -> nix::Result<Terminal> {
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    // O_CLOEXEC from the start, so commands spawned meanwhile by other channels never inherit
    // the terminal (which would keep it open after the shell exits).
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname_r(&master)?;
    let slave = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(name)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    // SAFETY: into_raw_fd hands over sole ownership of a valid descriptor.
    let master = unsafe { OwnedFd::from_raw_fd(master.into_raw_fd()) };
    let flags = OFlag::from_bits_truncate(fcntl(&master, FcntlArg::F_GETFL)?);
    fcntl(&master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    set_size(&master, cols, rows)?;
    Ok(Terminal {
        master,
        slave: slave.into(),
    })
}

pub fn set_size(fd: &OwnedFd, cols: u16, rows: u16) -> nix::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which outlives the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    Errno::result(rc).map(drop)
}

/// Starts a login shell, or `command` through the account's shell, on `term`.
pub fn spawn_shell(
    sb: &Sandbox,
    term: &Terminal,
    term_name: &str,
    command: Option<&str>,
    extra_env: &[(String, String)],
) -> std::io::Result<Child> {
    let account = sb.account();
    let home = &sb.options().home;
    let mut cmd = Command::new(&account.shell);
    match command {
        Some(line) => {
            cmd.arg("-c").arg(line);
        }
        None => {
            cmd.arg0(account.login_argv0());
        }
    }
    cmd.env_clear()
        .envs(env::base(sb, agenthold_proto::RunAs::Agent))
        .envs(extra_env.iter().map(|(k, v)| (k, v)))
        .env("TERM", term_name)
        .current_dir(home)
        .stdin(Stdio::from(term.slave.try_clone()?))
        .stdout(Stdio::from(term.slave.try_clone()?))
        .stderr(Stdio::from(term.slave.try_clone()?));
    let switch = account.needs_switch();
    if switch {
        nix::unistd::fchown(
            &term.slave,
            Some(nix::unistd::Uid::from_raw(account.uid)),
            Some(nix::unistd::Gid::from_raw(account.gid)),
        )?;
    }
    let (uid, gid, groups) = (account.uid, account.gid, pre_exec::gids(account));
    // SAFETY: the closure only makes async-signal-safe calls and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            pre_exec::default_signals()?;
            nix::unistd::setsid()?;
            // Stdin is the terminal by now: make it our controlling terminal.
            if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if switch {
                pre_exec::drop_privileges(uid, gid, &groups)?;
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// What a closed terminal window does: SIGHUP to the shell, then SIGKILL if it lingers.
pub async fn hang_up(pid: i32, child: &mut Child) -> std::io::Result<std::process::ExitStatus> {
    let group = Pid::from_raw(pid);
    let _ = killpg(group, Signal::SIGHUP);
    let _ = killpg(group, Signal::SIGCONT);
    match tokio::time::timeout(HANGUP_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = killpg(group, Signal::SIGKILL);
            child.wait().await
        }
    }
}

/// The exit code a viewer is told: the code, or `128 + signal`, or -1.
pub fn exit_code(status: std::io::Result<std::process::ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(st) => st
            .code()
            .or_else(|| st.signal().map(|s| 128 + s))
            .unwrap_or(-1),
        Err(_) => -1,
    }
}

/// Reads what the terminal has, waiting until it has something. `Ok(0)` means every holder of
/// the other side is gone (EIO on Linux).
pub async fn read(master: &Master, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        let mut guard = master.readable().await?;
        match guard.try_io(|fd| nix::unistd::read(fd.get_ref(), buf).map_err(Into::into)) {
            Ok(Ok(n)) => return Ok(n),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // EIO: the shell side is closed.
            Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
}

pub async fn write_all(master: &Master, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let mut guard = master.writable().await?;
        match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(Into::into)) {
            Ok(Ok(n)) => data = &data[n..],
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
    Ok(())
}

//! The `pty` channel: a login shell as the account, on a terminal of its own.
//!
//! Spawned by hand (openpty + `setsid` + `TIOCSCTTY` in `pre_exec`) because portable-pty can
//! neither switch users nor avoid `getpwuid`, which a static binary must not call.

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::libc;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, Command};
use tokio_util::codec::FramedRead;

use super::{env, frame_writer, refuse, reply, FrameTx};
use crate::duplex::{self, ReadHalf};
use crate::mux::MuxStream;
use crate::proto::{ChannelError, ErrorCode, Frame, FrameCodec, PtyOpen, Reply, DATA_CHUNK};
use crate::sandbox::Sandbox;

pub const DEFAULT_TERM: &str = "xterm-256color";
/// How long a hung-up shell gets to exit before its session is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(2);
/// How long the screen may keep draining after the shell exited, when a background job still
/// holds the terminal open.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

type Master = AsyncFd<OwnedFd>;

struct Terminal {
    master: OwnedFd,
    slave: OwnedFd,
}

fn open_terminal(cols: u16, rows: u16) -> nix::Result<Terminal> {
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

fn set_size(fd: &OwnedFd, cols: u16, rows: u16) -> nix::Result<()> {
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

fn spawn_shell(sb: &Sandbox, term: &Terminal, req: &PtyOpen) -> std::io::Result<Child> {
    let account = sb.account();
    let home = &sb.options().home;
    let mut cmd = Command::new(&account.shell);
    cmd.arg0(account.login_argv0())
        .env_clear()
        .envs(env::base(account, home))
        .env("TERM", req.term.as_deref().unwrap_or(DEFAULT_TERM))
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
    let (uid, gid, groups) = (account.uid, account.gid, env::gids(account));
    // SAFETY: the closure only makes async-signal-safe calls and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid()?;
            // Stdin is the terminal by now: make it our controlling terminal.
            if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if switch {
                env::drop_privileges(uid, gid, &groups)?;
            }
            Ok(())
        });
    }
    cmd.spawn()
}

pub async fn pty(sb: Sandbox, mut s: MuxStream, req: PtyOpen) {
    let term = match open_terminal(req.cols, req.rows) {
        Ok(t) => t,
        Err(e) => {
            let err = ChannelError::new(ErrorCode::Io, format!("cannot open a terminal: {e}"));
            return refuse(s, err).await;
        }
    };
    let child = match spawn_shell(&sb, &term, &req) {
        Ok(c) => c,
        Err(e) => {
            let what = format!("cannot start {}", sb.account().shell.display());
            return refuse(s, ChannelError::from_io(&e, &what)).await;
        }
    };
    // Only the shell may hold the terminal's slave side, or its exit would never read as EIO.
    let Terminal { master, slave } = term;
    drop(slave);
    let Some(pid) = child.id().map(|p| p as i32) else {
        return;
    };
    sb.procs().track_session(pid);
    // SAFETY: the OwnedFd is valid and is owned by the AsyncFd for the AsyncFd's whole life.
    let master = match unsafe { AsyncFd::register(master) } {
        Ok(m) => std::sync::Arc::new(m),
        Err(e) => {
            let e = std::io::Error::from(e);
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            return refuse(s, ChannelError::from_io(&e, "terminal")).await;
        }
    };
    if !reply(&mut s, &Reply::ok()).await {
        hang_up(pid, child).await;
        return;
    }
    let (r, w, _) = duplex::split(s);
    let (tx, writer) = frame_writer(w);
    let screen = tokio::spawn(pump_screen(master.clone(), tx.clone()));
    serve(&sb, pid, child, master, r, tx, screen).await;
    let _ = writer.await;
}

async fn serve(
    sb: &Sandbox,
    pid: i32,
    mut child: Child,
    master: std::sync::Arc<Master>,
    r: ReadHalf,
    tx: FrameTx,
    mut screen: tokio::task::JoinHandle<()>,
) {
    let mut frames = FramedRead::new(r, FrameCodec::default());
    let status = loop {
        tokio::select! {
            frame = frames.next() => match frame {
                Some(Ok(Frame::Data(b))) => {
                    if let Err(e) = write_all(&master, &b).await {
                        tracing::debug!(error = %e, "cannot write to the terminal");
                    }
                }
                Some(Ok(Frame::Resize { cols, rows })) => {
                    if let Err(e) = set_size(master.get_ref(), cols, rows) {
                        tracing::debug!(error = %e, "cannot resize the terminal");
                    }
                }
                Some(Ok(other)) => tracing::debug!(?other, "unexpected frame on pty; ignored"),
                Some(Err(_)) | None => {
                    tracing::debug!(pid, "terminal closed by the server; hanging up");
                    screen.abort();
                    hang_up(pid, child).await;
                    return;
                }
            },
            status = child.wait() => break status,
            _ = tx.closed() => {
                screen.abort();
                hang_up(pid, child).await;
                return;
            }
            _ = sb.cancel_token().cancelled() => {
                screen.abort();
                hang_up(pid, child).await;
                return;
            }
        }
    };
    if tokio::time::timeout(DRAIN_GRACE, &mut screen)
        .await
        .is_err()
    {
        screen.abort();
    }
    let code = match status {
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            st.code()
                .or_else(|| st.signal().map(|s| 128 + s))
                .unwrap_or(-1)
        }
        Err(_) => -1,
    };
    let _ = tx.send(Frame::PtyExit(code)).await;
}

/// What a closed terminal window does: SIGHUP to the shell, then SIGKILL if it lingers.
async fn hang_up(pid: i32, mut child: Child) {
    let group = Pid::from_raw(pid);
    let _ = killpg(group, Signal::SIGHUP);
    let _ = killpg(group, Signal::SIGCONT);
    if tokio::time::timeout(HANGUP_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
    }
}

/// Forwards the screen until the terminal reports EIO: every holder of its other side is gone.
async fn pump_screen(master: std::sync::Arc<Master>, tx: FrameTx) {
    let mut buf = vec![0u8; DATA_CHUNK];
    loop {
        let mut guard = match master.readable().await {
            Ok(g) => g,
            Err(_) => return,
        };
        match guard.try_io(|fd| nix::unistd::read(fd.get_ref(), &mut buf).map_err(Into::into)) {
            Ok(Ok(0)) => return,
            Ok(Ok(n)) => {
                if tx
                    .send(Frame::Data(Bytes::copy_from_slice(&buf[..n])))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // EIO: the shell side is closed.
            Ok(Err(_)) => return,
            Err(_would_block) => {}
        }
    }
}

async fn write_all(master: &Master, mut data: &[u8]) -> std::io::Result<()> {
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

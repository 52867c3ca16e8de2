//! Starting one ipykernel as the sandbox's account: its connection file and IPC sockets in a
//! private directory, a random key, and the wait until it answers on shell and iopub.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use jupyter_protocol::connection_info::{ConnectionInfo, Transport};
use jupyter_protocol::{JupyterMessage, JupyterMessageContent, KernelInfoRequest};
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::{mpsc, watch};

use super::wire::Signer;
use super::KernelError;
use crate::sandbox::Sandbox;
use crate::spawn::{env, pre_exec};

/// How long a kernel may take to answer after its start (Python's imports on a loaded machine).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of the kernel's stderr is kept to explain a failed start.
const STDERR_KEPT: usize = 16 * 1024;
/// Messages queued from one socket before its reader waits for the run to take them.
const QUEUE: usize = 256;

/// A started kernel: its process group, its sockets' messages and a way to send on shell.
pub struct Started {
    pub pgid: i32,
    pub shell_tx: ShellSender,
    pub shell_rx: mpsc::Receiver<JupyterMessage>,
    pub iopub_rx: mpsc::Receiver<JupyterMessage>,
    /// Set once the kernel's process has exited.
    pub exited: watch::Receiver<Option<ExitStatus>>,
    pub _dir: ConnectionDir,
    pub readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Started {
    /// A kernel no context holds any more goes, with everything it started.
    fn drop(&mut self) {
        if self.exited.borrow().is_none() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for r in &self.readers {
            r.abort();
        }
    }
}

/// Sends on the kernel's shell socket, signed.
pub struct ShellSender {
    socket: zeromq::DealerSendHalf,
    signer: Signer,
    session: String,
}

impl ShellSender {
    pub async fn send(&mut self, msg: JupyterMessage) -> Result<(), KernelError> {
        use zeromq::SocketSend;
        let frames = self
            .signer
            .encode(&msg, &self.session)
            .map_err(|e| KernelError::Start(e.to_string()))?;
        self.socket
            .send(frames)
            .await
            .map_err(|e| KernelError::Start(format!("cannot reach the kernel: {e}")))
    }
}

/// The private directory that holds a kernel's connection file (and its key); removed with it.
pub struct ConnectionDir(PathBuf);

impl Drop for ConnectionDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn random_hex(bytes: usize) -> Result<String, KernelError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| KernelError::Start(format!("no randomness: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes the directory and writes the connection file, both readable by the account alone.
fn write_connection_file(
    sb: &Sandbox,
    key: &str,
) -> Result<(ConnectionDir, PathBuf, ConnectionInfo), KernelError> {
    let io = |what: &str, e: std::io::Error| KernelError::Start(format!("{what}: {e}"));
    let dir = std::env::temp_dir().join(format!("agenthold-kernel-{}", random_hex(8)?));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| io("cannot make the kernel's directory", e))?;
    let dir = ConnectionDir(dir);
    // IPC sockets, `<ip>-<port>`, which the kernel makes in the directory: no TCP port, and
    // only the account (and root) can reach them.
    let info = ConnectionInfo {
        ip: dir.0.join("kernel").to_string_lossy().into_owned(),
        transport: Transport::IPC,
        shell_port: 1,
        iopub_port: 2,
        stdin_port: 3,
        control_port: 4,
        hb_port: 5,
        key: key.to_string(),
        signature_scheme: "hmac-sha256".into(),
        kernel_name: Some("python3".into()),
    };
    let file = dir.0.join("connection.json");
    let json = serde_json::to_vec(&info).map_err(|e| KernelError::Start(e.to_string()))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
        .map_err(|e| io("cannot write the connection file", e))?;
    std::io::Write::write_all(&mut f, &json)
        .map_err(|e| io("cannot write the connection file", e))?;
    if let Some((uid, gid)) = sb.account().chown_target() {
        // The file through its descriptor, while the directory is still root's alone; the
        // directory (root's entry in /tmp, which the account cannot replace) last. A chown by
        // path inside a directory the account already owns would follow whatever link it had
        // put there meanwhile.
        std::os::unix::fs::fchown(&f, Some(uid.as_raw()), Some(gid.as_raw()))
            .map_err(|e| io("cannot give the connection file to the account", e))?;
        std::os::unix::fs::lchown(&dir.0, Some(uid.as_raw()), Some(gid.as_raw()))
            .map_err(|e| io("cannot give the kernel's directory to the account", e))?;
    }
    Ok((dir, file, info))
}

fn command(sb: &Sandbox, connection_file: &Path, env: &[(String, String)]) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "ipykernel_launcher", "-f"])
        .arg(connection_file)
        // Tracebacks are read by programs and people outside a terminal: no colour codes.
        .arg("--InteractiveShell.colors=NoColor")
        .env_clear()
        .envs(env::base(sb, agenthold_proto::RunAs::Agent))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PYTHONUNBUFFERED", "1")
        .current_dir(&sb.options().home)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let account = sb.account();
    let switch = account.needs_switch();
    let (uid, gid, groups) = (account.uid, account.gid, pre_exec::gids(account));
    // SAFETY: the closure only makes async-signal-safe calls and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            pre_exec::default_signals()?;
            if switch {
                pre_exec::drop_privileges(uid, gid, &groups)?;
            }
            Ok(())
        });
    }
    cmd
}

/// Forwards one socket's messages into a queue, so a run can wait on several at once safely.
fn reader<S>(
    mut socket: S,
    signer: Signer,
) -> (mpsc::Receiver<JupyterMessage>, tokio::task::JoinHandle<()>)
where
    S: zeromq::SocketRecv + Send + 'static,
{
    let (tx, rx) = mpsc::channel(QUEUE);
    let task = tokio::spawn(async move {
        loop {
            let frames = match socket.recv().await {
                Ok(f) => f,
                // The socket is gone: the kernel's own process ending is what a run watches.
                Err(e) => {
                    tracing::debug!(error = %e, "kernel socket closed");
                    return;
                }
            };
            // A message that fails its signature or does not parse is dropped, not fatal.
            match signer.decode(frames) {
                Ok(m) => {
                    if tx.send(m).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "unreadable kernel message"),
            }
        }
    });
    (rx, task)
}

/// Starts a kernel and waits until it answers.
pub async fn start(sb: &Sandbox, env: &[(String, String)]) -> Result<Started, KernelError> {
    let zmq_err = |e: zeromq::ZmqError| KernelError::Start(format!("ZeroMQ: {e}"));
    let key = random_hex(32)?;
    let (dir, file, info) = write_connection_file(sb, &key)?;
    let mut child = command(sb, &file, env).spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            KernelError::Missing("python3 is not installed".into())
        } else {
            KernelError::Start(format!("cannot run python3: {e}"))
        }
    })?;
    let pgid = child
        .id()
        .map(|p| p as i32)
        .ok_or_else(|| KernelError::Start("the kernel exited at once".into()))?;
    sb.procs().track_group(pgid);
    let stderr = child.stderr.take();
    let (stderr_tx, stderr_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        if let Some(mut e) = stderr {
            let mut buf = [0u8; 4096];
            while let Ok(n) = e.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if kept.len() < STDERR_KEPT {
                    kept.extend_from_slice(&buf[..n.min(STDERR_KEPT - kept.len())]);
                }
                if kept.len() >= STDERR_KEPT {
                    // Sent once full; the rest is read and dropped so the kernel never blocks.
                    continue;
                }
            }
        }
        let _ = stderr_tx.send(kept);
    });
    let (exit_tx, exited) = watch::channel(None);
    let sandbox = sb.clone();
    tokio::spawn(async move {
        let status = child.wait().await;
        sandbox.procs().forget(pgid);
        let _ = exit_tx.send(Some(status.unwrap_or_else(|_| ExitStatus::default())));
    });

    let session = random_hex(16)?;
    let connect = async {
        use zeromq::Socket;
        let mut shell = zeromq::DealerSocket::new();
        shell.connect(&info.shell_url()).await.map_err(zmq_err)?;
        let mut iopub = zeromq::SubSocket::new();
        iopub.subscribe("").await.map_err(zmq_err)?;
        iopub.connect(&info.iopub_url()).await.map_err(zmq_err)?;
        Ok::<_, KernelError>((shell, iopub))
    };
    let mut exited_wait = exited.clone();
    let (shell, iopub) = tokio::select! {
        r = tokio::time::timeout(START_TIMEOUT, connect) => r.map_err(|_| timed_out())??,
        _ = until_exit(&mut exited_wait) => return Err(failed(stderr_rx).await),
    };
    let signer = Signer::new(&info.key);
    let (shell_send, shell_recv) = shell.split();
    let shell_tx = ShellSender {
        socket: shell_send,
        signer: signer.clone(),
        session,
    };
    let (shell_rx, shell_reader) = reader(shell_recv, signer.clone());
    let (iopub_rx, iopub_reader) = reader(iopub, signer);
    let mut started = Started {
        pgid,
        shell_tx,
        shell_rx,
        iopub_rx,
        exited,
        _dir: dir,
        readers: vec![shell_reader, iopub_reader],
    };
    let ready = tokio::time::timeout(START_TIMEOUT, until_ready(&mut started));
    tokio::select! {
        r = ready => match r {
            Ok(Ok(())) => Ok(started),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(timed_out()),
        },
        _ = until_exit(&mut exited_wait) => Err(failed(stderr_rx).await),
    }
}

/// Waits for the kernel's exit (without holding the watch's guard across later awaits).
pub async fn until_exit(exited: &mut watch::Receiver<Option<ExitStatus>>) {
    let _ = exited.wait_for(|s| s.is_some()).await;
}

fn timed_out() -> KernelError {
    KernelError::Start(format!(
        "the kernel did not answer within {} s",
        START_TIMEOUT.as_secs()
    ))
}

/// Why a kernel that exited during its start did: a missing ipykernel gets its own error.
async fn failed(stderr: tokio::sync::oneshot::Receiver<Vec<u8>>) -> KernelError {
    let kept = tokio::time::timeout(Duration::from_secs(5), stderr)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&kept).trim().to_string();
    if text.contains("No module named ipykernel") {
        KernelError::Missing(text)
    } else {
        KernelError::Start(format!("the kernel exited during its start: {text}"))
    }
}

/// Asks for the kernel's info until the answer's status messages come back on iopub: then the
/// subscription is live and no output of a run can be missed (ZeroMQ's slow joiner).
async fn until_ready(k: &mut Started) -> Result<(), KernelError> {
    loop {
        let ask = JupyterMessage::new(KernelInfoRequest {}, None);
        k.shell_tx.send(ask).await?;
        let deadline = tokio::time::sleep(Duration::from_millis(500));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                m = k.iopub_rx.recv() => match m {
                    Some(m) if matches!(m.content, JupyterMessageContent::Status(_)) => {
                        // Drain the info replies so the first run does not wade through them.
                        while k.shell_rx.try_recv().is_ok() {}
                        return Ok(());
                    }
                    Some(_) => {}
                    None => return Err(KernelError::Start("the kernel's iopub closed".into())),
                },
                _ = &mut deadline => break,
            }
        }
    }
}

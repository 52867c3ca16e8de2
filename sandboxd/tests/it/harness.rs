//! Two mux sessions over an in-memory pipe: sandboxd's session loop on one side, a stand-in
//! for the server on the other.

use std::time::Duration;

use agenthold_proto::mux::{self, MuxHandle, MuxStream};
use agenthold_proto::{
    self as proto, Activity, ChannelError, ExecExit, ExecRequest, Frame, FrameCodec, FsRead,
    FsWrite, Ping, Reply, Request,
};
use futures::StreamExt;
use sandboxd::agent::{self, SessionEnd};
use sandboxd::{Account, CpuScope, Sandbox, SandboxOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::codec::Framed;
use tokio_util::compat::TokioAsyncReadCompatExt;
use tokio_util::sync::CancellationToken;

pub const AGENT_ID: &str = "test-agent";

pub struct Harness {
    pub home: tempfile::TempDir,
    pub server: MuxHandle,
    pub sandbox: Sandbox,
    pub hellos: mpsc::UnboundedReceiver<proto::Hello>,
    pub activity: mpsc::UnboundedReceiver<u64>,
    pub shutdown: CancellationToken,
    pub session: tokio::task::JoinHandle<SessionEnd>,
}

pub fn options(home: &std::path::Path) -> SandboxOptions {
    SandboxOptions {
        home: home.to_path_buf(),
        confine_to_home: true,
        cpu_scope: CpuScope::Descendants,
        account: Account::current(),
        activity_interval: Duration::from_millis(100),
        ping_interval: Duration::from_secs(1),
        upload_records: None,
        env: vec![(BOOT_ENV.0.into(), BOOT_ENV.1.into())],
        process_dir: None,
        shim: None,
        image_env: vec![
            ("PATH".into(), IMAGE_PATH.into()),
            ("VIRTUAL_ENV".into(), "/opt/venv".into()),
        ],
    }
}

/// The image's `PATH` the harness hands sandboxd, as Docker hands it the image's `ENV`.
pub const IMAGE_PATH: &str = "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin";

/// A variable the harness hands sandboxd as boot.json's `env` would.
pub const BOOT_ENV: (&str, &str) = ("HTTP_PROXY", "http://10.213.0.1:8091");

impl Harness {
    pub async fn start() -> Harness {
        Harness::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut SandboxOptions)) -> Harness {
        let home = tempfile::tempdir().unwrap();
        let mut opts = options(home.path());
        tweak(&mut opts);
        let sandbox = Sandbox::new(opts);
        let (a, b) = tokio::io::duplex(1 << 20);
        let client = mux::spawn(a.compat(), mux::Mode::Client);
        let server = mux::spawn(b.compat(), mux::Mode::Server);
        let (hello_tx, hellos) = mpsc::unbounded_channel();
        let (act_tx, activity) = mpsc::unbounded_channel();
        tokio::spawn(fake_server(server.inbound, hello_tx, act_tx));
        let shutdown = CancellationToken::new();
        let sb = sandbox.clone();
        let stop = shutdown.clone();
        let session =
            tokio::spawn(async move { agent::run_session(client, AGENT_ID, &sb, &stop).await });
        Harness {
            home,
            server: server.handle,
            sandbox,
            hellos,
            activity,
            shutdown,
            session,
        }
    }

    /// Opens a channel; the stream comes back either way so tests can go on using it.
    pub async fn open(
        &self,
        req: &Request,
    ) -> (MuxStream, Result<serde_json::Value, ChannelError>) {
        let mut s = self.server.open().await.unwrap();
        proto::write_request(&mut s, req).await.unwrap();
        let reply: Reply = proto::read_message(&mut s).await.unwrap();
        (s, reply.into_result())
    }

    pub async fn refused(&self, req: &Request) -> ChannelError {
        match self.open(req).await.1 {
            Ok(v) => panic!("{req:?} was accepted: {v}"),
            Err(e) => e,
        }
    }

    pub async fn ping(&self) {
        self.open(&Request::Ping(Ping {})).await.1.unwrap();
    }

    pub async fn write_file(
        &self,
        path: &str,
        data: &[u8],
    ) -> Result<serde_json::Value, ChannelError> {
        let (mut s, r) = self
            .open(&Request::FsWrite(FsWrite {
                path: path.into(),
                parents: false,
            }))
            .await;
        r?;
        s.write_all(data).await.unwrap();
        s.shutdown().await.unwrap();
        let second: Reply = proto::read_message(&mut s).await.unwrap();
        second.into_result()
    }

    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>, ChannelError> {
        let (mut s, r) = self
            .open(&Request::FsRead(FsRead { path: path.into() }))
            .await;
        let meta = r?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        assert_eq!(meta["size"].as_u64(), Some(out.len() as u64));
        Ok(out)
    }

    pub async fn exec(&self, req: ExecRequest, stdin: &[u8]) -> ExecOutput {
        let (s, r) = self.open(&Request::Exec(req)).await;
        r.unwrap();
        let mut f = Framed::new(s, FrameCodec::default());
        use futures::SinkExt;
        if !stdin.is_empty() {
            f.send(Frame::Data(bytes::Bytes::copy_from_slice(stdin)))
                .await
                .unwrap();
        }
        f.send(Frame::StdinEof).await.unwrap();
        collect(&mut f).await
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.session.abort();
        // Tests must not leave processes behind even when they fail halfway.
        self.sandbox.procs().kill_all();
    }
}

#[derive(Debug, Default)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: ExecExit,
}

impl ExecOutput {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Reads frames until `ExecExit`, which must be the last.
pub async fn collect(f: &mut Framed<MuxStream, FrameCodec>) -> ExecOutput {
    let mut out = ExecOutput::default();
    loop {
        match f
            .next()
            .await
            .expect("stream ended before ExecExit")
            .unwrap()
        {
            Frame::Stdout(b) => out.stdout.extend_from_slice(&b),
            Frame::Stderr(b) => out.stderr.extend_from_slice(&b),
            Frame::ExecExit(e) => {
                out.exit = e;
                break;
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
    assert!(f.next().await.is_none(), "frames after ExecExit");
    out
}

pub fn exec_req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        command: argv.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Polls `cond` until it holds or `within` passes.
pub async fn eventually(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// True while a process of group `pgid` is still running (zombies do not count: they are
/// dead, waiting for their reaper).
pub fn group_alive(pgid: i32) -> bool {
    !sandboxd::procs::group_members(pgid).is_empty()
}

pub fn pid_alive(pid: i32) -> bool {
    sandboxd::procs::read_stat(pid).is_some_and(|p| !p.zombie)
}

async fn fake_server(
    mut inbound: mpsc::UnboundedReceiver<MuxStream>,
    hellos: mpsc::UnboundedSender<proto::Hello>,
    activity: mpsc::UnboundedSender<u64>,
) {
    while let Some(mut s) = inbound.recv().await {
        let hellos = hellos.clone();
        let activity = activity.clone();
        tokio::spawn(async move {
            let req = proto::read_request(&mut s).await.unwrap();
            proto::write_message(&mut s, &Reply::ok()).await.unwrap();
            match req {
                Request::Hello(h) => {
                    let _ = hellos.send(h);
                }
                Request::Activity(Activity {}) => {
                    let mut frames = tokio_util::codec::FramedRead::new(s, FrameCodec::default());
                    while let Some(Ok(Frame::Activity { cpu_ms, .. })) = frames.next().await {
                        let _ = activity.send(cpu_ms);
                    }
                }
                _ => {}
            }
        });
    }
}

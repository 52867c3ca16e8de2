//! Installing things in the `dev` image (#32): `pip install` into the home's virtual environment
//! through the egress proxy, `sudo` for an agent with `allowRoot` (and not without), and
//! `"user": "root"` on exec and processes. "PyPI" is a simple index this test serves on loopback
//! under a made-up name (`sandbox.egress.resolve`), with a wheel it writes itself; nothing is sent
//! anywhere else. Needs Docker, the ready image (scripts/build-agent-image.sh) and a static
//! sandboxd (scripts/build-sandboxd.sh). `AGENTHOLD_TEST_DEV_IMAGE` names another build of
//! images/agent to test (say, one built under a tag of its own while the shared one is in use).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};

use crate::common::docker::*;
use crate::common::{read_until, send_keys, TestServer};
use agenthold::agents::preset::Preset;
use agenthold::config::{Config, AGENT_IMAGE as DEV_IMAGE};
use serde_json::{json, Value};

/// The made-up package the index serves, and its import name.
const PACKAGE: &str = "ahprobe";

fn dev_image() -> String {
    std::env::var("AGENTHOLD_TEST_DEV_IMAGE").unwrap_or_else(|_| DEV_IMAGE.to_string())
}

/// The default config's `dev` preset, as far as this test needs it: the ready image and
/// `allowRoot`; a setup script that writes down what it sees; `pypi.test` is this machine.
fn dev(c: &mut Config) {
    c.presets.insert(
        "dev".into(),
        Preset {
            image: Some(dev_image()),
            memory_mb: Some(1024),
            allow_root: true,
            setup: Some("echo \"$PATH|$VIRTUAL_ENV\" > setup-env".into()),
            ..Default::default()
        },
    );
    c.sandbox.default_preset = Some("dev".into());
    c.sandbox.egress.resolve = [("pypi.test".to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST))].into();
}

/// A pure-Python wheel of [`PACKAGE`] 1.0: `import ahprobe; ahprobe.VALUE == 42`.
fn wheel() -> Vec<u8> {
    let dist = format!("{PACKAGE}-1.0.dist-info");
    let files = [
        (format!("{PACKAGE}/__init__.py"), "VALUE = 42\n".to_string()),
        (
            format!("{dist}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n"),
        ),
        (
            format!("{dist}/WHEEL"),
            "Wheel-Version: 1.0\nGenerator: agenthold-tests\nRoot-Is-Purelib: true\n\
             Tag: py3-none-any\n"
                .to_string(),
        ),
    ];
    let mut record: String = files
        .iter()
        .map(|(name, _)| format!("{name},,\n"))
        .collect();
    record.push_str(&format!("{dist}/RECORD,,\n"));
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, body) in files
        .iter()
        .chain([(format!("{dist}/RECORD"), record)].iter())
    {
        zip.start_file(name.as_str(), opts).expect("a zip entry");
        zip.write_all(body.as_bytes()).expect("a zip entry's bytes");
    }
    zip.finish().expect("the wheel").into_inner()
}

/// A simple index (PEP 503) on loopback serving [`wheel`]; returns its port.
async fn index() -> u16 {
    use axum::routing::get;
    let file = format!("{PACKAGE}-1.0-py3-none-any.whl");
    let page = format!("<html><body><a href=\"/files/{file}\">{file}</a></body></html>");
    let whl = wheel();
    let app = axum::Router::new()
        .route(
            &format!("/simple/{PACKAGE}/"),
            get(move || async move { axum::response::Html(page) }),
        )
        .route(&format!("/files/{file}"), get(move || async move { whl }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("the index's port");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

async fn exec_as(s: &TestServer, id: &str, user: &str, command: &[&str]) -> (u16, Value) {
    s.call(
        "POST",
        &format!("/api/v1/agents/{id}/exec"),
        Some(json!({"command": command, "user": user})),
    )
    .await
}

fn require_image() {
    let image = dev_image();
    if docker_try(&["image", "inspect", &image]).is_err() {
        panic!("image {image} is missing; run scripts/build-agent-image.sh first");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_installs_into_the_homes_venv_through_the_proxy_and_keeps_it() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    require_image();
    let s = env.server_with(false, dev).await;
    let port = index().await;
    let egress = json!({"allow": ["pypi.test"]});
    let plain = s
        .running_agent(json!({"name": "plain", "egress": egress}))
        .await;
    let disk = s
        .running_agent(json!({"name": "disk", "egress": egress, "diskMb": 512}))
        .await;

    // Docker copies the image's /home/agent into a new, empty home: a plain volume and the
    // folder a disk-limited one binds alike, so both homes have the venv, the account's own.
    for id in [&plain, &disk] {
        assert_eq!(
            s.exec_ok(id, &["stat", "-c", "%U", "/home/agent/.venv/bin/python"])
                .await,
            "agent\n",
            "{id}"
        );
        assert_eq!(
            s.exec_ok(id, &["sh", "-c", "command -v pip; echo $VIRTUAL_ENV"])
                .await,
            "/home/agent/.venv/bin/pip\n/home/agent/.venv\n"
        );
    }
    assert!(s.agent(&disk).await["diskMb"] == 512);

    // Every way a program starts sees the venv first: a background process, a terminal and the
    // setup script too.
    let path_first = "/home/agent/.venv/bin:";
    let procs = crate::common::procs::Procs::new(s.http.clone(), &s.base, &plain);
    let p = procs
        .start(json!({"command": ["sh", "-c", "echo \"$PATH\" > proc-path"]}))
        .await;
    let (status, _) = procs.wait(&p.id, 20_000).await;
    assert_eq!(status, 200);
    assert!(s
        .exec_ok(&plain, &["cat", "proc-path"])
        .await
        .starts_with(path_first));
    let mut term = s.terminal(&plain, 120, 40).await;
    send_keys(&mut term, "echo \"P=$PATH=\"\r").await;
    read_until(&mut term, &format!("P={path_first}")).await;
    crate::common::wait_for("the setup script to run", || async {
        s.exec(&plain, &["cat", "setup-env"]).await["exitCode"] == 0
    })
    .await;
    assert!(
        s.exec_ok(&plain, &["cat", "setup-env"])
            .await
            .starts_with(path_first),
        "setup"
    );

    // Plain `pip install`: no PEP 668 refusal, into the venv, through the proxy.
    for id in [&plain, &disk] {
        let out = s
            .exec(
                id,
                &[
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--index-url",
                    &format!("http://pypi.test:{port}/simple/"),
                    "--trusted-host",
                    "pypi.test",
                    PACKAGE,
                ],
            )
            .await;
        assert_eq!(out["exitCode"], 0, "{out}");
        assert_eq!(out["egressDenied"], json!([]), "{out}");
        assert_eq!(
            s.exec_ok(
                id,
                &[
                    "python",
                    "-c",
                    &format!("import {PACKAGE}; print({PACKAGE}.VALUE, {PACKAGE}.__file__)")
                ]
            )
            .await,
            "42 /home/agent/.venv/lib/python3.11/site-packages/ahprobe/__init__.py\n"
        );
    }

    // The venv is in the home: it survives a sleep.
    s.stop_sleeping(&plain).await;
    s.start_running(&plain).await;
    assert_eq!(
        s.exec_ok(
            &plain,
            &[
                "python",
                "-c",
                &format!("import {PACKAGE}; print({PACKAGE}.VALUE)")
            ]
        )
        .await,
        "42\n"
    );
    drop(term);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sudo_and_user_root_work_with_allow_root_and_not_without() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    require_image();
    let s = env.server_with(false, dev).await;
    let rooted = s.running_agent(json!({"name": "rooted"})).await;
    let plain = s
        .running_agent(json!({"name": "plain", "allowRoot": false}))
        .await;
    assert_eq!(s.agent(&rooted).await["allowRoot"], true, "dev's default");

    // Only the agent allowed root has a container without no-new-privileges.
    let opts = |id: &str| {
        docker(&[
            "inspect",
            "--format",
            "{{.HostConfig.SecurityOpt}}",
            &env.container(id),
        ])
    };
    assert_eq!(opts(&rooted), "[]");
    assert_eq!(opts(&plain), "[no-new-privileges:true]");

    assert_eq!(s.exec_ok(&rooted, &["id", "-un"]).await, "agent\n");
    assert_eq!(s.exec_ok(&rooted, &["sudo", "-n", "id", "-u"]).await, "0\n");
    let check = s.exec(&rooted, &["sudo", "-n", "apt-get", "check"]).await;
    assert_eq!(check["exitCode"], 0, "{check}");
    // Root is still confined: the capabilities every sandbox lacks, root lacks too.
    let caps = s
        .exec_ok(
            &rooted,
            &["sudo", "-n", "grep", "^CapEff", "/proc/self/status"],
        )
        .await;
    let eff = u64::from_str_radix(caps.trim().trim_start_matches("CapEff:").trim(), 16)
        .expect("a capability mask");
    const CAP_NET_RAW: u32 = 13;
    const CAP_SYS_ADMIN: u32 = 21;
    assert_eq!(eff & (1 << CAP_NET_RAW), 0, "{caps}");
    assert_eq!(eff & (1 << CAP_SYS_ADMIN), 0, "{caps}");

    let denied = s.exec(&plain, &["sudo", "-n", "id", "-u"]).await;
    assert_ne!(denied["exitCode"], 0, "{denied}");
    assert!(
        denied["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("no new privileges"),
        "{denied}"
    );

    // "user": "root" on exec and processes: uid 0 when allowed, 403 when not.
    let (status, out) = exec_as(&s, &rooted, "root", &["sh", "-c", "id -u; echo $HOME"]).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["stdout"], "0\n/root\n", "{out}");
    let (status, out) = exec_as(&s, &plain, "root", &["id", "-u"]).await;
    assert_eq!(status, 403, "{out}");
    assert!(out["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("allowRoot"));

    let procs = crate::common::procs::Procs::new(s.http.clone(), &s.base, &rooted);
    let p = procs
        .start(json!({"command": ["sh", "-c", "id -u > /tmp/uid"], "user": "root"}))
        .await;
    let (status, ended) = procs.wait(&p.id, 20_000).await;
    assert_eq!(status, 200, "{ended:?}");
    assert_eq!(s.exec_ok(&rooted, &["cat", "/tmp/uid"]).await, "0\n");
    let (_, got) = procs.get(&p.id).await;
    assert_eq!(got["user"], "root", "{got}");
    let (status, body) = s
        .call(
            "POST",
            &format!("/api/v1/agents/{plain}/processes"),
            Some(json!({"command": ["true"], "user": "root"})),
        )
        .await;
    assert_eq!(status, 403, "{body}");
}

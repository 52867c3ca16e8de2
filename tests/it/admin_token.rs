//! With no admin token configured, the first start makes one, prints it once and keeps only its
//! hash; later starts accept the same token and print nothing. A start that fails before it
//! serves spends no token, and `agenthold admin-token --reset` makes a new one.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &std::path::Path) -> (Proc, std::process::ChildStderr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["serve", "--config"])
        .arg(config)
        .env_remove("AGENTHOLD_ADMIN_TOKEN")
        // The serving line ends what `started` reads.
        .env("AGENTHOLD_LOG", "warn,agenthold::server=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    (Proc(child), stderr)
}

/// What a start printed up to its serving line.
struct Started {
    /// The token, if one was printed.
    token: Option<String>,
    /// `http://` and the address the API listens on (the config asks for port 0).
    base: String,
}

/// Text without the terminal's colour codes, which the log puts around field names.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Reads the server's stderr until the serving line; a server that ends before it fails the
/// test with what it printed.
fn started(stderr: std::process::ChildStderr) -> Started {
    let mut token = None;
    let mut seen = String::new();
    for line in BufReader::new(stderr).lines() {
        let line = plain(&line.unwrap());
        seen.push_str(&line);
        seen.push('\n');
        if let Some(t) = line.trim().strip_prefix("export AGENTHOLD_TOKEN=") {
            token = Some(t.split_whitespace().next().unwrap().to_string());
        }
        let trimmed = line.trim();
        if token.is_none() && trimmed.len() == 64 && trimmed.chars().all(|c| c.is_ascii_hexdigit())
        {
            token = Some(trimmed.to_string());
        }
        if line.contains("agenthold is serving") {
            // The token is printed just before.
            let api = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("api="))
                .unwrap_or_else(|| panic!("no api= in the serving line: {line}"));
            return Started {
                token,
                base: format!("http://{api}"),
            };
        }
    }
    panic!("the server ended before it served:\n{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_token_is_shown_once_and_kept_as_a_hash() {
    let dir = tempfile::tempdir().unwrap();
    let port = 0;
    let config = dir.path().join("config.yaml");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!(
            "server:\n  listen: 127.0.0.1:{port}\n  data_dir: {}\n  previews:\n    listen: 127.0.0.1:0\nsandbox:\n  driver: fake\n  tunnel_listen: 127.0.0.1:0\n  egress:\n    port: 0\n    dns_port: 0\n",
            data.display()
        ),
    )
    .unwrap();
    let http = reqwest::Client::new();

    let (p, stderr) = start(&config);
    let first = tokio::task::spawn_blocking(move || started(stderr))
        .await
        .unwrap();
    let base = first.base;
    let token = first.token.expect("the first start prints a token");
    crate::common::wait_for("server up", || async {
        http.get(format!("{base}/api/v1/health"))
            .send()
            .await
            .is_ok()
    })
    .await;
    let ok = http
        .get(format!("{base}/api/v1/agents"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // Only the hash is on disk.
    let db = std::fs::read(data.join("agenthold.db")).unwrap();
    let wal = std::fs::read(data.join("agenthold.db-wal")).unwrap_or_default();
    for bytes in [&db, &wal] {
        assert!(!bytes.windows(token.len()).any(|w| w == token.as_bytes()));
    }
    drop(p);

    let (p, stderr) = start(&config);
    let again = tokio::task::spawn_blocking(move || started(stderr))
        .await
        .unwrap();
    assert_eq!(again.token, None, "the token was printed a second time");
    let base = again.base;
    crate::common::wait_for("server up again", || async {
        http.get(format!("{base}/api/v1/health"))
            .send()
            .await
            .is_ok()
    })
    .await;
    let ok = http
        .get(format!("{base}/api/v1/agents"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let bad = http
        .get(format!("{base}/api/v1/agents"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    drop(p);
}

fn write_config(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "server:\n  listen: 127.0.0.1:{port}\n  data_dir: {}\n  previews:\n    listen: 127.0.0.1:0\nsandbox:\n  driver: fake\n  tunnel_listen: 127.0.0.1:0\n  egress:\n    port: 0\n    dns_port: 0\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_spends_no_token_and_reset_makes_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    // The API port is taken: the start fails after opening the database, before serving.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = write_config(dir.path(), taken.local_addr().unwrap().port());
    let out = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("AGENTHOLD_ADMIN_TOKEN")
        .env("AGENTHOLD_LOG", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("admin token"),
        "a failed start showed a token: {stderr}"
    );
    assert!(stderr.contains("binding server.listen"), "{stderr}");
    drop(taken);

    // The next start makes and shows one.
    let config = write_config(dir.path(), 0);
    let (p, stderr) = start(&config);
    let first = tokio::task::spawn_blocking(move || started(stderr))
        .await
        .unwrap()
        .token
        .expect("the first start that serves prints a token");
    drop(p);

    // A reset (the server stopped) makes another; the old one no longer works.
    let out = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["admin-token", "--reset", "--config"])
        .arg(&config)
        .env_remove("AGENTHOLD_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(new.len(), 64);
    assert_ne!(new, first);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("AGENTHOLD_TOKEN") && said.contains("web UI"),
        "{said}"
    );

    let (p, stderr) = start(&config);
    let again = tokio::task::spawn_blocking(move || started(stderr))
        .await
        .unwrap();
    assert_eq!(again.token, None);
    let base = again.base;
    let http = reqwest::Client::new();
    for (token, status) in [(&new, 200), (&first, 401)] {
        let r = http
            .get(format!("{base}/api/v1/agents"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status);
    }
    drop(p);

    // Without a data directory there is nothing to reset; with a configured token, nothing
    // to make.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["admin-token", "--reset", "--config"])
        .arg(write_config(empty.path(), 1))
        .env_remove("AGENTHOLD_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let out = Command::new(env!("CARGO_BIN_EXE_agenthold"))
        .args(["admin-token", "--reset", "--config"])
        .arg(&config)
        .env("AGENTHOLD_ADMIN_TOKEN", "configured-token-0123456789")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("AGENTHOLD_ADMIN_TOKEN"));
}

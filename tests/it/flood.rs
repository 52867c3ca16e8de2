//! Connection floods against both listeners (#11, item 1): slow headers are cut at
//! `server.header_timeout`, one address holds at most its cap, and a full API leaves the tunnel
//! working. Floods come from other loopback addresses (127.0.0.2 and up) than the test's own
//! client and the fake driver's sandboxes (127.0.0.1), as a sandbox's or a stranger's would.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{wait_for, TestServer, DEADLINE};
use agenthold::model::AgentState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const PARTIAL_HEADER: &[u8] = b"GET /tunnel HTTP/1.1\r\nHost: flood\r\n";

async fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse().unwrap(), 0))
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// Opens a connection from `source` and sends a header that never ends.
async fn slow_client(source: &str, to: SocketAddr) -> TcpStream {
    let mut c = connect_from(source, to).await;
    c.write_all(PARTIAL_HEADER).await.unwrap();
    c
}

/// Ends the request on `c` and returns the status the server answers, or `None` when it closes
/// without one.
async fn finish_request(c: &mut TcpStream) -> Option<u16> {
    if c.write_all(b"\r\n").await.is_err() {
        return read_status(c).await;
    }
    read_status(c).await
}

async fn read_status(c: &mut TcpStream) -> Option<u16> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    let read = async {
        loop {
            match c.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.windows(2).any(|w| w == b"\r\n") {
                break;
            }
        }
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("the server answered or closed");
    let line = String::from_utf8_lossy(&buf);
    line.split(' ').nth(1).and_then(|s| s.parse().ok())
}

/// A fresh connection from `source` with a whole request: the status, or `None` if closed.
async fn status_from(source: &str, to: SocketAddr) -> Option<u16> {
    let mut c = slow_client(source, to).await;
    finish_request(&mut c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_on_the_tunnel_is_cut_while_the_api_and_exec_answer() {
    // Measures or floods the whole process (or the host): no other test's server runs meanwhile.
    crate::common::exclusive(async {
        const SLOW: usize = 300;
        let header_timeout = Duration::from_secs(3);
        let mut s = TestServer::start_with(|c| {
            c.server.header_timeout = header_timeout;
            // Room for the whole flood, so that it is the header timeout that ends it.
            c.sandbox.tunnel_max_connections = 2 * SLOW as u32;
            c.sandbox.tunnel_max_connections_per_ip = 2 * SLOW as u32;
        })
        .await;
        // The header timeout is also the API's idle timeout: a pooled connection could be closed by
        // the server just as the client takes it again. A fresh connection per request cannot be.
        s.http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("client");
        let id = s.running_agent("busy").await;

        let tunnel = s.tunnel_addr;
        let mut slow = Vec::new();
        for i in 0..SLOW {
            let opened = Instant::now();
            // Half trickle a header line now and then, half send nothing more at all.
            let trickle = i % 2 == 0;
            let mut c = slow_client("127.0.0.2", tunnel).await;
            slow.push(tokio::spawn(async move {
                let mut byte = [0u8; 64];
                loop {
                    if trickle && c.write_all(b"X-Slow: 1\r\n").await.is_err() {
                        return opened.elapsed();
                    }
                    match tokio::time::timeout(Duration::from_millis(500), c.read(&mut byte)).await
                    {
                        Ok(Ok(0)) | Ok(Err(_)) => return opened.elapsed(),
                        // A 408 or similar before the close: keep reading to the end.
                        Ok(Ok(_)) | Err(_) => {}
                    }
                    if opened.elapsed() > DEADLINE {
                        panic!("a slow connection was still open after {DEADLINE:?}");
                    }
                }
            }));
        }

        // While the flood lasts, the API and an exec through the tunnel keep answering. The bounds
        // are far above their usual times (milliseconds) so that a loaded CI machine never trips
        // them; what they catch is a server that stops answering, as it did before the caps.
        let mut rounds = 0;
        while !slow.iter().all(|t| t.is_finished()) {
            let began = Instant::now();
            let health =
                tokio::time::timeout(Duration::from_secs(15), s.get("/api/v1/health").send())
                    .await
                    .expect("health within 15 s during the flood")
                    .unwrap();
            assert_eq!(health.status(), 200);
            let out = tokio::time::timeout(Duration::from_secs(15), s.exec(&id, &["echo", "hi"]))
                .await
                .expect("exec within 15 s during the flood");
            assert_eq!(out["stdout"], "hi\n", "{out}");
            rounds += 1;
            assert!(began.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(rounds > 0);
        for t in slow {
            let lived = t.await.unwrap();
            assert!(
                lived >= header_timeout - Duration::from_millis(500),
                "closed after {lived:?}, before the header timeout"
            );
        }
        let out = s.exec(&id, &["echo", "after"]).await;
        assert_eq!(out["stdout"], "after\n");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_cap_on_either_listener() {
    // Measures or floods the whole process (or the host): no other test's server runs meanwhile.
    crate::common::exclusive(async {
        let s = TestServer::start_with(|c| {
            c.server.max_connections_per_ip = 4;
        })
        .await;
        let id = s.running_agent("capped").await;
        // The tunnel at its default cap, the API at the one set above.
        for (to, cap, source, other) in [
            (s.tunnel_addr, 8, "127.0.0.3", "127.0.0.4"),
            (s.api_addr, 4, "127.0.0.5", "127.0.0.6"),
        ] {
            let mut held = Vec::new();
            for _ in 0..cap {
                held.push(slow_client(source, to).await);
            }
            assert_eq!(
                status_from(source, to).await,
                Some(503),
                "connection {} from one address on {to}",
                cap + 1
            );
            // Another address is served meanwhile (401: no token; the API's health needs none
            // but the request asks for /tunnel, which the API does not have).
            let other_status = status_from(other, to).await;
            assert!(
                matches!(other_status, Some(s) if s != 503),
                "another address on {to}: {other_status:?}"
            );
            // The held ones were served, not refused.
            for c in &mut held {
                let st = finish_request(c).await;
                assert!(matches!(st, Some(s) if s != 503), "a held one: {st:?}");
            }
            drop(held);
            // Once they close, the address is served again.
            wait_for("the address is served again", || async {
                matches!(status_from(source, to).await, Some(s) if s != 503)
            })
            .await;
        }
        let out = s.exec(&id, &["echo", "ok"]).await;
        assert_eq!(out["stdout"], "ok\n");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_api_leaves_the_tunnel_working() {
    // Measures or floods the whole process (or the host): no other test's server runs meanwhile.
    crate::common::exclusive(async {
        const API_CAP: u32 = 40;
        let s = TestServer::start_with(|c| {
            c.server.max_connections = API_CAP;
            // The flood must outlast the start below.
            c.server.header_timeout = Duration::from_secs(60);
            c.server.max_connections_per_ip = 10;
        })
        .await;
        let id = s.sleeping_agent("sleeper").await;

        // Many addresses, so that it is the API's total that fills, not one address's share.
        let mut flood = Vec::new();
        for i in 0..(2 * API_CAP) {
            let source = format!("127.0.1.{}", 1 + i % 10);
            flood.push(slow_client(&source, s.api_addr).await);
        }
        assert_eq!(
            status_from("127.0.2.1", s.api_addr).await,
            Some(503),
            "the API is full"
        );

        // The tunnel has its own share: the agent starts (its sandboxd dials in and says hello).
        s.lc.start(&id).await.unwrap();
        let deadline = Instant::now() + DEADLINE;
        loop {
            let state = s.lc.get(&id).await.unwrap().state;
            if state == AgentState::Running {
                break;
            }
            assert_ne!(state, AgentState::Error);
            assert!(
                Instant::now() < deadline,
                "the agent did not start: {state}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            status_from("127.0.2.1", s.api_addr).await,
            Some(503),
            "the API was still full while the agent started"
        );

        drop(flood);
        wait_for("the API answers again", || async {
            s.get("/api/v1/health")
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
        let out = s.exec(&id, &["echo", "up"]).await;
        assert_eq!(out["stdout"], "up\n");
    })
    .await
}

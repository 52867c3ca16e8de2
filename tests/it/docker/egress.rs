//! The egress proxy from inside real Docker sandboxes. "The internet" is servers this test runs
//! on this machine under made-up names (`sandbox.egress.resolve`); nothing is sent anywhere else.
//! Needs Docker.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use crate::common::docker::*;
use crate::common::{read_until, send_keys};
use agenthold::bench::servers::{echo_server, hello_server};
use agenthold::egress::EgressEvent;
use agenthold::events::AgentEvent;
use serde_json::{json, Value};
use tokio::sync::broadcast;

/// The names "the internet" has in these tests; all are this machine.
const NAMES: [&str; 4] = [
    "pypi.test",
    "hosted.test",
    "files.hosted.test",
    "blocked.test",
];

async fn server(
    env: &DockerEnv,
    tweak: impl FnOnce(&mut agenthold::config::Config),
) -> crate::common::TestServer {
    env.server_with(true, |c| {
        c.sandbox.egress.resolve = NAMES
            .iter()
            .map(|n| (n.to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)))
            .collect::<BTreeMap<_, _>>();
        tweak(c);
    })
    .await
}

async fn agent_with_rules(s: &crate::common::TestServer, name: &str, egress: Value) -> String {
    s.running_agent(json!({"name": name, "egress": egress}))
        .await
}

/// A bash function in the sandbox that speaks to the proxy named by `$HTTP_PROXY` over
/// /dev/tcp (the test image has no curl): `proxy_get URL` prints the answer's status line and
/// body; `proxy_connect HOST:PORT` prints the status line and leaves the tunnel on fd 3.
const PROXY_FNS: &str = r#"
proxy_addr() { local hp="${HTTP_PROXY#http://}"; PH="${hp%:*}"; PP="${hp##*:}"; }
proxy_get() {
    proxy_addr
    exec 3<>"/dev/tcp/$PH/$PP" || return 1
    printf 'GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' "$1" >&3
    local status; IFS= read -r status <&3; echo "${status%$'\r'}"
    while IFS= read -r line <&3; do [ "${line%$'\r'}" = "" ] && break; done
    cat <&3
    exec 3<&-
}
proxy_connect() {
    proxy_addr
    exec 3<>"/dev/tcp/$PH/$PP" || return 1
    printf 'CONNECT %s HTTP/1.1\r\n\r\n' "$1" >&3
    local status; IFS= read -r status <&3; echo "${status%$'\r'}"
    while IFS= read -r line <&3; do [ "${line%$'\r'}" = "" ] && break; done
}
"#;

async fn sh(s: &crate::common::TestServer, id: &str, script: &str) -> String {
    let script = format!("{PROXY_FNS}\n{script}");
    let out = s.exec(id, &["bash", "-c", &script]).await;
    assert_eq!(out["exitCode"], 0, "{script}: {out}");
    out["stdout"].as_str().unwrap_or_default().to_string()
}

/// The next `egress` event about agent `id` for which `want` holds.
async fn egress_event(
    rx: &mut broadcast::Receiver<AgentEvent>,
    id: &str,
    want: impl Fn(&EgressEvent) -> bool,
) -> EgressEvent {
    let deadline = tokio::time::Instant::now() + crate::common::DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(AgentEvent::Egress(e))) if e.id == id && want(&e) => return *e,
            Ok(Ok(_)) => {}
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(e)) => panic!("events ended: {e}"),
            Err(_) => panic!("no matching egress event in time"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_names_work_through_the_proxy_and_the_rest_get_403() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env, |_| {}).await;
    let web = hello_server("0.0.0.0:0").await.expect("the web server");
    let echo = echo_server("127.0.0.1:0", b"")
        .await
        .expect("the echo server");
    let a = agent_with_rules(&s, "a", json!({"allow": ["pypi.test", "*.hosted.test"]})).await;
    let gw = network_gateway(&env.network(&a));
    let proxy = format!("http://{gw}:{}", s.egress_addr.port());

    // Every exec has the proxy variables, both spellings.
    let env_out = s.exec_ok(&a, &["env"]).await;
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        assert!(
            env_out.contains(&format!("{var}={proxy}\n")),
            "{var} in {env_out}"
        );
    }
    assert!(
        env_out.contains("NO_PROXY=localhost,127.0.0.1,::1\n"),
        "{env_out}"
    );

    // ...and so does a terminal.
    let mut term = s.terminal(&a, 120, 40).await;
    send_keys(&mut term, "echo \"P=$HTTPS_PROXY=\"\r").await;
    read_until(&mut term, &format!("P={proxy}=")).await;

    let mut events = s.lc.subscribe();
    // HTTP forward: an allowed name, a subdomain under the wildcard.
    let out = sh(
        &s,
        &a,
        &format!(
            "proxy_get http://pypi.test:{web}/simple/; proxy_get http://files.hosted.test:{web}/x"
        ),
    )
    .await;
    assert_eq!(
        out,
        format!("HTTP/1.1 200 OK\nhello from pypi.test:{web}\nHTTP/1.1 200 OK\nhello from files.hosted.test:{web}\n")
    );
    let ok = egress_event(&mut events, &a, |e| e.host == "pypi.test" && e.closed).await;
    assert!(ok.allowed && ok.bytes_down > 0, "{ok:?}");

    // Not allowed (the wildcard's apex, a name no rule names): 403 at once, saying how to fix it.
    let asked = Instant::now();
    let out = sh(&s, &a, &format!("proxy_get http://hosted.test:{web}/")).await;
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("HTTP/1.1 403 Forbidden"), "{out}");
    let body = lines.next().unwrap_or_default();
    for part in [
        &format!("agent a ({a})"),
        &format!("hosted.test:{web}"),
        &format!("agenthold egress {a} --allow hosted.test"),
    ] {
        assert!(body.contains(part.as_str()), "{part} in {body}");
    }
    assert!(asked.elapsed() < crate::common::DEADLINE);
    let refused = egress_event(&mut events, &a, |e| e.host == "hosted.test").await;
    assert!(!refused.allowed && refused.rule.is_none(), "{refused:?}");

    // CONNECT: a tunnel to an allowed name carries any TCP.
    let out = sh(
        &s,
        &a,
        &format!(
            "proxy_connect pypi.test:{echo}; echo ping >&3; IFS= read -r back <&3; echo \"$back\""
        ),
    )
    .await;
    assert_eq!(out, "HTTP/1.1 200 OK\nping\n");

    // Without the proxy, the test servers are out of reach: the sandbox has no way out.
    let direct = reachable(&s, &a, &[format!("{gw}:{web}")]).await;
    assert_eq!(
        direct,
        [false],
        "the web server straight through the gateway"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_applies_at_once_and_closes_what_it_no_longer_allows() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env, |_| {}).await;
    let echo = echo_server("127.0.0.1:0", b"")
        .await
        .expect("the echo server");
    let a = agent_with_rules(&s, "a", json!({"allow": ["pypi.test"]})).await;
    let mut events = s.lc.subscribe();

    // A tunnel that stays open until the proxy closes it.
    let held = {
        let (base, id) = (s.url(&format!("/api/v1/agents/{a}/exec")), a.clone());
        let http = s.http.clone();
        let script =
            format!("{PROXY_FNS}\nproxy_connect pypi.test:{echo}; cat <&3 >/dev/null; echo closed");
        tokio::spawn(async move {
            let r = http
                .post(base)
                .bearer_auth(crate::common::TOKEN)
                .json(&json!({"command": ["bash", "-c", script], "timeoutMs": 60000}))
                .send()
                .await
                .expect("exec");
            let _ = id;
            r.json::<Value>().await.expect("exec json")
        })
    };
    egress_event(&mut events, &a, |e| {
        e.allowed && !e.closed && e.host == "pypi.test"
    })
    .await;

    let patched = Instant::now();
    let r = s
        .send(
            "PATCH",
            &format!("/api/v1/agents/{a}"),
            &json!({"egress": {"allow": ["other.test"]}}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let agent: Value = r.json().await.expect("json");
    assert_eq!(
        agent["egress"],
        json!({"allow": ["other.test"], "deny": []})
    );
    assert_eq!(agent["needsRebuild"], false);
    let closed = egress_event(&mut events, &a, |e| e.closed && e.host == "pypi.test").await;
    let took = patched.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "closed {took:?} after the PATCH: {closed:?}"
    );
    let out = tokio::time::timeout(crate::common::DEADLINE, held)
        .await
        .expect("exec ends")
        .expect("task");
    assert_eq!(out["stdout"], "HTTP/1.1 200 OK\nclosed\n", "{out}");

    // New connections follow the new rules, with no restart.
    let out = sh(&s, &a, &format!("proxy_connect pypi.test:{echo}")).await;
    assert_eq!(out, "HTTP/1.1 403 Forbidden\n");
    assert_eq!(s.state(&a).await, "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn star_reaches_no_private_address_and_no_rules_reach_nothing() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env, |_| {}).await;
    let web = hello_server("0.0.0.0:0").await.expect("the web server");
    let a = agent_with_rules(&s, "a", json!({"allow": ["*"]})).await;
    // Made with no egress: the server's default, which allows nothing.
    let b = s.running_agent(("b", AGENT_IMAGE)).await;
    assert_eq!(
        s.agent(&b).await["egress"],
        json!({"allow": [], "deny": []})
    );
    let gw = network_gateway(&env.network(&a));
    let ip_b = container_ip(&env.container(&b));
    let api = s.api_addr.port();
    let tunnel = s.tunnel_addr.port();
    let mut targets = vec![
        format!("{gw}:{api}"),
        format!("{gw}:{tunnel}"),
        format!("127.0.0.1:{api}"),
        format!("localhost:{tunnel}"),
        format!("{ip_b}:22"),
        "169.254.169.254:80".to_string(),
        format!("{gw}:{web}"),
    ];
    targets.extend(host_addresses().into_iter().map(|h| format!("{h}:{api}")));
    let script: String = targets
        .iter()
        .map(|t| format!("proxy_connect {t}; exec 3<&-\n"))
        .collect();
    let out = sh(&s, &a, &script).await;
    let statuses: Vec<&str> = out.lines().collect();
    assert_eq!(statuses.len(), targets.len(), "{out}");
    for (t, st) in targets.iter().zip(&statuses) {
        assert_eq!(*st, "HTTP/1.1 403 Forbidden", "{t}");
    }

    let out = sh(&s, &b, &format!("proxy_get http://pypi.test:{web}/")).await;
    assert!(out.starts_with("HTTP/1.1 403 Forbidden\n"), "{out}");
}

/// File handles this process holds now (the server's, in these tests: the sandboxes' ends of
/// their connections are in their containers).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_connections_from_one_sandbox_hit_its_cap_and_nothing_else() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // Measures or floods the whole process (or the host): no other test's server runs meanwhile.
    crate::common::exclusive(async {
        const CAP: usize = 64;
        let s = server(&env, |c| c.sandbox.egress.max_connections = CAP).await;
        let web = hello_server("127.0.0.1:0").await.unwrap();
        let a = agent_with_rules(&s, "a", json!({"allow": ["pypi.test"]})).await;
        let b = agent_with_rules(&s, "b", json!({"allow": ["pypi.test"]})).await;
        // The attacker: 1,000 connections held open at once for three seconds, each with a
        // header that never ends. The ones past the cap are answered 429 and closed at once,
        // before the server looks up whose they are; the server's file handles grow by no
        // more than the cap's.
        let flood = format!(
            "{PROXY_FNS}\nproxy_addr; ulimit -n 4096; trap '' PIPE\n\
             for i in $(seq 1000); do exec {{fd}}<>\"/dev/tcp/$PH/$PP\" || {{ echo failed $i; break; }}; \
             printf 'GET http://pypi.test/ HTTP/1.1\\r\\nHost: x\\r\\n' >&$fd 2>/dev/null; last=$fd; done\n\
             IFS= read -r status <&$last; echo \"last: ${{status%$'\\r'}}\"\nsleep 3\n"
        );
        let before = open_fds();
        let command = ["bash", "-c", flood.as_str()];
        let flooding = std::sync::atomic::AtomicBool::new(true);
        let (flooded, (most, other)) = tokio::join!(
            async {
                let out = s.exec(&a, &command).await;
                flooding.store(false, std::sync::atomic::Ordering::Relaxed);
                out
            },
            async {
                // Meanwhile: the most file handles held, and another agent's egress and the
                // API answering throughout.
                let mut most = before;
                let mut other = Vec::new();
                while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                    most = most.max(open_fds());
                    let began = Instant::now();
                    let got = sh(&s, &b, &format!("proxy_get http://pypi.test:{web}/")).await;
                    other.push((got, began.elapsed()));
                    let health = s.get("/api/v1/health").send().await.expect("health");
                    assert_eq!(health.status(), 200);
                    most = most.max(open_fds());
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                (most, other)
            }
        );
        let stdout = flooded["stdout"].as_str().unwrap_or_default();
        assert!(
            stdout.contains("last: HTTP/1.1 429 Too Many Requests"),
            "{flooded}"
        );
        assert!(!stdout.contains("failed"), "{flooded}");
        assert!(!other.is_empty());
        for (got, took) in &other {
            assert!(got.starts_with("HTTP/1.1 200"), "{got}");
            assert!(*took < Duration::from_secs(15), "{took:?}");
        }
        // Each held connection is two handles at most (the sandbox's and, once a request is
        // whole, the destination's); the rest is the other agent's requests and the API's.
        eprintln!("file handles: {before} before, at most {most} during the flood");
        assert!(
            most <= before + 2 * CAP + 64,
            "the flood took the server from {before} to {most} file handles"
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_that_ignore_the_proxy_are_caught_by_transparent_mode() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // "The internet" on ports 80 and 443 of a loopback address of this test's own (ports 80
    // and 443 are the point, and other tests may hold them on other addresses).
    let ip = format!(
        "127.{}.{}.{}",
        1 + rand::random::<u8>() % 250,
        rand::random::<u8>(),
        1 + rand::random::<u8>() % 250
    );
    hello_server((ip.as_str(), 80)).await.expect("bind :80");
    // Plays a TLS server: the proxy only reads the ClientHello's server name and passes every
    // byte on, so an echo that says hello first shows the bytes arrived.
    echo_server((ip.as_str(), 443), b"tls-side\n")
        .await
        .expect("bind :443");
    let addr: IpAddr = ip.parse().expect("ip");
    let s = env
        .server_with(true, |c| {
            c.sandbox.egress.resolve = NAMES.iter().map(|n| (n.to_string(), addr)).collect();
        })
        .await;
    let a = agent_with_rules(&s, "a", json!({"allow": ["pypi.test", "*.hosted.test"]})).await;
    let gw = network_gateway(&env.network(&a));
    // The sandbox's resolver is the server, on its gateway (inside the subnet: routable even
    // where Docker gives internal networks no default route).
    let dns = docker(&[
        "inspect",
        "-f",
        "{{json .HostConfig.Dns}}",
        &env.container(&a),
    ]);
    assert_eq!(dns.trim(), format!("[\"{gw}\"]"));

    // The sandbox's resolver answers allowed names (with the server's address) and nothing else,
    // at once.
    let out = sh(
        &s,
        &a,
        "set -o pipefail; for n in pypi.test files.hosted.test hosted.test blocked.test; do \
         getent hosts $n | awk '{print $2, $1}' || echo \"$n: $?\"; done",
    )
    .await;
    assert_eq!(
        out,
        format!("pypi.test {gw}\nfiles.hosted.test {gw}\nhosted.test: 2\nblocked.test: 2\n"),
        "getent output"
    );

    let mut events = s.lc.subscribe();
    // Port 80, with no proxy in sight: checked on the Host header.
    let plain = "unset HTTP_PROXY http_proxy; exec 3<>/dev/tcp/pypi.test/80; \
                 printf 'GET / HTTP/1.1\\r\\nHost: pypi.test\\r\\nConnection: close\\r\\n\\r\\n' >&3; \
                 IFS= read -r status <&3; echo \"${status%$'\\r'}\"; tail -n 1 <&3";
    assert_eq!(
        sh(&s, &a, plain).await,
        "HTTP/1.1 200 OK\nhello from pypi.test\n"
    );
    let sneaky = format!(
        "exec 3<>/dev/tcp/{gw}/80; printf 'GET / HTTP/1.1\\r\\nHost: blocked.test\\r\\nConnection: close\\r\\n\\r\\n' >&3; \
         IFS= read -r status <&3; echo \"${{status%$'\\r'}}\""
    );
    assert_eq!(sh(&s, &a, &sneaky).await, "HTTP/1.1 403 Forbidden\n");

    // Port 443: checked on the TLS server name, and the ClientHello goes on unchanged.
    let hello = |name: &str| {
        agenthold::egress::client_hello(name)
            .iter()
            .map(|b| format!("\\x{b:02x}"))
            .collect::<String>()
    };
    let tls = format!(
        "exec 3<>/dev/tcp/pypi.test/443; printf '{}' >&3; IFS= read -r first <&3; echo \"$first\"; \
         head -c 3 <&3 | od -An -tx1 | tr -d ' \\n'; echo",
        hello("pypi.test")
    );
    assert_eq!(sh(&s, &a, &tls).await, "tls-side\n160301\n");
    let ok = egress_event(&mut events, &a, |e| e.host == "pypi.test" && e.port == 443).await;
    assert!(ok.allowed, "{ok:?}");

    // A server name no rule allows: the connection closes without a byte, and the event says so.
    let denied = format!(
        "exec 3<>/dev/tcp/{gw}/443; printf '{}' >&3; n=$(head -c 100 <&3 | wc -c); echo \"got $n\"",
        hello("blocked.test")
    );
    assert_eq!(sh(&s, &a, &denied).await, "got 0\n");
    let refused = egress_event(&mut events, &a, |e| {
        e.host == "blocked.test" && e.port == 443
    })
    .await;
    assert!(!refused.allowed, "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_show_on_the_exec_the_process_and_the_egress_log() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    let s = server(&env, |_| {}).await;
    let web = hello_server("0.0.0.0:0").await.expect("the web server");
    let a = agent_with_rules(
        &s,
        "seen",
        json!({"allow": ["pypi.test", "blocked.test"], "deny": ["blocked.test"]}),
    )
    .await;
    let log_path = format!("/api/v1/agents/{a}/egress/log");
    // A restart forgets it all; a new agent has nothing yet.
    assert_eq!(s.get_json(&log_path).await, json!([]));

    // One allowed, one refused by no rule (twice: told once), one by a deny rule.
    let script = format!(
        "{PROXY_FNS}\nproxy_get http://pypi.test:{web}/ok; proxy_get http://hosted.test:{web}/a; \
         proxy_get http://hosted.test:{web}/b; proxy_get http://blocked.test:{web}/c"
    );
    let out = s.exec(&a, &["bash", "-c", &script]).await;
    assert_eq!(
        out["egressDenied"],
        json!([
            {"host": "hosted.test", "port": web, "rule": null},
            {"host": "blocked.test", "port": web, "rule": "blocked.test"},
        ]),
        "{out}"
    );
    // A command that reaches nothing outside was refused nothing, whatever came before.
    let quiet = s.exec(&a, &["true"]).await;
    assert_eq!(quiet["egressDenied"], json!([]), "{quiet}");

    // The streamed exec's last line.
    let streamed = s
        .post(&format!("/api/v1/agents/{a}/exec"))
        .header("accept", "application/x-ndjson")
        .json(&json!({"command": ["bash", "-c", format!("{PROXY_FNS}\nproxy_get http://files.hosted.test:{web}/")]}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let last: Value = serde_json::from_str(streamed.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["egressDenied"],
        json!([{"host": "files.hosted.test", "port": web, "rule": null}]),
        "{streamed}"
    );

    // A background process: what it was refused, not what came after it ended; on its record,
    // its `process` event of ending and its output's exit line alike.
    let mut events =
        crate::common::sse::Events::open_at(&s, &format!("/api/v1/events?agent={a}")).await;
    let procs = crate::common::procs::Procs::new(s.http.clone(), &s.base, &a);
    let p = procs
        .start(json!({"command": ["bash", "-c", format!("{PROXY_FNS}\nproxy_get http://blocked.test:{web}/p")]}))
        .await;
    let (status, ended) = procs.wait(&p.id, 20_000).await;
    assert_eq!(status, 200, "{ended:?}");
    sh(&s, &a, &format!("proxy_get http://hosted.test:{web}/after")).await;
    let want = json!([{"host": "blocked.test", "port": web, "rule": "blocked.test"}]);
    let (status, got) = procs.get(&p.id).await;
    assert_eq!(status, 200);
    assert_eq!(got["egressDenied"], want, "{got}");
    let seen = events
        .about_until(&a, |kind, data| {
            kind == "process"
                && data["process"]["id"] == p.id
                && data["process"]["state"] != "running"
        })
        .await;
    let (_, end) = seen.last().expect("the process's end");
    assert_eq!(end["process"]["egressDenied"], want, "{end}");
    let (status, lines) = procs.output_lines(&p.id, 0, true).await;
    assert_eq!(status, 200);
    let exit = lines.last().expect("an exit line");
    assert_eq!(exit["exit"]["egressDenied"], want, "{exit}");

    // The log: every decision, oldest first; the allowed one with its bytes once it closed.
    let entries = crate::common::wait_for_value("the allowed connection's bytes", || async {
        let log = s.get_json(&log_path).await;
        let done = log.as_array()?.iter().any(|e| {
            e["host"] == "pypi.test" && e["allowed"] == true && e["bytesDown"].as_u64() > Some(0)
        });
        done.then_some(log)
    })
    .await;
    let seen: Vec<(String, bool, Value)> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["host"].as_str().unwrap().to_string(),
                e["allowed"].as_bool().unwrap(),
                e["rule"].clone(),
            )
        })
        .collect();
    assert_eq!(
        &seen[..4],
        [
            ("pypi.test".to_string(), true, json!("pypi.test")),
            ("hosted.test".to_string(), false, Value::Null),
            ("hosted.test".to_string(), false, Value::Null),
            ("blocked.test".to_string(), false, json!("blocked.test")),
        ],
        "{entries}"
    );
    assert!(entries[0]["at"].as_str().is_some(), "{entries}");
    let (status, _) = s
        .call("GET", "/api/v1/agents/nobody/egress/log", None)
        .await;
    assert_eq!(status, 404);
}

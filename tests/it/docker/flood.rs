//! The red team's flood from inside a real sandbox (#11, item 1): a sandbox opens 200
//! connections to its gateway's tunnel port, the one port it may reach, each with a header that
//! never ends. It gets no more than its address's cap, those are cut at the header timeout, and
//! meanwhile the API and another agent's exec answer. Needs Docker.

use std::time::{Duration, Instant};

use crate::common::docker::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_a_sandbox_gets_its_cap_and_the_header_timeout() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // Measures or floods the whole process (or the host): no other test's server runs meanwhile.
    crate::common::exclusive(async {
        let s = env
            .server_with(false, |c| {
                // Long enough that the first look (after 200 connects and a second) always comes
                // before the cut on a loaded machine; the second look comes well after it.
                c.server.header_timeout = Duration::from_secs(10);
            })
            .await;
        let a = s.running_agent(("flooder", DEBIAN_IMAGE)).await;
        let b = s.running_agent(("other", BUSYBOX_IMAGE)).await;
        let gw = network_gateway(&env.network(&a));
        let port = s.tunnel_addr.port();

        // Per connection, after the flood is open: "held" (no answer yet), "503" (refused), or
        // "gone" (closed); then again 12 s later, past the header timeout.
        let script = format!(
            r#"trap "" PIPE
fds=()
for i in $(seq 200); do
  exec {{fd}}<>/dev/tcp/{gw}/{port} 2>/dev/null || continue
  printf 'GET /tunnel HTTP/1.1\r\nHost: x\r\n' >&$fd 2>/dev/null
  fds+=($fd)
done
sleep 1
look() {{
  for fd in "${{fds[@]}}"; do
    if read -r -t 0.05 -u $fd line 2>/dev/null; then
      case "$line" in *503*) echo "$1 503";; *) echo "$1 other";; esac
    elif [ $? -gt 128 ]; then echo "$1 held"; else echo "$1 gone"; fi
  done
}}
look first
sleep 12
look later
"#
        );
        let flood = {
            let (base, a) = (s.base.clone(), a.clone());
            tokio::spawn(async move {
                let r = reqwest::Client::new()
                    .post(format!("{base}/api/v1/agents/{a}/exec"))
                    .bearer_auth(crate::common::TOKEN)
                    .json(&serde_json::json!({"command": ["bash", "-c", script]}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                r.json::<serde_json::Value>().await.unwrap()
            })
        };

        // While it runs, the API and exec in the other agent keep answering (the bound is far above
        // their usual milliseconds, so that only a server that stops answering trips it).
        while !flood.is_finished() {
            let began = Instant::now();
            let health = s.get("/api/v1/health").send().await.unwrap();
            assert_eq!(health.status(), 200);
            assert_eq!(s.exec_ok(&b, &["echo", "hi"]).await, "hi\n");
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "health and exec took {:?} during the flood",
                began.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let out = flood.await.unwrap();
        let stdout = out["stdout"].as_str().unwrap_or_default();
        let count = |what: &str| stdout.lines().filter(|l| *l == what).count();
        let (held, refused) = (
            count("first held"),
            count("first 503") + count("first gone"),
        );
        let summary = format!(
            "held {held}, refused {refused}, still held after the timeout {}; exit {}, stderr {}",
            count("later held"),
            out["exitCode"],
            out["stderr"]
        );
        // The cap is 8 per address, and the sandbox's own sandboxd holds one of them.
        assert!((1..=8).contains(&held), "{summary}");
        assert!(held + refused >= 190, "{summary}");
        assert_eq!(
            count("later held"),
            0,
            "all cut by the header timeout: {summary}"
        );
        // The flooder's own tunnel session was never disturbed.
        assert_eq!(s.exec_ok(&a, &["echo", "still"]).await, "still\n");
    })
    .await
}

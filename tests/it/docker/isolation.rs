//! What a sandbox can reach. Every target is a listener this test runs on this machine or a
//! container of this test: nothing is ever sent anywhere else. Needs Docker.

use crate::common::docker::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_reaches_only_its_tunnel() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    // The API on every address, so it is also on the gateways: it must still be out of reach.
    let s = env.server(true).await;
    let a = s.running_agent(("a", DEBIAN_IMAGE)).await;
    let b = s.running_agent(("b", BUSYBOX_IMAGE)).await;
    let gw_a = network_gateway(&env.network(&a));
    let gw_b = network_gateway(&env.network(&b));
    let ip_b = container_ip(&env.container(&b));

    // The control: the tunnel port on A's own gateway is open (that is how sandboxd got in).
    let tunnel = format!("{gw_a}:{}", s.tunnel_addr.port());
    assert!(
        can_connect(&s, &a, &tunnel).await,
        "the tunnel is not reachable from A"
    );

    // Listeners the test runs on the host: on A's own gateway (another port), on B's gateway,
    // and on every host address that is not a Docker bridge (docker0 included); and the API
    // port on A's gateway. Nothing answers.
    let mut targets = vec![listen_on(&gw_a).await, listen_on(&gw_b).await];
    let hosts = host_addresses();
    assert!(!hosts.is_empty(), "no host address to test with");
    for h in &hosts {
        targets.push(listen_on(h).await);
    }
    for t in &targets {
        // The listener works: the test itself can connect.
        tokio::net::TcpStream::connect(t)
            .await
            .unwrap_or_else(|e| panic!("the test's own listener {t} does not answer: {e}"));
    }
    let mut addrs: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
    addrs.push(format!("{gw_a}:{}", s.api_addr.port()));
    let got = reachable(&s, &a, &addrs).await;
    for (addr, open) in addrs.iter().zip(got) {
        assert!(!open, "A reaches the host at {addr}");
    }

    // A service in B (busybox httpd), reachable from the host, is not reachable from A.
    let serve = {
        let s_base = s.base.clone();
        let b = b.clone();
        tokio::spawn(async move {
            let _ = reqwest::Client::new()
                .post(format!("{s_base}/api/v1/agents/{b}/exec"))
                .bearer_auth(crate::common::TOKEN)
                .json(&serde_json::json!({
                    "command": ["busybox", "httpd", "-f", "-p", "7777"],
                    "timeoutMs": 60000
                }))
                .send()
                .await;
        })
    };
    let b_http = format!("{ip_b}:7777");
    crate::common::wait_for("B's httpd answers the host", || {
        let b_http = b_http.clone();
        async move { tokio::net::TcpStream::connect(&b_http).await.is_ok() }
    })
    .await;
    assert!(
        !can_connect(&s, &a, &b_http).await,
        "A reaches B at {b_http}"
    );
    serve.abort();
    s.stop().await;
}

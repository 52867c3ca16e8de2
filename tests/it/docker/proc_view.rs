//! What the sandbox's account sees of sandboxd through `/proc` (#36, finding 5), on runc and on
//! gVisor. Under gVisor (Debian's 2022-12 runsc) any account may read every process's
//! `environ` and `maps`, root's included, and neither runtime lets `/proc` be remounted with
//! `hidepid=2` (no `CAP_SYS_ADMIN` under Docker; runsc refuses the remount). So what matters is
//! that nothing there is worth reading: the attacker, as the agent account, looks for the boot
//! token in every process's environment and command line and in the boot file, and tries to
//! read sandboxd's memory. Needs Docker with runsc (scripts/docker-setup.sh).

use crate::common::docker::*;
use serde_json::json;

/// Run as the agent account, with the token in two halves (`A`, `B`) so that no command line
/// or environment of the attacker's own holds it whole; only shell builtins compare.
const LOOK: &str = r#"tok="$A$B"
found=""
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /etc/agenthold/boot.json; do
  c=$(tr '\0' ' ' < "$f" 2>/dev/null) || continue
  case "$c" in *"$tok"*) found="$found $f";; esac
done
echo "found:$found"
readable=""
for f in /proc/[0-9]*/environ; do
  tr '\0' ' ' < "$f" >/dev/null 2>&1 && readable="$readable ${f#/proc/}"
done
echo "environ readable:$readable"
sd=""
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" in /opt/agenthold/sandboxd*) sd=${p#/proc/}; break;; esac
done
echo "sandboxd:$sd"
if head -c 1 "/proc/$sd/mem" >/dev/null 2>&1; then echo "mem:readable"; else echo "mem:denied"; fi
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_account_finds_no_token_in_proc_on_runc_or_gvisor() {
    let Some(env) = DockerEnv::new_or_skip() else {
        return;
    };
    super::runtime::require_runsc();
    let s = env.server(false).await;
    for runtime in ["runc", "runsc"] {
        let r = s
            .send(
                "POST",
                "/api/v1/agents",
                &json!({"name": format!("proc-{runtime}"), "image": AGENT_IMAGE, "runtime": runtime}),
            )
            .await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
        let id = r.json::<serde_json::Value>().await.expect("agent")["id"]
            .as_str()
            .expect("id")
            .to_string();
        s.wait_state(&id, "running").await;
        // The token the server staged for this boot, as root sees it from outside.
        let boot = docker(&[
            "exec",
            &env.container(&id),
            "cat",
            "/etc/agenthold/boot.json",
        ]);
        let boot: serde_json::Value = serde_json::from_str(&boot).expect("boot.json");
        let token = boot["token"].as_str().expect("a token").to_string();
        assert!(token.len() >= 32, "{token}");
        let (a, b) = token.split_at(token.len() / 2);
        let out = s
            .send(
                "POST",
                &format!("/api/v1/agents/{id}/exec"),
                &json!({"command": ["bash", "-c", LOOK], "env": {"A": a, "B": b}}),
            )
            .await;
        assert_eq!(out.status(), 200);
        let out: serde_json::Value = out.json().await.expect("exec");
        let stdout = out["stdout"].as_str().unwrap_or_default().to_string();
        eprintln!("{runtime}: {stdout}");
        assert!(
            stdout.contains("\nsandboxd:") && !stdout.contains("\nsandboxd:\n"),
            "{runtime}: {out}"
        );
        assert!(
            stdout.contains("found:\n"),
            "{runtime}: the token is readable: {out}"
        );
        assert!(
            stdout.contains("mem:denied"),
            "{runtime}: sandboxd's memory is readable: {out}"
        );
        s.destroy(&id).await;
    }
}

//! The model-free ACP test agent (`acp-test-agent/`, see its README) as the harness of a test
//! server: its static build, made once when it is missing, and the config that names it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agenthold::config::{Config, HarnessConfig};

/// The name the test servers give the test agent under `harnesses:`.
pub const HARNESS: &str = "test";

/// Where cargo builds: `CARGO_TARGET_DIR`, else the one this test binary was built in
/// (`TARGET/debug/deps/it-…`), else `target/`.
fn target_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return manifest.join(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| manifest.join("target"))
}

/// The static test agent (`ACP_TEST_AGENT_BIN`, else `TARGET/acp-test-agent/acp-test-agent`),
/// built by `scripts/build-acp-test-agent.sh` the first time it is missing. Blocking: call it
/// through [`test_agent`] from async code.
pub fn test_agent_blocking() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(bin) = std::env::var_os("ACP_TEST_AGENT_BIN") {
            return PathBuf::from(bin);
        }
        let target = target_dir();
        let bin = target.join("acp-test-agent/acp-test-agent");
        std::fs::create_dir_all(&target).expect("create the target directory");
        // Other test processes may want it at the same time: one builds, the others wait.
        let lock = std::fs::File::create(target.join(".acp-test-agent.lock"))
            .expect("create the test agent's build lock");
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .expect("lock the test agent's build");
        if !bin.exists() {
            let script =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-acp-test-agent.sh");
            let out = std::process::Command::new("bash")
                .arg(&script)
                .env("CARGO_TARGET_DIR", &target)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .expect("run scripts/build-acp-test-agent.sh");
            assert!(
                out.status.success() && bin.exists(),
                "scripts/build-acp-test-agent.sh failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        bin
    })
    .clone()
}

/// [`test_agent_blocking`] off the async runtime's threads.
pub async fn test_agent() -> PathBuf {
    tokio::task::spawn_blocking(test_agent_blocking)
        .await
        .expect("building the test agent")
}

/// Makes the test agent at `bin` (with `args` after it) the server's only harness, [`HARNESS`],
/// and its default: `harnesses: {test: {command: [bin, args…]}}`, `sandbox.default_harness:
/// test`.
pub fn use_test_harness(c: &mut Config, bin: &Path, args: &[&str]) {
    let mut command = vec![bin.display().to_string()];
    command.extend(args.iter().map(|a| a.to_string()));
    c.harnesses = [(
        HARNESS.to_string(),
        HarnessConfig {
            command,
            ..Default::default()
        },
    )]
    .into();
    c.sandbox.default_harness = Some(HARNESS.to_string());
}

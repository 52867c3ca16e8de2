//! `agenthold bench`: how fast a sandbox is there and how little it costs, measured against
//! plain Docker in the same run on the same machine. It starts its own server (Docker driver,
//! temporary data directory, its own name prefix and address range) and removes everything it
//! made at the end, also when interrupted.

mod cases;
mod docker_cli;
mod server_proc;
pub mod servers;
mod stats;
mod target;

use std::time::Duration;

use anyhow::Context;

use cases::Ctx;
use server_proc::ServerProc;
pub use stats::Row;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Fewer runs and smaller sizes: finishes in a few minutes (a smoke test)
    #[arg(long)]
    pub quick: bool,
    /// Print the results as JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Image of the agents and of the plain-Docker baselines
    #[arg(long, default_value = "debian:bookworm-slim")]
    pub image: String,
    /// Measured runs per case (after one warm-up); default 10, or 3 with --quick
    #[arg(long)]
    pub runs: Option<usize>,
    /// Run only these cases (repeat the flag or separate with commas); all when absent
    #[arg(long = "case", value_enum, value_delimiter = ',')]
    pub cases: Vec<Case>,
}

/// The cases `--case` can select. `restart` needs the agents `burst` leaves running, so it
/// runs the burst too.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// exec `true`
    Exec,
    /// keystroke echo, quiet and with another agent streaming a file
    Echo,
    /// file write and read, and the server's RSS growth during them
    Files,
    /// sandboxd size and RSS, server RSS idle
    Footprint,
    /// create → shell usable
    Create,
    /// wake → first terminal byte, from sleeping and from paused
    Wake,
    /// many agents created at once, cold and from a warm pool as big as the burst; the host's
    /// memory and the server's RSS with them running and paused
    Burst,
    /// server restart with a fleet of agents
    Restart,
    /// background processes: start → first output byte, following 1 GiB of output, sandboxd's
    /// RSS with 100 processes
    Processes,
    /// the egress proxy: download throughput, connection overhead, many tunnels at once
    Egress,
    /// TLS interception for a secret against the same server spliced: first byte, handshake,
    /// download throughput (needs the ready image, for curl)
    Secrets,
    /// gVisor (`runsc`) against runc: exec `true`, create → shell, wake, a file written and
    /// read
    Runtime,
    /// agent sessions with the model-free ACP test agent as the harness: prompt → first update
    /// at an SSE client, updates delivered per second, server RSS per idle session, wake →
    /// first update
    Sessions,
    /// code that keeps state: `run_code("1+1")` in the ready image's kernel against `exec
    /// python3 -c 1+1` in the same agent
    Code,
    /// previews (an app in the sandbox, reached through its preview URL): request → first
    /// byte against the same request inside the sandbox, a 1 GiB download against `docker cp`,
    /// 100 WebSockets echoing at once
    Previews,
    /// the audit log: `GET /api/v1/audit` with filters over 100,000 entries
    Audit,
}

impl BenchArgs {
    fn wants(&self, case: Case) -> bool {
        self.cases.is_empty()
            || self.cases.contains(&case)
            || (case == Case::Burst && self.cases.contains(&Case::Restart))
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<i32> {
    let tmp = tempfile::Builder::new()
        .prefix("agenthold-bench-")
        .tempdir()
        .context("making a temporary directory")?;
    let prefix = format!("ahbench{}", &crate::model::new_agent_id()[..6]);
    let cleanup_prefix = prefix.clone();
    let result = tokio::select! {
        r = measure(&args, tmp.path(), &prefix) => r,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("bench: interrupted; cleaning up");
            Err(anyhow::anyhow!("interrupted"))
        }
    };
    // `measure` is dropped by now, so its server child is killed (kill_on_drop).
    docker_cli::remove_everything(&cleanup_prefix).await;
    let rows = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{}", stats::render(&rows));
        let missed: Vec<&str> = rows
            .iter()
            .filter(|r| r.met == Some(false))
            .map(|r| r.case.as_str())
            .collect();
        if !missed.is_empty() {
            println!("\ntargets not met: {}", missed.join("; "));
        }
    }
    Ok(0)
}

fn progress(what: &str) {
    eprintln!("bench: {what}");
}

async fn measure(
    args: &BenchArgs,
    tmp: &std::path::Path,
    prefix: &str,
) -> anyhow::Result<Vec<Row>> {
    docker_cli::docker(&["image", "inspect", &args.image])
        .await
        .with_context(|| {
            format!(
                "image {} must exist locally (scripts/docker-setup.sh builds it)",
                args.image
            )
        })?;
    let runs = args.runs.unwrap_or(if args.quick { 3 } else { 10 });
    // The sessions case needs the test agent in every sandbox, mounted from the start.
    let test_agent = if args.wants(Case::Sessions) {
        match cases::sessions::stage_test_agent(tmp) {
            Ok(dir) => Some(dir),
            Err(why) => {
                progress(&format!("agent sessions: skipped, {why}"));
                None
            }
        }
    } else {
        None
    };
    let (config, base, previews) =
        server_proc::write_config(tmp, prefix, &args.image, test_agent.as_deref())?;
    let token = crate::store::new_token();
    // With AGENTHOLD_LOG set the server's log is worth reading afterwards: keep it outside the
    // temporary directory, which goes at the end.
    let log = if std::env::var_os("AGENTHOLD_LOG").is_some() {
        let kept = std::env::temp_dir().join(format!("{prefix}-server.log"));
        progress(&format!("the server logs to {}", kept.display()));
        kept
    } else {
        tmp.join("server.log")
    };
    let mut server = ServerProc::start(&config, &base, previews, &token, &log).await?;
    // Let the allocator settle before reading the idle figure.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_kib = server.rss_kib().unwrap_or(0);

    let mut cx = Ctx {
        server: &mut server,
        prefix,
        image: &args.image,
        runs,
        tmp,
        quick: args.quick,
    };
    let mut rows = Vec::new();
    progress("warming up");
    let client = cx.server.client.clone();
    let main = cases::common::create_running(&client, "main").await?;
    let other = cases::common::create_running(&client, "other").await?;
    let base_name = cases::common::baseline_container(prefix, &args.image, "main").await?;

    if args.wants(Case::Exec) {
        progress("exec true");
        rows.push(cases::exec_true(&mut cx, &main, &base_name).await?);
    }
    if args.wants(Case::Echo) {
        progress("keystroke echo");
        rows.extend(cases::keystroke_echo(&mut cx, &main, &other).await?);
    }
    if args.wants(Case::Files) {
        progress("file write and read");
        rows.extend(cases::files(&mut cx, &main, &base_name).await?);
    }
    if args.wants(Case::Footprint) {
        progress("footprint");
        rows.extend(cases::footprint(&mut cx, &main, idle_kib).await?);
    }
    if args.wants(Case::Create) {
        progress("create → shell");
        rows.push(cases::create_to_shell(&mut cx).await?);
        progress("create from the warm pool → shell");
        rows.push(cases::create::create_from_pool_to_shell(&mut cx).await?);
    }
    if args.wants(Case::Wake) {
        progress("wake → first byte");
        rows.push(cases::wake_to_first_byte(&mut cx, &main).await?);
        progress("wake from paused → first byte");
        rows.push(cases::wake_from_paused_to_first_byte(&mut cx, &main).await?);
    }
    if args.wants(Case::Processes) {
        progress("background processes");
        rows.extend(cases::processes(&mut cx, &main).await?);
    }

    if args.wants(Case::Egress) {
        progress("egress proxy");
        rows.extend(cases::egress::egress(&mut cx).await?);
    }

    if args.wants(Case::Secrets) {
        if cases::common::have_ready_image().await {
            progress("secrets: TLS interception against splicing");
            rows.extend(cases::secrets::secrets(&mut cx).await?);
        } else if args.cases.contains(&Case::Secrets) {
            anyhow::bail!(
                "the secrets case needs curl, in {} (scripts/build-agent-image.sh builds it)",
                crate::config::AGENT_IMAGE
            );
        } else {
            progress("secrets: skipped, no ready image (scripts/build-agent-image.sh)");
        }
    }

    if args.wants(Case::Runtime) {
        if cases::runtime::engine_has_gvisor().await? {
            progress("runtimes: runsc against runc");
            rows.extend(cases::runtime::runtime(&mut cx).await?);
        } else if args.cases.contains(&Case::Runtime) {
            anyhow::bail!(
                "the engine has no runtime runsc (gVisor); scripts/docker-setup.sh installs and \
                 registers it"
            );
        } else {
            progress("runtimes: skipped, the engine has no runsc (scripts/docker-setup.sh)");
        }
    }

    if args.wants(Case::Code) {
        if cases::common::have_ready_image().await {
            progress("code: run_code against exec python3");
            rows.push(cases::code::code(&mut cx).await?);
        } else {
            let why = format!(
                "the ready agent image {} is missing (its ipykernel runs the code); \
                 scripts/build-agent-image.sh builds it",
                crate::config::AGENT_IMAGE
            );
            if args.cases.contains(&Case::Code) {
                anyhow::bail!("{why}");
            }
            progress(&format!("code: skipped, {why}"));
        }
    }

    if args.wants(Case::Previews) {
        if cases::common::have_ready_image().await {
            progress("previews");
            rows.extend(cases::previews::previews(&mut cx).await?);
        } else {
            let why = format!(
                "the ready agent image {} is missing (its python3 serves the app); \
                 scripts/build-agent-image.sh builds it",
                crate::config::AGENT_IMAGE
            );
            if args.cases.contains(&Case::Previews) {
                anyhow::bail!("{why}");
            }
            progress(&format!("previews: skipped, {why}"));
        }
    }

    if args.wants(Case::Audit) {
        progress(&format!("audit log of {} entries", cases::audit::ENTRIES));
        rows.push(cases::audit::audit(&mut cx).await?);
    }

    if test_agent.is_some() {
        progress("agent sessions");
        rows.extend(cases::sessions(&mut cx).await?);
    }

    if args.wants(Case::Burst) {
        let burst_n = if args.quick { 10 } else { 50 };
        progress(&format!("burst of {burst_n}"));
        // From the pool first, on a machine without the cold burst's agents.
        rows.push(cases::warm_burst(&mut cx, burst_n).await?);
        let (burst_rows, mut running) = cases::burst(&mut cx, burst_n).await?;
        rows.extend(burst_rows);
        progress(&format!("{burst_n} agents paused"));
        rows.extend(cases::paused_memory(&mut cx, &running).await?);
        running.push(main.clone());
        running.push(other.clone());
        rows.push(cases::server_rss_with_agents(&cx, running.len()));

        if args.wants(Case::Restart) {
            let total = if args.quick { 20 } else { 200 };
            progress(&format!("restart with {total} agents"));
            rows.push(cases::restart(&mut cx, &running, total).await?);
        }
    }
    server.stop().await;
    Ok(rows)
}

//! The sandbox container's entrypoint.

use std::os::unix::fs::MetadataExt;

use agenthold_proto::boot::{BootConfig, BOOT_PATH};
use anyhow::Context;
use sandboxd::SandboxOptions;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// What to log: `RUST_LOG` as a list of `target=level` and a bare default level; `info` when
/// it is unset, empty or cannot be read.
fn log_filter(rust_log: Option<&str>) -> Targets {
    rust_log
        .filter(|s| !s.trim().is_empty())
        .and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO))
}

fn main() -> anyhow::Result<()> {
    if let Some(code) = sandboxd::process::shim::run_if_invoked() {
        std::process::exit(code);
    }
    tracing_subscriber::registry()
        .with(log_filter(std::env::var("RUST_LOG").ok().as_deref()))
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    let boot_path = boot_path_from_args(std::env::args().skip(1))?;
    let boot = BootConfig::load(&boot_path)?;
    let mut opts = SandboxOptions::container()?;
    opts.env = boot.env.clone().into_iter().collect();
    adopt_fresh_home(&opts)?;
    // A sandbox that cannot trust its network's proxy still serves everything else, and says why.
    if let Err(e) = sandboxd::trust::install(
        boot.ca_certificates.as_deref(),
        &sandboxd::trust::TrustPaths::container(),
    ) {
        tracing::warn!(error = %e, "cannot install sandbox.egress.ca_certificates");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
        let stopper = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            stopper.cancel();
        });
        sandboxd::run(boot, opts, shutdown).await?;
        anyhow::Ok(())
    })
}

fn boot_path_from_args(mut args: impl Iterator<Item = String>) -> anyhow::Result<String> {
    let mut path = BOOT_PATH.to_string();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--boot" => path = args.next().context("--boot needs a path")?,
            "--version" => {
                println!("sandboxd {}", agenthold_proto::VERSION);
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?} (usage: sandboxd [--boot PATH])"),
        }
    }
    Ok(path)
}

/// A fresh home volume belongs to root; hand it to the account so its shell can write there.
fn adopt_fresh_home(opts: &SandboxOptions) -> anyhow::Result<()> {
    let Some((uid, gid)) = opts.account.chown_target() else {
        return Ok(());
    };
    let meta = match std::fs::metadata(&opts.home) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(home = %opts.home.display(), error = %e, "no home directory");
            return Ok(());
        }
    };
    if meta.uid() == 0 {
        nix::unistd::chown(&opts.home, Some(uid), Some(gid))
            .with_context(|| format!("cannot hand {} to the account", opts.home.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::log_filter;
    use tracing::Level;

    #[test]
    fn the_log_filter_reads_targets_and_levels_and_falls_back_to_info() {
        let f = log_filter(Some("sandboxd=debug,yamux=warn"));
        assert!(f.would_enable("sandboxd::tunnel", &Level::DEBUG));
        assert!(!f.would_enable("yamux", &Level::INFO));
        for unset in [None, Some("sandboxd=loud"), Some("")] {
            let f = log_filter(unset);
            assert!(f.would_enable("sandboxd", &Level::INFO), "{unset:?}");
            assert!(!f.would_enable("sandboxd", &Level::DEBUG), "{unset:?}");
        }
    }
}

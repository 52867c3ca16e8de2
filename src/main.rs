//! The `agenthold` binary: the server (`serve`) and the command-line client.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio::signal::unix::{signal, Signal, SignalKind};

use agenthold::cli::{ClientCommand, ClientOpts};
use agenthold::config::reload::{ConfigSource, Reloader};
use agenthold::config::Config;
use agenthold::logging::LogFilter;
use agenthold::server::Server;

#[derive(Parser)]
#[command(
    name = "agenthold",
    version,
    about = "Self-hosted sandboxes for AI agents"
)]
struct Cli {
    #[command(flatten)]
    client: ClientOpts,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server
    Serve {
        /// YAML config file; without one the server runs on defaults
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Measure agenthold against plain Docker on this machine (needs Docker)
    Bench(agenthold::bench::BenchArgs),
    /// Make a new admin token for the server on this machine (run with its --config)
    AdminToken {
        /// Replace the admin token: the old one stops working, with its web sign-ins
        #[arg(long, required = true)]
        reset: bool,
        /// The server's YAML config file (for its data directory); without one, the defaults
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the OpenAPI document a server with this config serves (as JSON), without serving
    Openapi {
        /// YAML config file; without one, the defaults
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Work with config files without running a server
    #[command(subcommand)]
    Config(ConfigCommand),
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a config file as `serve` would (the environment included), starting nothing;
    /// exits non-zero naming the key at fault
    Check {
        /// The YAML config file
        file: PathBuf,
    },
}

async fn shutdown_signal() {
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
}

async fn serve(path: Option<PathBuf>) -> anyhow::Result<()> {
    // Caught from the start: SIGHUP's default would end the server.
    let hangups = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
    let config = Config::load(path.as_deref(), |k| std::env::var(k).ok())?;
    let log = LogFilter::install(&config.server.log_level);
    let server = Server::bind_from(config, ConfigSource { path, log }).await?;
    tokio::spawn(reload_on_hangup(hangups, server.reloader()));
    server.run(shutdown_signal()).await
}

/// `SIGHUP` reads the config file again; the reload says in the log what came of it.
async fn reload_on_hangup(mut hangups: Signal, reloader: Arc<Reloader>) {
    while hangups.recv().await.is_some() {
        tracing::info!("SIGHUP: reading the config file again");
        // Logged by the reload, whatever the outcome; there is nobody else to tell.
        let _outcome = reloader.reload().await;
    }
}

/// `agenthold config check FILE`: the file's warnings on stderr, and `FILE: ok` on stdout.
fn config_check(file: &Path) -> anyhow::Result<()> {
    let config = Config::load(Some(file), |k| std::env::var(k).ok())?;
    for warning in config.warnings() {
        eprintln!("warning: {warning}");
    }
    println!("{}: ok", file.display());
    Ok(())
}

async fn admin_token(config: Option<PathBuf>) -> anyhow::Result<()> {
    let config = Config::load(config.as_deref(), |k| std::env::var(k).ok())?;
    let token = agenthold::server::reset_admin_token(&config).await?;
    println!("{token}");
    eprintln!(
        "\nThis is the new admin token; the old one no longer works. {}\nA running server \
         takes it at its next start: restart it.",
        agenthold::server::token_usage(&token)
    );
    Ok(())
}

/// The document as a server with `config` serves it, assuming its driver can limit disks, and
/// with `runtime` any name (a server's engine decides which are allowed).
fn openapi(config: Option<PathBuf>) -> anyhow::Result<()> {
    let config = Config::load(config.as_deref(), |k| std::env::var(k).ok())?;
    let facts = agenthold::api::openapi::Facts {
        disk_limits: true,
        preset_names: false,
        runtimes: None,
    };
    let doc = agenthold::api::openapi::document(&config, facts);
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

fn main() -> ExitCode {
    // The fake driver's sandboxes run in this process; their background processes are held by
    // this binary started as a shim. Before any runtime: the shim waits for signals on its one
    // thread, and a runtime's threads would take them.
    if let Some(code) = sandboxd::process::shim::run_if_invoked() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(run()),
        Err(e) => {
            eprintln!("agenthold: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => match serve(config).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agenthold: {}", agenthold::cli::error_report(&e));
                ExitCode::FAILURE
            }
        },
        Command::AdminToken { reset: _, config } => match admin_token(config).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agenthold: {}", agenthold::cli::error_report(&e));
                ExitCode::FAILURE
            }
        },
        Command::Openapi { config } => match openapi(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agenthold: {}", agenthold::cli::error_report(&e));
                ExitCode::FAILURE
            }
        },
        Command::Config(ConfigCommand::Check { file }) => match config_check(&file) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agenthold: {}", agenthold::cli::error_report(&e));
                ExitCode::FAILURE
            }
        },
        Command::Bench(args) => match agenthold::bench::run(args).await {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                eprintln!("bench: {}", agenthold::cli::error_report(&e));
                ExitCode::FAILURE
            }
        },
        Command::Client(cmd) => match agenthold::cli::run(cli.client, cmd).await {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                eprintln!("error: {}", agenthold::cli::error_report(&e));
                ExitCode::FAILURE
            }
        },
    }
}

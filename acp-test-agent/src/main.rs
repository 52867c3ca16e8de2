// The crate's documentation is its README: the flags, the methods and the command language.
#![doc = include_str!("../README.md")]

mod agent;
mod client;
mod options;
mod outbox;
mod script;
mod sessions;
mod store;
mod turn;
mod wire;

use std::process::ExitCode;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::agent::Agent;
use crate::client::Client;
use crate::options::{Invocation, Options};
use crate::outbox::Outbox;
use crate::sessions::Sessions;

/// Logs one line to stderr: stdout carries the protocol and nothing else.
macro_rules! log {
    ($($arg:tt)*) => {
        eprintln!("acp-test-agent: {}", format_args!($($arg)*))
    };
}
pub(crate) use log;

fn main() -> ExitCode {
    let options = match options::parse(std::env::args_os().skip(1), std::env::var_os("HOME")) {
        Ok(Invocation::Run(options)) => options,
        Ok(Invocation::Help) => {
            print!("{}", options::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            log!("{error}\n{}", options::USAGE);
            return ExitCode::from(2);
        }
    };
    // One thread is plenty, and lets the agent's state live in plain `Rc<RefCell<_>>`s.
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            log!("no runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    tokio::task::LocalSet::new().block_on(&runtime, serve(options));
    ExitCode::SUCCESS
}

/// Reads the client's lines until stdin closes, then exits once everything queued is written.
async fn serve(options: Options) {
    let outbox = Outbox::start(tokio::io::stdout());
    let mut input = BufReader::new(tokio::io::stdin());
    let agent = Agent::new(
        options.restore,
        Sessions::new(&options.state_dir),
        Client::new(outbox.clone()),
    );
    // Bytes, not `String`: a line that is not UTF-8 gets a parse error, not the end of input.
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) if line.iter().all(u8::is_ascii_whitespace) => {}
            Ok(_) if options.never_initialize => {
                log!("--never-initialize: not answering {} bytes", line.len());
            }
            Ok(_) => agent.handle_line(&line).await,
            Err(error) => {
                log!("stdin: {error}");
                break;
            }
        }
    }
    log!("stdin closed; exiting");
    let exiting = outbox.exit(0).await;
    match exiting {}
}

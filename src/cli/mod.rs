//! The command-line client: `agenthold agents|exec|code|ps|logs|kill|wait|shell|cp|egress|ports|preview|previews|sessions|chat|approvals|approve`, speaking the HTTP API of docs/api.md.

mod agents;
mod approvals;
mod audit;
mod chat;
mod chat_view;
mod client;
mod code;
mod cp;
mod egress;
mod error;
mod exec;
mod exit_code;
mod lines;
mod login;
mod output;
mod preview_client;
mod previews;
mod process_client;
mod processes;
mod secrets;
mod session_client;
mod sessions;
mod shell;
mod sse;
mod teams;
mod types;
mod wait;

pub use crate::api::types::{
    CreateAgent, ExecBody, ExecExit, ExecResult, Health, OutputStream, UpdateAgent,
};
pub use agents::{ActionArgs, AgentsCommand, CreateArgs};
pub use approvals::{ApprovalsArgs, ApproveArgs};
pub use audit::AuditArgs;
pub use chat::ChatArgs;
pub use client::{ApiClient, Terminal};
pub use code::CodeArgs;
pub use cp::{CpArgs, Location};
pub use egress::EgressArgs;
pub use error::ClientError;
pub use exec::{exit_status, ExecArgs};
pub use login::{stored_token, LoginArgs};
pub use previews::{PortsArgs, PreviewArgs, PreviewRefused, PreviewsArgs};
pub use process_client::OutputEvent;
pub use processes::{process_status, KillArgs, LogsArgs, PsArgs, WaitArgs};
pub use secrets::SecretsCommand;
pub use session_client::SessionEvent;
pub use sessions::SessionsArgs;
pub use shell::ShellArgs;
pub use sse::{SseEvent, SseParser};
pub use teams::{AccessArgs, JoinArgs, MembersAction, MembersArgs, TokensCommand, UsersCommand};
pub use types::{decode_exec_line, AgentAction, ExecEvent, ServerEvent};

/// Options every client command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientOpts {
    /// Server URL
    #[arg(
        long,
        global = true,
        env = "AGENTHOLD_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: String,
    /// API token
    #[arg(long, global = true, env = "AGENTHOLD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON instead of tables
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum ClientCommand {
    /// Manage agents
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Run a command in an agent: agenthold exec AGENT -- CMD... (--detach: in the background)
    Exec(ExecArgs),
    /// Run Python in an agent's kernel, which keeps its variables between calls:
    /// agenthold code AGENT FILE|- (exit code 1 when the code raised)
    Code(CodeArgs),
    /// List an agent's background processes
    Ps(PsArgs),
    /// Print a background process's output: agenthold logs [-f] AGENT ID|TAG
    Logs(LogsArgs),
    /// Send a signal to a background process (TERM by default)
    Kill(KillArgs),
    /// Wait for a background process to end, and exit with its exit code
    Wait(WaitArgs),
    /// Open an interactive terminal in an agent
    Shell(ShellArgs),
    /// Copy files: agenthold cp LOCAL AGENT:PATH  |  agenthold cp AGENT:PATH LOCAL
    Cp(CpArgs),
    /// Show or change what an agent may reach: agenthold egress AGENT [--allow RULE] [--deny RULE] [--remove RULE]
    Egress(EgressArgs),
    /// List the TCP ports listening in an agent's sandbox: agenthold ports AGENT
    Ports(PortsArgs),
    /// Make a URL that opens a port of an agent: agenthold preview AGENT PORT [--public] [--open]
    ///
    /// Makes a preview, a URL on an origin of its own ({port}-{agent}.{domain}), and prints it.
    /// Run again for a port that has one, it prints that one's URL (unless its access differs,
    /// or it is a token preview, whose token is shown only when it is made). A token preview is
    /// --access token: --token is the API token, as for every command.
    Preview(PreviewArgs),
    /// List an agent's previews, or delete one: agenthold previews AGENT [--delete ID|PORT]
    Previews(PreviewsArgs),
    /// List the presets agents can be created from (agenthold agents create NAME --preset P)
    Presets,
    /// Show the warm pools: per preset with `warm`, its target and the entries ready and starting
    Pool,
    /// List an agent's sessions with its harnesses, or start one: agenthold sessions AGENT [--new]
    Sessions(SessionsArgs),
    /// Talk to an agent's harness: agenthold chat AGENT ["PROMPT"] (without PROMPT: a prompt a line)
    ///
    /// With PROMPT, one turn: the agent's message streams to stdout; thoughts, tool calls and
    /// notices go to stderr. Permission requests are asked on the terminal (answer with an
    /// option's id or name) or, with --no-approve, refused. Ctrl-C cancels the turn; a second
    /// Ctrl-C quits. Without PROMPT, each line of stdin is a prompt, until its end.
    ///
    /// Exit code (of the last turn): 0 end_turn, 3 error (the harness failed; a notice says
    /// why), 4 refusal, 5 max_tokens, 6 max_turn_requests, 130 cancelled (or a second Ctrl-C),
    /// 1 when the chat itself failed.
    Chat(ChatArgs),
    /// List the approvals waiting for an answer (--all: the answered ones too)
    Approvals(ApprovalsArgs),
    /// Answer an approval: agenthold approve ID OPTION (an option's id, or its name)
    Approve(ApproveArgs),
    /// Keep a token for this server: agenthold login NAME (the password on stdin) | agenthold
    /// login (the token on stdin, or --token); later commands use it without --token
    Login(LoginArgs),
    /// Manage users (admins): agenthold users [list|add NAME|remove USER]
    #[command(subcommand)]
    Users(UsersCommand),
    /// Manage API tokens: agenthold tokens create NAME --scope S… | list | revoke ID
    #[command(subcommand)]
    Tokens(TokensCommand),
    /// Manage secrets (admins): agenthold secrets set NAME --host H (the value on stdin) | list | rm NAME
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Read the audit log, newest first: agenthold audit [--agent A] [--user U] [--action X]
    /// [--since T] [--limit N]
    Audit(AuditArgs),
    /// Show or set who may use an agent: agenthold access AGENT [private|protected|public]
    /// [--new-token] (owners and admins change it; --new-token prints a protected agent's new
    /// access token)
    Access(AccessArgs),
    /// List an agent's members, or change them: agenthold members AGENT [add USER [--role
    /// operator] | remove USER]
    Members(MembersArgs),
    /// Join a protected agent with its access token: agenthold join AGENT_ID TOKEN
    Join(JoinArgs),
}

/// Runs one client command and returns the process exit code. Failures are reported on
/// stderr here (with a hint where one helps), so the caller only has to exit with the code.
pub async fn run(opts: ClientOpts, cmd: ClientCommand) -> anyhow::Result<i32> {
    let result = async {
        // Without --token or AGENTHOLD_TOKEN, the one `agenthold login` kept for this server.
        let token = opts.token.clone().or_else(|| stored_token(&opts.server));
        let client = ApiClient::new(&opts.server, token.as_deref())?;
        match cmd {
            ClientCommand::Login(args) => {
                login::run(&opts.server, opts.token.as_deref(), args).await
            }
            ClientCommand::Agents(cmd) => agents::run(&client, opts.json, cmd).await,
            ClientCommand::Exec(args) => exec::run(&client, args).await,
            ClientCommand::Code(args) => code::run(&client, args).await,
            ClientCommand::Ps(args) => processes::ps(&client, opts.json, args).await,
            ClientCommand::Logs(args) => processes::logs(&client, args).await,
            ClientCommand::Kill(args) => processes::kill(&client, args).await,
            ClientCommand::Wait(args) => processes::wait(&client, args).await,
            ClientCommand::Shell(args) => shell::run(&client, args).await,
            ClientCommand::Cp(args) => cp::run(&client, args).await,
            ClientCommand::Egress(args) => egress::run(&client, opts.json, args).await,
            ClientCommand::Ports(args) => previews::ports(&client, opts.json, args).await,
            ClientCommand::Preview(args) => previews::preview(&client, opts.json, args).await,
            ClientCommand::Previews(args) => previews::previews(&client, opts.json, args).await,
            ClientCommand::Sessions(args) => sessions::run(&client, opts.json, args).await,
            ClientCommand::Chat(args) => chat::run(&client, args).await,
            ClientCommand::Approvals(args) => approvals::list(&client, opts.json, args).await,
            ClientCommand::Approve(args) => approvals::approve(&client, opts.json, args).await,
            ClientCommand::Users(cmd) => teams::users(&client, opts.json, cmd).await,
            ClientCommand::Tokens(cmd) => teams::tokens(&client, opts.json, cmd).await,
            ClientCommand::Secrets(cmd) => secrets::run(&client, opts.json, cmd).await,
            ClientCommand::Audit(args) => audit::run(&client, opts.json, args).await,
            ClientCommand::Access(args) => teams::access(&client, opts.json, args).await,
            ClientCommand::Members(args) => teams::members(&client, opts.json, args).await,
            ClientCommand::Join(args) => teams::join(&client, opts.json, args).await,
            ClientCommand::Presets => {
                let presets = client.list_presets().await?;
                let text = if opts.json {
                    output::json(&presets)?
                } else {
                    output::presets_table(&presets)
                };
                output::print(&text);
                Ok(0)
            }
            ClientCommand::Pool => {
                let pools = client.pool().await?;
                let text = if opts.json {
                    output::json(&pools)?
                } else {
                    output::pool_table(&pools)
                };
                output::print(&text);
                Ok(0)
            }
        }
    }
    .await;
    match result {
        Ok(code) => Ok(code),
        Err(error) => {
            eprintln!("{}", error::Report { error: &error });
            Ok(1)
        }
    }
}

#[cfg(test)]
mod tests;

/// An error with its causes, each said once: many errors carry their cause's text in their own
/// message already, which `{:#}` would repeat ("…: Socket not found: X: Socket not found: X").
pub fn error_report(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod report_tests {
    #[derive(Debug, thiserror::Error)]
    #[error("cannot reach the engine at /s: {source}")]
    struct Outer {
        source: std::io::Error,
    }

    #[test]
    fn each_cause_is_said_once() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "Socket not found: /s");
        let e = anyhow::Error::new(Outer { source: inner }).context("starting the docker driver");
        assert_eq!(
            super::error_report(&e),
            "starting the docker driver: cannot reach the engine at /s: Socket not found: /s"
        );
        let plain = anyhow::anyhow!("a").context("b");
        assert_eq!(super::error_report(&plain), "b: a");
    }
}

//! `agenthold exec AGENT -- CMD…`: run one command, stream its output, exit with its code.

use std::collections::BTreeMap;
use std::io::IsTerminal;

use anyhow::Context;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::client::ApiClient;
use super::exit_code::{EXIT_BROKEN_PIPE, EXIT_TIMED_OUT};
use super::types::ExecEvent;
use crate::api::types::process::StartProcess;
use crate::api::types::{EgressDenied, ExecBody, ExecExit, OutputStream, RunUser};

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct ExecArgs {
    /// Agent id or name
    pub agent: String,
    /// Working directory in the agent (relative to /home/agent unless absolute)
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Set an environment variable for the command (repeatable)
    #[arg(long = "env", short = 'e', value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Kill the command after this many seconds (exit code 124)
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Never send our stdin, even when it is not a terminal
    #[arg(short = 'n', long)]
    pub no_stdin: bool,
    /// Run it as `root` (the agent needs allowRoot) or `agent` (the sandbox's account, the default)
    #[arg(long, short = 'u', value_name = "USER", value_parser = parse_user)]
    pub user: Option<RunUser>,
    /// Start it as a background process and print its id (see `ps`, `logs`, `kill`, `wait`)
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// With --detach: a tag to name the process by
    #[arg(long, requires = "detach")]
    pub tag: Option<String>,
    /// With --detach: the agent does not sleep while the process runs
    #[arg(long, requires = "detach")]
    pub keep_awake: bool,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V, got {s:?}")),
    }
}

/// `root` or `agent`, as the API takes them.
pub fn parse_user(s: &str) -> Result<RunUser, String> {
    match s {
        "root" => Ok(RunUser::Root),
        "agent" => Ok(RunUser::Agent),
        _ => Err(format!("expected root or agent, got {s:?}")),
    }
}

/// The process exit code for a finished command.
pub fn exit_status(exit: &ExecExit) -> i32 {
    if exit.timed_out {
        return EXIT_TIMED_OUT;
    }
    match exit.exit_code {
        c @ 0..=255 => c,
        // Some servers report death by signal N as -N; shells say 128+N.
        c if c < 0 => 128i32.saturating_add(c.saturating_neg()).min(255),
        // Truncating to 8 bits could turn a failure into 0.
        _ => 255,
    }
}

pub(super) async fn run(client: &ApiClient, args: ExecArgs) -> anyhow::Result<i32> {
    if args.detach {
        let req = StartProcess {
            command: args.command,
            cwd: args.cwd,
            env: (!args.env.is_empty()).then(|| args.env.into_iter().collect()),
            tag: args.tag,
            stdin: false,
            keep_awake: args.keep_awake,
            timeout_ms: args.timeout.map(|s| s.saturating_mul(1000)),
            user: args.user,
        };
        return super::processes::start_detached(client, &args.agent, req).await;
    }
    let agent = client.find_agent(&args.agent).await?;
    let stdin = if args.no_stdin || std::io::stdin().is_terminal() {
        None
    } else {
        read_stdin().await?
    };
    let req = ExecBody {
        command: args.command,
        cwd: args.cwd,
        env: (!args.env.is_empty()).then(|| args.env.into_iter().collect::<BTreeMap<_, _>>()),
        stdin,
        timeout_ms: args.timeout.map(|s| s.saturating_mul(1000)),
        user: args.user,
    };
    let mut events = client.exec_stream(&agent.id, &req).await?;
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    while let Some(ev) = events.next().await {
        match ev? {
            ExecEvent::Output { stream, data } => {
                let written = match stream {
                    OutputStream::Stdout => forward(&mut stdout, &data).await,
                    OutputStream::Stderr => forward(&mut stderr, &data).await,
                };
                match written {
                    Ok(()) => {}
                    // Dropping the stream closes the request, which kills the command.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        return Ok(EXIT_BROKEN_PIPE)
                    }
                    Err(e) => return Err(e).context("writing the command's output"),
                }
            }
            ExecEvent::Exit(exit) => {
                let _ = stdout.flush().await;
                let told = refused_lines(&exit.egress_denied);
                if !told.is_empty() {
                    let _ = stderr.write_all(told.as_bytes()).await;
                    let _ = stderr.flush().await;
                }
                return Ok(exit_status(&exit));
            }
        }
    }
    anyhow::bail!("the exec stream ended before the command's exit status arrived")
}

/// One line per destination the egress proxy refused while the command ran, said after its
/// output: a download that failed with a tool's own message may have failed for this.
pub fn refused_lines(denied: &[EgressDenied]) -> String {
    denied
        .iter()
        .map(|d| {
            let why = match &d.rule {
                Some(rule) => format!("the deny rule {rule}"),
                None => "no rule allows it".to_string(),
            };
            // The sandbox named it: no control characters reach the terminal.
            let host: String = d
                .host
                .chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect();
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            format!(
                "agenthold: the egress proxy refused {host}:{} ({why})\n",
                d.port
            )
        })
        .collect()
}

async fn forward(out: &mut (impl AsyncWrite + Unpin), data: &str) -> std::io::Result<()> {
    out.write_all(data.as_bytes()).await?;
    // Flushed per line so interleaving with stderr and progress stays as the command made it.
    out.flush().await
}

/// The API carries stdin as a JSON string, so it has to be text.
async fn read_stdin() -> anyhow::Result<Option<String>> {
    let mut buf = Vec::new();
    tokio::io::stdin()
        .read_to_end(&mut buf)
        .await
        .context("reading stdin")?;
    if buf.is_empty() {
        return Ok(None);
    }
    String::from_utf8(buf).map(Some).map_err(|_| {
        anyhow::anyhow!(
            "stdin is not UTF-8 text, which is all exec can pass on; use `cp` for binary data"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: i32, timed_out: bool) -> ExecExit {
        ExecExit {
            exit_code: code,
            timed_out,
            ..ExecExit::default()
        }
    }

    #[test]
    fn exit_codes_map_like_a_shell() {
        assert_eq!(exit_status(&exit(0, false)), 0);
        assert_eq!(exit_status(&exit(3, false)), 3);
        assert_eq!(exit_status(&exit(255, false)), 255);
        assert_eq!(exit_status(&exit(-9, false)), 137);
        assert_eq!(exit_status(&exit(i32::MIN, false)), 255);
        assert_eq!(exit_status(&exit(256, false)), 255);
        assert_eq!(exit_status(&exit(137, true)), EXIT_TIMED_OUT);
    }

    #[test]
    fn refused_destinations_are_told_one_line_each() {
        let denied = |host: &str, port, rule: Option<&str>| EgressDenied {
            host: host.into(),
            port,
            rule: rule.map(str::to_string),
        };
        assert_eq!(refused_lines(&[]), "");
        assert_eq!(
            refused_lines(&[
                denied("pypi.org", 443, None),
                denied("2001:db8::1", 80, Some("*")),
                denied("x\u{1b}[2J", 443, None),
            ]),
            "agenthold: the egress proxy refused pypi.org:443 (no rule allows it)\n\
             agenthold: the egress proxy refused [2001:db8::1]:80 (the deny rule *)\n\
             agenthold: the egress proxy refused x?[2J:443 (no rule allows it)\n"
        );
    }

    #[test]
    fn env_pairs() {
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_env("A="), Ok(("A".into(), String::new())));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("noequals").is_err());
    }
}

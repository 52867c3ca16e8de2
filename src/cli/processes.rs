//! `agenthold ps|logs|kill|wait` and `exec --detach`: an agent's background processes.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::client::ApiClient;
use super::error::ClientError;
use super::exec::refused_lines;
use super::exit_code::EXIT_TIMED_OUT;
use super::output::{plain_table, render};
use super::process_client::OutputEvent;
use crate::api::output_lines::line_bytes;
use crate::api::types::process::{OutputLine, Process, ProcessState, StartProcess};
use crate::api::types::OutputStream;

/// How often in a row `logs -f` tries again after its stream was cut before it gives up.
const MAX_RESUMES: u32 = 30;

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct PsArgs {
    /// Agent id or name
    pub agent: String,
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct LogsArgs {
    /// Agent id or name
    pub agent: String,
    /// Process id or tag
    pub process: String,
    /// Keep following the output until the process ends
    #[arg(short, long)]
    pub follow: bool,
    /// Start at this byte offset of the output (both streams counted together)
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct KillArgs {
    /// Agent id or name
    pub agent: String,
    /// Process id or tag
    pub process: String,
    /// The signal: a name (TERM, INT, KILL, HUP…) or a number
    #[arg(short, long, default_value = "TERM")]
    pub signal: String,
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct WaitArgs {
    /// Agent id or name
    pub agent: String,
    /// Process id or tag
    pub process: String,
    /// Give up after this many seconds (exit code 124); waits without end by default
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
}

/// The exit code that tells how a process ended, as a shell would: its own code, 128 + N for
/// signal N, 124 for a timeout; 255 for one lost with its sandbox.
pub fn process_status(p: &Process) -> i32 {
    if p.timed_out {
        return EXIT_TIMED_OUT;
    }
    match p.state {
        ProcessState::Exited => p.exit_code.map_or(255, |c| c.clamp(0, 255)),
        ProcessState::Killed => p
            .signal
            .as_deref()
            .and_then(agenthold_proto::process::parse_signal)
            .map_or(255, |n| 128 + n),
        ProcessState::Running | ProcessState::Lost => 255,
    }
}

pub(super) async fn start_detached(
    client: &ApiClient,
    agent: &str,
    req: StartProcess,
) -> anyhow::Result<i32> {
    let agent = client.find_agent(agent).await?;
    let p = client.start_process(&agent.id, &req).await?;
    println!("{}", p.id);
    Ok(0)
}

pub(super) async fn ps(client: &ApiClient, json: bool, args: PsArgs) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    let list = client.list_processes(&agent.id).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        print!("{}", processes_table(&list, Utc::now()));
    }
    Ok(0)
}

pub fn processes_table(list: &[Process], now: DateTime<Utc>) -> String {
    let mut table = plain_table();
    table.set_header(["ID", "TAG", "STATE", "EXIT", "TIME", "COMMAND"]);
    for p in list {
        let exit = match (p.exit_code, &p.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(s)) => format!("SIG{s}"),
            _ => "-".into(),
        };
        table.add_row([
            p.id.clone(),
            p.tag.clone().unwrap_or_else(|| "-".into()),
            p.state.as_str().to_string(),
            exit,
            duration(p, now),
            shown_command(&p.command),
        ]);
    }
    render(&table)
}

fn duration(p: &Process, now: DateTime<Utc>) -> String {
    let parse = |t: &str| DateTime::parse_from_rfc3339(t).ok().map(|t| t.to_utc());
    let Some(start) = parse(&p.started_at) else {
        return "-".into();
    };
    let end = p.ended_at.as_deref().and_then(parse).unwrap_or(now);
    let secs = (end - start).num_milliseconds().max(0) as f64 / 1000.0;
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        humantime::format_duration(Duration::from_secs(secs as u64)).to_string()
    }
}

fn shown_command(command: &[String]) -> String {
    let line = command.join(" ");
    match line.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}

pub(super) async fn logs(client: &ApiClient, args: LogsArgs) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    // A tag may name a newer process by the time a cut stream is resumed: follow the id.
    let pid = client.get_process(&agent.id, &args.process).await?.id;
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    let mut at = args.offset;
    // Failed tries in a row; any output read starts the count again.
    let mut failures = 0;
    loop {
        let mut cut = None;
        match client
            .process_output(&agent.id, &pid, at, args.follow)
            .await
        {
            Ok(mut lines) => {
                while let Some(ev) = lines.next().await {
                    match ev {
                        Ok(OutputEvent::Line(OutputLine::Exit { exit })) => {
                            stdout.flush().await.ok();
                            if !args.follow {
                                return Ok(0);
                            }
                            // Waited for its end: said after its output, as for an exec.
                            write_flushed(
                                &mut stderr,
                                refused_lines(&exit.egress_denied).as_bytes(),
                            )
                            .await
                            .ok();
                            return Ok(process_status(&exit));
                        }
                        Ok(OutputEvent::Line(OutputLine::Gap { gap })) => {
                            eprintln!(
                                "[agenthold: {} bytes of output left the buffer before they were read]",
                                gap.to - gap.from
                            );
                            at = gap.to;
                            failures = 0;
                        }
                        Ok(OutputEvent::Line(line)) => {
                            let Some((offset, stream, bytes)) = line_bytes(&line) else {
                                continue;
                            };
                            let out: &mut (dyn AsyncWrite + Unpin) = match stream {
                                OutputStream::Stdout => &mut stdout,
                                OutputStream::Stderr => &mut stderr,
                            };
                            match write_flushed(out, &bytes).await {
                                Ok(()) => {}
                                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                                    return Ok(0)
                                }
                                Err(e) => return Err(e).context("writing the output"),
                            }
                            at = offset + bytes.len() as u64;
                            failures = 0;
                        }
                        Ok(OutputEvent::Cut(why)) => cut = Some(why),
                        Err(e) => cut = Some(e.to_string()),
                    }
                }
                if cut.is_none() {
                    // The whole answer of a process still running, without --follow.
                    return Ok(0);
                }
            }
            // The agent is reconnecting or busy: worth another try when following.
            Err(
                e @ ClientError::Api {
                    status: 409 | 429 | 503,
                    ..
                },
            ) if args.follow => {
                cut = Some(e.to_string());
            }
            Err(e) => return Err(e.into()),
        }
        if !args.follow {
            anyhow::bail!(
                "the output stream broke off ({}); resume with --offset {at}",
                cut.unwrap_or_default()
            );
        }
        failures += 1;
        if failures > MAX_RESUMES {
            anyhow::bail!(
                "the output stream keeps breaking off ({}); resume with --offset {at}",
                cut.unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200 * u64::from(failures.min(10)))).await;
    }
}

async fn write_flushed(out: &mut (dyn AsyncWrite + Unpin), data: &[u8]) -> std::io::Result<()> {
    out.write_all(data).await?;
    out.flush().await
}

pub(super) async fn kill(client: &ApiClient, args: KillArgs) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    client
        .signal_process(&agent.id, &args.process, &args.signal)
        .await?;
    Ok(0)
}

pub(super) async fn wait(client: &ApiClient, args: WaitArgs) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    // One request waits at most this long; longer waits ask again.
    const ROUND_MS: u64 = 60_000;
    let deadline = args
        .timeout
        .map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
    loop {
        let left = deadline.map(|d| {
            d.saturating_duration_since(tokio::time::Instant::now())
                .as_millis() as u64
        });
        let round = left.map_or(ROUND_MS, |l| l.min(ROUND_MS));
        let (p, ended) = client.wait_process(&agent.id, &args.process, round).await?;
        if ended {
            if p.state == ProcessState::Lost {
                eprintln!("the process was lost: its sandbox stopped while it ran");
            }
            eprint!("{}", refused_lines(&p.egress_denied));
            return Ok(process_status(&p));
        }
        if left.is_some_and(|l| l <= round) {
            eprintln!(
                "the process is still running after {}s",
                args.timeout.unwrap_or(0)
            );
            return Ok(EXIT_TIMED_OUT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(state: ProcessState, exit: Option<i32>, signal: Option<&str>) -> Process {
        Process {
            id: "abcdefghijklmnop".into(),
            tag: None,
            command: vec!["sh".into(), "-c".into(), "x".repeat(100)],
            pid: Some(1),
            state,
            exit_code: exit,
            signal: signal.map(str::to_string),
            timed_out: false,
            started_at: "2026-01-01T00:00:00.000Z".into(),
            ended_at: Some("2026-01-01T00:00:02.500Z".into()),
            output_bytes: 0,
            output_start: 0,
            keep_awake: false,
            stdin_open: false,
            user: Default::default(),
            egress_denied: Vec::new(),
        }
    }

    #[test]
    fn exit_codes_say_how_a_process_ended() {
        assert_eq!(
            process_status(&process(ProcessState::Exited, Some(3), None)),
            3
        );
        assert_eq!(
            process_status(&process(ProcessState::Killed, None, Some("TERM"))),
            143
        );
        assert_eq!(
            process_status(&process(ProcessState::Lost, None, None)),
            255
        );
        let mut timed = process(ProcessState::Killed, None, Some("KILL"));
        timed.timed_out = true;
        assert_eq!(process_status(&timed), EXIT_TIMED_OUT);
    }

    #[test]
    fn the_table_shows_state_exit_time_and_a_cut_command() {
        let t = processes_table(
            &[process(ProcessState::Killed, None, Some("TERM"))],
            Utc::now(),
        );
        assert!(t.contains("killed"), "{t}");
        assert!(t.contains("SIGTERM"), "{t}");
        assert!(t.contains("2.5s"), "{t}");
        assert!(t.contains('…'), "{t}");
    }
}

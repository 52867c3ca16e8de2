//! Start → first output byte of a background process, against the streamed exec's first byte.

use std::time::Instant;

use anyhow::bail;
use futures::StreamExt;

use super::{delete_noted, start, start_noted};
use crate::api::output_lines::line_bytes;
use crate::api::types::process::OutputLine;
use crate::bench::cases::Ctx;
use crate::bench::stats::{ms, percentile, Row};
use crate::bench::target::Bound;
use crate::cli::{ApiClient, ExecBody, ExecEvent, OutputEvent};

const TARGET: &[Bound] = &[Bound::AtMost(5.0)];

/// Start → first output byte: POST the process, then follow its output from offset 0 until the
/// first data byte, timed from before the POST. The baseline is the same command's first byte
/// through the streamed exec (one request instead of two).
pub(super) async fn first_byte(
    cx: &Ctx<'_>,
    client: &ApiClient,
    id: &str,
    started: &mut Vec<String>,
) -> anyhow::Result<Row> {
    let n = cx.runs * 10;
    let req = start(&["echo", "x"]);
    let exec = ExecBody {
        command: req.command.clone(),
        ..Default::default()
    };
    let mut ours = Vec::with_capacity(n);
    let mut base = Vec::with_capacity(n);
    // Where the time goes: the POST (sandboxd starts the shim, which starts the command and
    // reports its pid), and the GET until the first byte.
    let mut posts = Vec::with_capacity(n);
    // One warm-up of each.
    for i in 0..=n {
        let t = Instant::now();
        let p = start_noted(client, id, &req, started).await?;
        let posted = ms(t.elapsed());
        let mut out = client.process_output(id, &p.id, 0, true).await?;
        loop {
            match out.next().await {
                Some(Ok(OutputEvent::Line(l))) => match l {
                    OutputLine::Exit { exit } => {
                        bail!("`echo x` ended without output: {:?}", exit.state)
                    }
                    l if line_bytes(&l).is_some_and(|(_, _, b)| !b.is_empty()) => break,
                    _ => {}
                },
                Some(Ok(OutputEvent::Cut(why))) => bail!("the output stream was cut: {why}"),
                Some(Err(e)) => return Err(e.into()),
                None => bail!("the output stream ended without output"),
            }
        }
        let took = ms(t.elapsed());
        drop(out);
        delete_noted(client, id, &p.id, started).await?;

        let t = Instant::now();
        let mut s = client.exec_stream(id, &exec).await?;
        loop {
            match s.next().await {
                Some(Ok(ExecEvent::Output { data, .. })) if !data.is_empty() => break,
                Some(Ok(ExecEvent::Exit(e))) => {
                    bail!("exec `echo x` ended without output ({})", e.exit_code)
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => bail!("the exec stream ended without output"),
            }
        }
        let exec_took = ms(t.elapsed());
        // The rest of the stream (its exit line), so the next exec starts on a quiet sandbox.
        while let Some(ev) = s.next().await {
            ev?;
        }
        if i > 0 {
            ours.push(took);
            posts.push(posted);
            base.push(exec_took);
        }
    }
    let p50 = |v: &[f64]| percentile(v, 0.5);
    crate::bench::progress(&format!(
        "processes: start → first byte, p50 {:.2} ms: the POST {:.2} ms, then the output's GET \
         until the first byte {:.2} ms; a streamed exec's first byte {:.2} ms",
        p50(&ours),
        p50(&posts),
        p50(&ours
            .iter()
            .zip(&posts)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>()),
        p50(&base)
    ));
    Ok(Row::times("process start → first output byte", &ours, Some(&base)).judged(TARGET))
}

//! `--case echo`: keystroke echo through the terminal, quiet and with another agent streaming
//! a file, against the floor: the same round trip through a pty on the host.

use std::time::Instant;

use anyhow::bail;
use futures::StreamExt;

use super::common::{first_shell_bytes, keys, read_until};
use super::Ctx;
use crate::bench::stats::{ms, Row};
use crate::bench::target::Bound;
use crate::cli::{ExecBody, Terminal};

/// The time the terminal may add to the floor's round trip.
const TARGET: &[Bound] = &[Bound::AddsAtP50(1.0), Bound::AddsAtP99(5.0)];

/// Round trips of one byte through a pty running `cat` in raw mode, on the host: the floor.
fn host_pty_floor(samples: usize) -> anyhow::Result<Vec<f64>> {
    use std::io::{Read, Write};
    let pty = nix::pty::openpty(None, None)?;
    let mut t = nix::sys::termios::tcgetattr(&pty.slave)?;
    nix::sys::termios::cfmakeraw(&mut t);
    nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &t)?;
    let slave = std::fs::File::from(pty.slave);
    let mut child = std::process::Command::new("cat")
        .stdin(slave.try_clone()?)
        .stdout(slave.try_clone()?)
        .stderr(std::process::Stdio::null())
        .spawn()?;
    drop(slave);
    let mut master = std::fs::File::from(pty.master);
    let mut out = Vec::with_capacity(samples);
    let mut buf = [0u8; 64];
    for _ in 0..samples {
        let t = Instant::now();
        master.write_all(b"x")?;
        let n = master.read(&mut buf)?;
        if n == 0 {
            bail!("cat ended");
        }
        out.push(ms(t.elapsed()));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(out)
}

async fn echo_samples(term: &mut Terminal, samples: usize) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        keys(term, b"x").await?;
        read_until(term, b"x").await?;
        out.push(ms(t.elapsed()));
    }
    Ok(out)
}

pub async fn keystroke_echo(cx: &mut Ctx<'_>, id: &str, other: &str) -> anyhow::Result<Vec<Row>> {
    let client = cx.client();
    let samples = if cx.quick { 200 } else { 2000 };
    let mut term = client.connect_terminal(id, 80, 24).await?;
    first_shell_bytes(&mut term).await?;
    keys(&mut term, b"stty raw -echo; echo cat-''ready; exec cat\r").await?;
    read_until(&mut term, b"cat-ready").await?;
    // cat is up once a probe byte comes back.
    keys(&mut term, b"p").await?;
    read_until(&mut term, b"p").await?;
    let ours = echo_samples(&mut term, samples).await?;
    let floor = tokio::task::spawn_blocking(move || host_pty_floor(samples)).await??;

    // Again while another agent streams a file out as fast as it can.
    let size_mb: usize = if cx.quick { 64 } else { 256 };
    client
        .exec(
            other,
            &ExecBody {
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    format!("head -c {}M /dev/urandom > /tmp/stream.bin", size_mb),
                ],
                ..Default::default()
            },
        )
        .await?;
    let streamer = {
        let client = client.clone();
        let other = other.to_string();
        tokio::spawn(async move {
            loop {
                let Ok(mut s) = client.fs_read(&other, "/tmp/stream.bin").await else {
                    return;
                };
                while let Some(Ok(_)) = s.next().await {}
            }
        })
    };
    let loaded = echo_samples(&mut term, samples).await;
    streamer.abort();
    let loaded = loaded?;

    let row = |case: &str, samples: &[f64]| {
        Row::times(case, samples, Some(&floor))
            .judged(TARGET)
            .noted("over the floor")
    };
    Ok(vec![
        row("keystroke echo", &ours),
        row("keystroke echo, other agent streaming", &loaded),
    ])
}

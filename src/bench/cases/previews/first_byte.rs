//! Request → first byte of the answer: `GET /` of the app, one request after another on one
//! kept-alive connection, through the preview listener from here, and on the sandbox's own
//! loopback from inside it (Python, run by exec). Both clients time the same thing the same way:
//! from the request's write to the first byte read back, then read the rest of the answer by
//! its `Content-Length` before the next.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::bench::stats::ms;
use crate::cli::{ApiClient, ExecBody};

/// Requests made and not counted first, on each side.
const WARM_UP: usize = 20;

/// The in-sandbox client: `python3 - N PORT` prints one time in ms a line.
const INSIDE: &str = r#"
import socket, sys, time
n, port, warm = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
req = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n"
out = []
for i in range(warm + n):
    t0 = time.perf_counter()
    s.sendall(req)
    got = s.recv(65536)
    t1 = time.perf_counter()
    if not got:
        sys.exit("the app closed the connection")
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(int(l.split(b":", 1)[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(65536)
    if i >= warm:
        out.append((t1 - t0) * 1000)
print("\n".join("%.4f" % x for x in out))
"#;

/// `samples` first-byte times (ms) through the preview at `listener` with `host`, and as many
/// inside the sandbox on `port`.
pub async fn through_and_inside(
    client: &ApiClient,
    id: &str,
    listener: SocketAddr,
    host: &str,
    port: u16,
    samples: usize,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let ours = through(listener, host, samples).await?;
    let r = client
        .exec(
            id,
            &ExecBody {
                command: vec![
                    "python3".into(),
                    "-".into(),
                    samples.to_string(),
                    port.to_string(),
                    WARM_UP.to_string(),
                ],
                stdin: Some(INSIDE.into()),
                timeout_ms: Some(600_000),
                ..Default::default()
            },
        )
        .await?;
    if r.exit_code != 0 {
        bail!("timing inside the sandbox failed: {}", r.stderr);
    }
    let inside = r
        .stdout
        .lines()
        .map(|l| l.trim().parse::<f64>())
        .collect::<Result<Vec<_>, _>>()
        .context("reading the times from inside the sandbox")?;
    if inside.len() != samples {
        bail!(
            "{} times from inside the sandbox, not {samples}",
            inside.len()
        );
    }
    Ok((ours, inside))
}

async fn through(listener: SocketAddr, host: &str, samples: usize) -> anyhow::Result<Vec<f64>> {
    let mut s = TcpStream::connect(listener)
        .await
        .context("connecting to the preview listener")?;
    s.set_nodelay(true)?;
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n");
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::with_capacity(samples);
    for i in 0..WARM_UP + samples {
        let t = Instant::now();
        s.write_all(req.as_bytes()).await?;
        let n = s.read(&mut buf).await?;
        let took = ms(t.elapsed());
        if n == 0 {
            bail!("the preview listener closed the connection");
        }
        let mut got = buf[..n].to_vec();
        read_rest(&mut s, &mut got, &mut buf).await?;
        if i >= WARM_UP {
            out.push(took);
        }
    }
    Ok(out)
}

/// Reads the rest of one answer (headers, then `Content-Length` bytes of body) into `got`.
async fn read_rest(s: &mut TcpStream, got: &mut Vec<u8>, buf: &mut [u8]) -> anyhow::Result<()> {
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(buf).await?;
        if n == 0 {
            bail!("the answer ended inside its headers");
        }
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..end]).to_string();
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "the preview answered {}",
            head.lines().next().unwrap_or_default()
        );
    }
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .context("an answer without Content-Length")?;
    let mut have = got.len() - end - 4;
    while have < length {
        let n = s.read(buf).await?;
        if n == 0 {
            bail!("the answer ended inside its body");
        }
        have += n;
    }
    Ok(())
}

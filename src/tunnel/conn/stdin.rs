//! Writing to a process's stdin: one `process.stdin` stream per write.

use agenthold_proto::{self as proto, ProcessStdin, Reply, Size};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use super::process::ProcessName;
use super::{ConnError, SandboxConn};

impl SandboxConn {
    /// Writes `bytes` to the process's stdin (started with a pipe to it), then closes it when
    /// `eof`; answers how many bytes the process took.
    pub async fn write_stdin<S, E>(
        &self,
        name: &ProcessName,
        mut bytes: S,
        eof: bool,
    ) -> Result<u64, ConnError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let header = ProcessStdin {
            process: name.as_str().to_string(),
            eof,
        };
        let (stream, _) = self.open(header).await?;
        let (mut from_sandbox, mut to_sandbox) = tokio::io::split(stream);
        let send = async {
            while let Some(chunk) = bytes.next().await {
                // Returning early drops the stream without a shutdown: nothing more is written.
                let chunk = chunk.map_err(|e| ConnError::StdinCut(std::io::Error::other(e)))?;
                to_sandbox
                    .write_all(&chunk)
                    .await
                    .map_err(|_| ConnError::Lost)?;
            }
            to_sandbox.shutdown().await.map_err(|_| ConnError::Lost)
        };
        // sandboxd answers once, after the last byte; an answer before that is a failure (the
        // process stopped reading) after which it reads no more.
        let answer = proto::read_message::<_, Reply>(&mut from_sandbox);
        tokio::pin!(answer);
        let reply = tokio::select! {
            biased;
            early = &mut answer => early,
            sent = send => {
                sent?;
                answer.await
            }
        };
        let ok = reply
            .map_err(|_| ConnError::Lost)?
            .into_result()
            .map_err(ConnError::Refused)?;
        let size: Size = serde_json::from_value(ok).map_err(|_| ConnError::Lost)?;
        Ok(size.size)
    }
}

//! Writing to a process's stdin: one write at a time, given up when the caller goes away or the
//! process ends.

use std::time::Duration;

use agenthold_proto::{ChannelError, ErrorCode, DATA_CHUNK};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::ChildStdin;

use super::Process;

/// How often a stdin write the process does not take checks whether its caller went away.
const STDIN_CHECK: Duration = Duration::from_millis(500);

impl Process {
    /// Writes `data` to the process's stdin, then closes it when `eof`. One write at a time: a
    /// second is refused at once rather than queued behind one the process does not read.
    /// `gone` says the caller went away; a write the process does not take is given up then,
    /// or when the process ends.
    pub async fn write_stdin<R: AsyncRead + Unpin>(
        &self,
        data: &mut R,
        eof: bool,
        gone: impl Fn() -> bool,
    ) -> Result<u64, ChannelError> {
        let Ok(mut stdin) = self.stdin.try_lock() else {
            return Err(ChannelError::new(
                ErrorCode::Busy,
                "another write to this process's stdin is under way (the process may not be \
                 reading it); try again once it is done",
            ));
        };
        self.write_locked(&mut stdin, data, eof, gone).await
    }

    /// As [`Process::write_stdin`], but a write under way is waited for rather than refused:
    /// the writes of an attached caller, which come in order on one stream.
    pub async fn write_stdin_queued<R: AsyncRead + Unpin>(
        &self,
        data: &mut R,
        eof: bool,
        gone: impl Fn() -> bool,
    ) -> Result<u64, ChannelError> {
        let mut stdin = self.stdin.lock().await;
        self.write_locked(&mut stdin, data, eof, gone).await
    }

    /// Writes with the stdin lock held.
    async fn write_locked<R: AsyncRead + Unpin>(
        &self,
        stdin: &mut Option<ChildStdin>,
        data: &mut R,
        eof: bool,
        gone: impl Fn() -> bool,
    ) -> Result<u64, ChannelError> {
        use tokio::io::AsyncWriteExt;
        let ended = || ChannelError::new(ErrorCode::Invalid, "the process has ended");
        let Some(pipe) = stdin.as_mut() else {
            let why = if self.lock().info.state.is_running() {
                "the process's stdin is not open: start it with \"stdin\": true (and it was not \
                 closed with eof)"
            } else {
                "the process has ended"
            };
            return Err(ChannelError::new(ErrorCode::Invalid, why));
        };
        let mut buf = vec![0u8; DATA_CHUNK];
        let mut written = 0u64;
        loop {
            let n = tokio::select! {
                r = data.read(&mut buf) => r.map_err(|e| ChannelError::from_io(&e, "reading the input"))?,
                _ = self.ended.cancelled() => {
                    *stdin = None;
                    return Err(ended());
                }
            };
            if n == 0 {
                break;
            }
            let write = pipe.write_all(&buf[..n]);
            tokio::pin!(write);
            let mut check = tokio::time::interval(STDIN_CHECK);
            let outcome = loop {
                tokio::select! {
                    r = &mut write => break r,
                    _ = self.ended.cancelled() => {
                        *stdin = None;
                        return Err(ended());
                    }
                    _ = check.tick() => if gone() {
                        return Err(ChannelError::new(ErrorCode::Invalid, "the caller went away"));
                    }
                }
            };
            if let Err(e) = outcome {
                *stdin = None;
                self.lock().info.stdin_open = false;
                return Err(ChannelError::new(
                    ErrorCode::Invalid,
                    format!("the process no longer reads its stdin ({e})"),
                ));
            }
            written += n as u64;
        }
        if eof {
            *stdin = None;
            self.lock().info.stdin_open = false;
            self.persist();
        }
        Ok(written)
    }
}

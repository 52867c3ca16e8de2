//! One run of code in a started kernel: an `execute_request` on shell, then the kernel's iopub
//! messages for it turned into [`CodeEvent`]s until it is idle again and has replied.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use agenthold_proto::code::{KERNEL_DIED, KERNEL_OUT_OF_MEMORY, TIMEOUT};
use agenthold_proto::{CodeDone, CodeError, CodeEvent, MAX_CODE_OUTPUT};
use jupyter_protocol::{
    ExecuteRequest, ExecutionState, JupyterMessage, JupyterMessageContent, Stdio,
};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::sync::mpsc;

use super::launch::Started;
use super::oom;

/// How long an interrupted run may take to end before its kernel is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// Where the events of a run go; a closed one (the caller left) interrupts the run.
pub type EventTx = mpsc::Sender<CodeEvent>;

/// How a run ended, for the context to act on.
pub enum Outcome {
    Finished {
        execution_count: Option<u64>,
    },
    /// The kernel is gone: the context starts a new one on its next run.
    KernelGone,
}

/// Keeps a run's output within [`MAX_CODE_OUTPUT`].
struct Budget {
    left: usize,
    truncated: bool,
    /// Whether an error past the budget was told already: one is, whatever the budget, so a run
    /// that failed says why; more are dropped.
    told_error: bool,
}

impl Budget {
    /// The event as far as the budget allows, or nothing.
    fn admit(&mut self, event: CodeEvent) -> Option<CodeEvent> {
        let len = event.output_len();
        if len <= self.left {
            self.left -= len;
            return Some(event);
        }
        self.truncated = true;
        let cut = |s: String, left: &mut usize| {
            let mut end = (*left).min(s.len());
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            *left -= end;
            s[..end].to_string()
        };
        match event {
            CodeEvent::Stdout(s) if self.left > 0 => {
                Some(CodeEvent::Stdout(cut(s, &mut self.left)))
            }
            CodeEvent::Stderr(s) if self.left > 0 => {
                Some(CodeEvent::Stderr(cut(s, &mut self.left)))
            }
            // One error is always told, cut to what is left of the budget or its first lines.
            CodeEvent::Error(e) if !self.told_error => {
                self.told_error = true;
                let mut room = 4096usize.max(self.left);
                let error = CodeError {
                    name: cut(e.name, &mut 256usize.min(room)),
                    traceback: cut(e.traceback, &mut room),
                    value: cut(e.value, &mut room),
                };
                self.left = self
                    .left
                    .saturating_sub(error.traceback.len() + error.value.len());
                Some(CodeEvent::Error(error))
            }
            _ => None,
        }
    }
}

fn event_of(content: JupyterMessageContent) -> Option<CodeEvent> {
    let bundle = |data: &jupyter_protocol::Media| match serde_json::to_value(data) {
        Ok(serde_json::Value::Object(m)) => Some(CodeEvent::Result(m)),
        _ => None,
    };
    match content {
        JupyterMessageContent::StreamContent(s) => Some(match s.name {
            Stdio::Stdout => CodeEvent::Stdout(s.text),
            Stdio::Stderr => CodeEvent::Stderr(s.text),
        }),
        JupyterMessageContent::ExecuteResult(r) => bundle(&r.data),
        JupyterMessageContent::DisplayData(d) => bundle(&d.data),
        JupyterMessageContent::ErrorOutput(e) => Some(CodeEvent::Error(CodeError {
            name: e.ename,
            value: e.evalue,
            traceback: e.traceback.join("\n"),
        })),
        _ => None,
    }
}

fn is_ours(m: &JupyterMessage, msg_id: &str) -> bool {
    m.parent_header.as_ref().is_some_and(|p| p.msg_id == msg_id)
}

/// The error a run reports when its kernel died under it.
fn death(status: Option<std::process::ExitStatus>, oom_before: Option<u64>) -> CodeError {
    let signal = status.and_then(|s| s.signal());
    let oom = match (oom_before, oom::kills()) {
        (Some(before), Some(now)) => now > before,
        // Without the cgroup's count a SIGKILL nobody here sent is most likely the OOM killer.
        _ => signal == Some(Signal::SIGKILL as i32),
    };
    if oom && signal == Some(Signal::SIGKILL as i32) {
        return CodeError {
            name: KERNEL_OUT_OF_MEMORY.into(),
            value: "the kernel was killed for using more memory than the sandbox has (its \
                    variables are gone; the next run starts a new kernel)"
                .into(),
            traceback: String::new(),
        };
    }
    let how = match (signal, status.and_then(|s| s.code())) {
        (Some(sig), _) => format!("was killed by signal {sig}"),
        (None, Some(code)) => format!("exited with code {code}"),
        _ => "ended".into(),
    };
    CodeError {
        name: KERNEL_DIED.into(),
        value: format!(
            "the kernel {how} (its variables are gone; the next run starts a new kernel)"
        ),
        traceback: String::new(),
    }
}

/// Runs `code` and sends its events, the last one `done`.
pub async fn execute(
    k: &mut Started,
    code: String,
    timeout: Option<Duration>,
    tx: &EventTx,
) -> Outcome {
    let mut budget = Budget {
        left: MAX_CODE_OUTPUT,
        truncated: false,
        told_error: false,
    };
    let oom_before = oom::kills();
    let request = JupyterMessage::new(
        ExecuteRequest {
            code,
            silent: false,
            store_history: true,
            user_expressions: None,
            allow_stdin: false,
            // Runs are sent one at a time: there is no queue to abort after an error, and
            // ipykernel's aborting would swallow the next run if it came within its window.
            stop_on_error: false,
        },
        None,
    );
    let msg_id = request.header.msg_id.clone();
    // Leftovers of an earlier run that was cut short are not this run's.
    while k.iopub_rx.try_recv().is_ok() {}
    while k.shell_rx.try_recv().is_ok() {}
    let exited = k.exited.clone();
    if k.shell_tx.send(request).await.is_err() {
        let status = *exited.borrow();
        let _ = tx.send(CodeEvent::Error(death(status, oom_before))).await;
        let _ = tx.send(CodeEvent::Done(CodeDone::default())).await;
        return Outcome::KernelGone;
    }
    let (mut idle, mut replied) = (false, false);
    let mut execution_count = None;
    let far = Duration::from_secs(u64::from(u32::MAX));
    let deadline = tokio::time::sleep(timeout.unwrap_or(far));
    tokio::pin!(deadline);
    let mut interrupted = false;
    let mut caller_gone = false;
    let died = exit_status(k.exited.clone());
    tokio::pin!(died);
    while !(idle && replied) {
        tokio::select! {
            m = k.iopub_rx.recv() => {
                let Some(m) = m else { break };
                if !is_ours(&m, &msg_id) {
                    continue;
                }
                match m.content {
                    JupyterMessageContent::Status(s) if s.execution_state == ExecutionState::Idle => {
                        idle = true;
                    }
                    JupyterMessageContent::ExecuteInput(i) => {
                        execution_count = Some(i.execution_count.value() as u64);
                    }
                    content => {
                        if let Some(event) = event_of(content).and_then(|e| budget.admit(e)) {
                            if !caller_gone && tx.send(event).await.is_err() {
                                // Nobody reads the output: stop the code rather than let it
                                // hold the context.
                                caller_gone = true;
                                interrupt(k.pgid);
                            }
                        }
                    }
                }
            }
            m = k.shell_rx.recv() => {
                let Some(m) = m else { break };
                if is_ours(&m, &msg_id) {
                    if let JupyterMessageContent::ExecuteReply(r) = m.content {
                        replied = true;
                        execution_count = Some(r.execution_count.value() as u64);
                    }
                }
            }
            status = &mut died => {
                let _ = tx.send(CodeEvent::Error(death(status, oom_before))).await;
                let _ = tx.send(CodeEvent::Done(CodeDone { execution_count: None, truncated: budget.truncated })).await;
                return Outcome::KernelGone;
            }
            _ = &mut deadline => {
                if interrupted {
                    // The code ignored the interrupt: the kernel goes.
                    let _ = killpg(Pid::from_raw(k.pgid), Signal::SIGKILL);
                    let _ = exit_status(k.exited.clone()).await;
                    let _ = tx.send(CodeEvent::Error(timeout_error(timeout, true))).await;
                    let _ = tx.send(CodeEvent::Done(CodeDone { execution_count, truncated: budget.truncated })).await;
                    return Outcome::KernelGone;
                }
                interrupted = true;
                interrupt(k.pgid);
                deadline.as_mut().reset(tokio::time::Instant::now() + INTERRUPT_GRACE);
            }
            _ = tx.closed(), if !caller_gone => {
                caller_gone = true;
                interrupt(k.pgid);
            }
        }
    }
    if interrupted {
        // The kernel reported a KeyboardInterrupt; the caller asked for a time limit.
        let _ = tx
            .send(CodeEvent::Error(timeout_error(timeout, false)))
            .await;
    }
    let done = CodeDone {
        execution_count,
        truncated: budget.truncated,
    };
    let _ = tx.send(CodeEvent::Done(done)).await;
    Outcome::Finished { execution_count }
}

async fn exit_status(
    mut exited: tokio::sync::watch::Receiver<Option<std::process::ExitStatus>>,
) -> Option<std::process::ExitStatus> {
    exited.wait_for(|s| s.is_some()).await.ok().and_then(|s| *s)
}

fn timeout_error(timeout: Option<Duration>, killed: bool) -> CodeError {
    let ms = timeout.map_or(0, |t| t.as_millis());
    CodeError {
        name: TIMEOUT.into(),
        value: if killed {
            format!("the code ran past its {ms} ms and ignored the interrupt: the kernel was killed (its variables are gone)")
        } else {
            format!("the code ran past its {ms} ms and was interrupted")
        },
        traceback: String::new(),
    }
}

/// What Jupyter's own interrupt does for a kernel whose `interrupt_mode` is `signal`.
fn interrupt(pgid: i32) {
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGINT);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_cuts_text_at_a_character_and_drops_results_past_it() {
        let mut b = Budget {
            left: 5,
            truncated: false,
            told_error: false,
        };
        assert_eq!(
            b.admit(CodeEvent::Stdout("abcdé".into())),
            Some(CodeEvent::Stdout("abcd".into()))
        );
        assert!(b.truncated);
        let mut m = serde_json::Map::new();
        m.insert("text/plain".into(), "1".into());
        assert_eq!(b.admit(CodeEvent::Result(m)), None);
        // The error still comes through.
        let e = CodeEvent::Error(CodeError {
            name: "E".into(),
            value: "v".into(),
            traceback: "t".into(),
        });
        assert_eq!(b.admit(e.clone()), Some(e.clone()));
        // Once: hostile code raising error after error past the budget sends no more.
        assert_eq!(b.admit(e), None);
        let mut b = Budget {
            left: 0,
            truncated: false,
            told_error: false,
        };
        let Some(CodeEvent::Error(told)) = b.admit(CodeEvent::Error(CodeError {
            name: "N".repeat(100_000),
            value: "v".repeat(100_000),
            traceback: "t".repeat(100_000),
        })) else {
            panic!("the first error is told");
        };
        assert!(told.name.len() <= 256 && told.value.len() + told.traceback.len() <= 4096);
    }
}

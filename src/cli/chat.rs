//! `agenthold chat AGENT [--session ID] [PROMPT]`: talk to the harness of one of an agent's
//! sessions. With PROMPT, one turn; without, a prompt per line of stdin until its end.
//!
//! A turn: the session's stream of events is followed from its last event before the prompt
//! (its `lastSeq`, so nothing of the turn is missed), the prompt is posted, and the stream is shown (see
//! `chat_view.rs`) until the turn's `turn` `ended` event. Permission requests are asked on the
//! terminal (an answer is an option's id or name, read from stdin) or, with `--no-approve`,
//! refused at once. Ctrl-C cancels the turn (once); a second Ctrl-C quits.
//!
//! The exit code tells how the (last) turn ended: see `exit_code.rs`.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, IsTerminal, Read};
use std::time::Duration;

use anyhow::Context;
use futures::stream::{BoxStream, StreamExt};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::mpsc;

use super::approvals::{pick_option, refusal};
use super::chat_view::View;
use super::client::ApiClient;
use super::error::ClientError;
use super::exit_code::{stop_status, EXIT_BROKEN_PIPE, EXIT_INTERRUPTED};
use super::session_client::SessionEvent;
use crate::api::types::conversation::{
    Approval, CreateSession, Notice, PermissionResolved, PromptBody, Session, SessionEventKind,
    TurnEvent, TurnState,
};
use crate::api::types::Agent;

/// How often in a row the event stream may break off before the turn is given up on.
const MAX_RESUMES: u32 = 30;

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ChatArgs {
    /// Agent id or name
    pub agent: String,
    /// The session to talk in (default: the agent's newest one, or a new one if it has none)
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Refuse every permission the harness asks for, at once (with its reject_once option, else
    /// its reject_always one)
    #[arg(long)]
    pub no_approve: bool,
    /// The prompt (words are joined with spaces; `-` reads it from stdin). Without one, each
    /// line of stdin is a prompt, until its end
    #[arg(value_name = "PROMPT")]
    pub prompt: Vec<String>,
}

pub(super) async fn run(client: &ApiClient, args: ChatArgs) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    let session = pick_session(client, &agent, args.session.as_deref()).await?;
    let one_prompt = match args.prompt.as_slice() {
        [] => None,
        [dash] if dash == "-" => Some(read_all_stdin()?),
        words => Some(words.join(" ")),
    };
    // From here on Ctrl-C is ours: it cancels a turn, or ends the chat between turns (a Ctrl-C
    // while the prompt is posted cancels the turn as soon as it runs).
    let interrupts = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut chat = Chat {
        client,
        agent,
        session,
        no_approve: args.no_approve,
        interactive: one_prompt.is_none(),
        stdin_tty: std::io::stdin().is_terminal(),
        input: None,
        interrupts,
        view: View::stdio(),
        events: Follower::default(),
    };
    match one_prompt {
        Some(text) => {
            if text.trim().is_empty() {
                anyhow::bail!("the prompt is empty");
            }
            Ok(chat.turn(text).await?.code())
        }
        None => chat.interactive().await,
    }
}

/// The session named, else the agent's newest, else a new one (said on stderr).
async fn pick_session(
    client: &ApiClient,
    agent: &Agent,
    wanted: Option<&str>,
) -> anyhow::Result<Session> {
    if let Some(sid) = wanted {
        return client
            .get_session(&agent.id, sid)
            .await
            .map_err(|e| match e {
                ClientError::Api { status: 404, .. } => {
                    anyhow::anyhow!(
                        "agent {} has no session {sid:?} (`agenthold sessions {}` lists them)",
                        agent.name,
                        agent.name
                    )
                }
                e => e.into(),
            });
    }
    let sessions = client.list_sessions(&agent.id).await?;
    if let Some(newest) = newest(sessions) {
        return Ok(newest);
    }
    let session = client
        .create_session(&agent.id, &CreateSession::default())
        .await?;
    eprintln!(
        "{} had no session: started a new one, {} (harness {})",
        agent.name, session.id, session.harness
    );
    Ok(session)
}

/// The most recently created session; of equal times, the one listed last (the list is oldest
/// first).
fn newest(sessions: Vec<Session>) -> Option<Session> {
    let created = |s: &Session| chrono::DateTime::parse_from_rfc3339(&s.created_at).ok();
    sessions
        .into_iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| created(a).cmp(&created(b)).then(i.cmp(j)))
        .map(|(_, s)| s)
}

fn read_all_stdin() -> anyhow::Result<String> {
    let mut buf = Vec::new();
    std::io::stdin()
        .read_to_end(&mut buf)
        .context("reading the prompt from stdin")?;
    String::from_utf8(buf).map_err(|_| anyhow::anyhow!("the prompt on stdin is not UTF-8 text"))
}

/// How a turn ended for this command.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TurnEnd {
    /// The server's `turn` `ended` event, with its stop reason.
    Stopped(String),
    /// A second Ctrl-C: the person wants out, the turn's end is not awaited.
    Quit,
    /// Nobody reads our stdout any more.
    BrokenPipe,
}

impl TurnEnd {
    fn code(&self) -> i32 {
        match self {
            TurnEnd::Stopped(reason) => stop_status(reason),
            TurnEnd::Quit => EXIT_INTERRUPTED,
            TurnEnd::BrokenPipe => EXIT_BROKEN_PIPE,
        }
    }
}

struct Chat<'a> {
    client: &'a ApiClient,
    agent: Agent,
    session: Session,
    no_approve: bool,
    /// Lines of stdin are prompts (and answers while a question is open), not only answers.
    interactive: bool,
    stdin_tty: bool,
    /// Started when first needed: a one-turn chat that asks nothing leaves stdin alone.
    input: Option<Input>,
    interrupts: Signal,
    view: View,
    events: Follower,
}

impl Chat<'_> {
    async fn interactive(&mut self) -> anyhow::Result<i32> {
        eprintln!(
            "session {} ({}, harness {}) of {}: a prompt per line; end with Ctrl-D",
            self.session.id, self.session.title, self.session.harness, self.agent.name
        );
        let mut code = 0;
        loop {
            if self.stdin_tty {
                if let Err(e) = self.view.ask("> ") {
                    return io_exit(e);
                }
            }
            let input = self.input.get_or_insert_with(Input::start);
            let line = tokio::select! {
                line = input.next_prompt() => line,
                _ = self.interrupts.recv() => return Ok(EXIT_INTERRUPTED),
            };
            self.view.answered(self.stdin_tty);
            let Some(line) = line else {
                return Ok(code);
            };
            if line.trim().is_empty() {
                continue;
            }
            match self.turn(line).await {
                Ok(TurnEnd::Quit) => return Ok(EXIT_INTERRUPTED),
                Ok(TurnEnd::BrokenPipe) => return Ok(EXIT_BROKEN_PIPE),
                Ok(end) => code = end.code(),
                // A turn someone else started: say so, and let the person try again.
                Err(e) if is_conflict(&e) => {
                    eprintln!("{}", super::error::Report { error: &e });
                    code = 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs one turn to its end.
    async fn turn(&mut self, text: String) -> anyhow::Result<TurnEnd> {
        let (agent, sid) = (self.agent.id.clone(), self.session.id.clone());
        if self.events.seen.is_none() {
            // Only what comes after the session as it was when this command found it.
            self.events.seen = Some(self.session.last_seq);
        }
        // Subscribed before the prompt is posted: nothing the turn does can come before it.
        self.events.connect(self.client, &agent, &sid).await?;
        let body = PromptBody {
            prompt: None,
            text: Some(text),
        };
        let turn = match self.client.prompt(&agent, &sid, &body).await {
            Ok(accepted) => accepted.turn,
            Err(e @ ClientError::Api { status: 409, .. }) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "a turn already runs in session {sid}; wait for it to end, or cancel it"
                )))
            }
            Err(e) => return Err(e.into()),
        };
        match self.follow_turn(turn).await {
            Ok(end) => Ok(end),
            Err(TurnError::Io(e)) => Ok(io_exit(e).map(|_| TurnEnd::BrokenPipe)?),
            Err(TurnError::Other(e)) => Err(e),
        }
    }

    async fn follow_turn(&mut self, turn: u64) -> Result<TurnEnd, TurnError> {
        let (agent, sid) = (self.agent.id.clone(), self.session.id.clone());
        let mut started = false;
        let mut cancel_sent = false;
        // Questions waiting for a person, in the order asked; the first is the one on screen.
        let mut questions: VecDeque<Approval> = VecDeque::new();
        // Every permission of this turn, for what its resolution says.
        let mut asked: HashMap<String, Approval> = HashMap::new();
        loop {
            let can_answer =
                !questions.is_empty() && self.input.as_ref().is_some_and(|i| !i.closed);
            let step = tokio::select! {
                ev = self.events.next(self.client, &agent, &sid) => Step::Event(ev?),
                _ = self.interrupts.recv() => Step::Interrupt,
                line = next_answer(&mut self.input), if can_answer => Step::Answer(line),
            };
            match step {
                Step::Interrupt => {
                    if cancel_sent {
                        return Ok(TurnEnd::Quit);
                    }
                    cancel_sent = true;
                    self.view
                        .line("[turn] cancelling… (Ctrl-C again to quit without waiting)")?;
                    match self.client.cancel_turn(&agent, &sid).await {
                        // The turn ended meanwhile: its `turn` event is on its way.
                        Ok(()) | Err(ClientError::Api { status: 409, .. }) => {}
                        Err(e) => self.view.line(&format!("[turn] cancelling failed: {e}"))?,
                    }
                }
                Step::Answer(None) => {
                    if let Some(front) = questions.front() {
                        let hint = answer_elsewhere_hint(front);
                        self.view
                            .line(&format!("[permission] stdin is closed: {hint}"))?;
                    }
                }
                Step::Answer(Some(line)) => {
                    self.view.answered(self.stdin_tty);
                    let Some(front) = questions.front() else {
                        continue;
                    };
                    let line = line.trim();
                    if line.is_empty() {
                        self.view.ask("answer with an option's id or name: ")?;
                        continue;
                    }
                    let option_id = match pick_option(&front.options, line) {
                        Ok(o) => o.option_id.clone(),
                        Err(why) => {
                            self.view.line(&format!("[permission] {why}"))?;
                            self.view.ask("answer with an option's id or name: ")?;
                            continue;
                        }
                    };
                    // The `permission_resolved` event that follows says how it went; the
                    // next line of stdin is not for this question any more.
                    match self.client.answer_approval(&front.id, &option_id).await {
                        Ok(_) | Err(ClientError::Api { status: 409, .. }) => {
                            questions.pop_front();
                            if let Some(next) = questions.front().cloned() {
                                self.ask(&next)?;
                            }
                        }
                        Err(e) => {
                            self.view
                                .line(&format!("[permission] answering failed: {e}"))?;
                            self.view.ask("answer with an option's id or name: ")?;
                        }
                    }
                }
                Step::Event(ev) => {
                    let Some(kind) = ev.kind else {
                        continue; // an event this client does not know
                    };
                    match kind {
                        SessionEventKind::Prompt => {
                            if ev.data.get("turn").and_then(|t| t.as_u64()) == Some(turn) {
                                started = true;
                            }
                        }
                        SessionEventKind::Turn => {
                            let t: TurnEvent = serde_json::from_value(ev.data).map_err(|e| {
                                TurnError::Other(anyhow::anyhow!(
                                    "unexpected answer from the server: a turn event: {e}"
                                ))
                            })?;
                            if t.turn != turn {
                                continue;
                            }
                            match t.state {
                                TurnState::Started => started = true,
                                TurnState::Ended => {
                                    let reason = t.stop_reason.unwrap_or_else(|| "error".into());
                                    self.view.turn_ended(&reason)?;
                                    return Ok(TurnEnd::Stopped(reason));
                                }
                            }
                        }
                        SessionEventKind::Update if started => self.view.update(&ev.data)?,
                        SessionEventKind::Update => {}
                        SessionEventKind::Notice => {
                            match serde_json::from_value::<Notice>(ev.data.clone()) {
                                Ok(n) => self.view.notice(&n)?,
                                // A notice kind newer than this client: its text still helps.
                                Err(_) => {
                                    let text = ev.data.get("text").and_then(|t| t.as_str());
                                    self.view.line(&format!(
                                        "[notice] {}",
                                        text.map_or_else(|| ev.data.to_string(), str::to_string)
                                    ))?
                                }
                            }
                        }
                        SessionEventKind::Permission if started => {
                            let a: Approval = serde_json::from_value(ev.data).map_err(|e| {
                                TurnError::Other(anyhow::anyhow!(
                                    "unexpected answer from the server: a permission event: {e}"
                                ))
                            })?;
                            asked.insert(a.id.clone(), a.clone());
                            self.on_permission(a, &mut questions).await?;
                        }
                        SessionEventKind::Permission => {}
                        SessionEventKind::PermissionResolved => {
                            let Ok(r) = serde_json::from_value::<PermissionResolved>(ev.data)
                            else {
                                continue;
                            };
                            if !asked.contains_key(&r.id) {
                                continue; // not this turn's
                            }
                            let was_front = questions.front().is_some_and(|q| q.id == r.id);
                            questions.retain(|q| q.id != r.id);
                            self.view.resolved(&r, asked.get(&r.id))?;
                            if was_front {
                                if let Some(next) = questions.front().cloned() {
                                    self.ask(&next)?;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// A permission request of the running turn: refused at once with `--no-approve`, else
    /// asked (after the ones asked before it).
    async fn on_permission(
        &mut self,
        approval: Approval,
        questions: &mut VecDeque<Approval>,
    ) -> Result<(), TurnError> {
        if self.no_approve {
            let title = self.view.permission_title(&approval);
            match refusal(&approval.options) {
                Some(option) => {
                    self.view.line(&format!(
                        "[permission] refusing to {title} (--no-approve): {} ({})",
                        option.option_id, option.name
                    ))?;
                    match self
                        .client
                        .answer_approval(&approval.id, &option.option_id)
                        .await
                    {
                        Ok(_) | Err(ClientError::Api { status: 409, .. }) => {}
                        Err(e) => self
                            .view
                            .line(&format!("[permission] refusing failed: {e}"))?,
                    }
                }
                None => self.view.line(&format!(
                    "[permission] {title}: no option refuses it, so it is left to expire ({})",
                    answer_elsewhere_hint(&approval)
                ))?,
            }
            return Ok(());
        }
        if self.interactive && self.stdin_tty {
            // Lines typed before the question was on screen were meant as prompts.
            if let Some(input) = self.input.as_mut() {
                input.hold_typed_ahead();
            }
        }
        questions.push_back(approval);
        if questions.len() == 1 {
            if let Some(front) = questions.front().cloned() {
                self.ask(&front)?;
            }
        }
        Ok(())
    }

    /// Shows a question and, while stdin is open, asks for the answer.
    fn ask(&mut self, approval: &Approval) -> Result<(), TurnError> {
        self.view.question(approval)?;
        let input = self.input.get_or_insert_with(Input::start);
        if input.closed {
            self.view.line(&format!(
                "[permission] stdin is closed: {}",
                answer_elsewhere_hint(approval)
            ))?;
        } else {
            self.view.ask("answer with an option's id or name: ")?;
        }
        Ok(())
    }
}

fn answer_elsewhere_hint(approval: &Approval) -> String {
    let mut hint = format!(
        "answer with `agenthold approve {} OPTION` or in the web UI",
        approval.id
    );
    if !approval.expires_at.is_empty() {
        hint.push_str(&format!(
            "; unanswered, it expires at {}",
            approval.expires_at
        ));
    }
    hint
}

fn is_conflict(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ClientError>()
        .is_some_and(|e| e.status() == Some(409))
}

/// A write to stdout or stderr failed: a closed pipe ends the chat quietly, anything else is an
/// error.
fn io_exit(e: std::io::Error) -> anyhow::Result<i32> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(EXIT_BROKEN_PIPE)
    } else {
        Err(anyhow::Error::new(e).context("writing to the terminal"))
    }
}

enum Step {
    Event(SessionEvent),
    Interrupt,
    /// A line of stdin, or its end.
    Answer(Option<String>),
}

enum TurnError {
    Io(std::io::Error),
    Other(anyhow::Error),
}

impl From<std::io::Error> for TurnError {
    fn from(e: std::io::Error) -> Self {
        TurnError::Io(e)
    }
}

impl From<ClientError> for TurnError {
    fn from(e: ClientError) -> Self {
        TurnError::Other(e.into())
    }
}

impl From<anyhow::Error> for TurnError {
    fn from(e: anyhow::Error) -> Self {
        TurnError::Other(e)
    }
}

async fn next_answer(input: &mut Option<Input>) -> Option<String> {
    match input {
        Some(input) => input.next_answer().await,
        None => std::future::pending().await,
    }
}

/// Lines of stdin, read by a thread of their own (a blocked read must not hold up the
/// runtime, nor its shutdown).
struct Input {
    rx: mpsc::Receiver<String>,
    /// stdin has ended.
    closed: bool,
    /// Prompts typed ahead, before a question took the terminal.
    held: VecDeque<String>,
}

impl Input {
    fn start() -> Input {
        let (tx, rx) = mpsc::channel(64);
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            let mut stdin = stdin.lock();
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match stdin.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.trim_end_matches(['\n', '\r']).to_string();
                        if tx.blocking_send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Input {
            rx,
            closed: false,
            held: VecDeque::new(),
        }
    }

    async fn next_prompt(&mut self) -> Option<String> {
        if let Some(line) = self.held.pop_front() {
            return Some(line);
        }
        self.next_answer().await
    }

    async fn next_answer(&mut self) -> Option<String> {
        if self.closed {
            return None;
        }
        let line = self.rx.recv().await;
        self.closed = line.is_none();
        line
    }

    fn hold_typed_ahead(&mut self) {
        while let Ok(line) = self.rx.try_recv() {
            self.held.push_back(line);
        }
    }
}

/// The session's event stream, resumed after the last event seen whenever it breaks off.
#[derive(Default)]
struct Follower {
    /// The sequence number of the last event seen (or, before the first, the last one there
    /// was before this command's first prompt).
    seen: Option<u64>,
    stream: Option<BoxStream<'static, Result<SessionEvent, ClientError>>>,
    /// Breaks in a row; an event starts the count again.
    failures: u32,
}

impl Follower {
    async fn connect(
        &mut self,
        client: &ApiClient,
        agent: &str,
        sid: &str,
    ) -> Result<(), ClientError> {
        if self.stream.is_none() {
            let after = self.seen.unwrap_or(0);
            self.stream = Some(client.session_events(agent, sid, after).await?);
        }
        Ok(())
    }

    /// The next event. Cancel-safe: dropped while it waits, it loses nothing.
    async fn next(
        &mut self,
        client: &ApiClient,
        agent: &str,
        sid: &str,
    ) -> Result<SessionEvent, ClientError> {
        loop {
            if self.stream.is_none() {
                if self.failures > 0 {
                    let wait = Duration::from_millis(200 * u64::from(self.failures.min(10)));
                    tokio::time::sleep(wait).await;
                }
                match self.connect(client, agent, sid).await {
                    Ok(()) => {}
                    // Worth another try: the server restarting, a proxy, a busy moment.
                    Err(
                        e @ (ClientError::Connect { .. }
                        | ClientError::Transport(_)
                        | ClientError::Api {
                            status: 429 | 502 | 503 | 504,
                            ..
                        }),
                    ) => {
                        self.broke(e)?;
                        continue;
                    }
                    // The session is gone (deleted meanwhile), the token no longer works…
                    Err(e) => return Err(e),
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                continue;
            };
            match stream.next().await {
                Some(Ok(ev)) => {
                    // Only what is new: a resumed stream never repeats, but be sure.
                    if self.seen.is_some_and(|s| ev.seq <= s) {
                        continue;
                    }
                    self.seen = Some(ev.seq);
                    self.failures = 0;
                    return Ok(ev);
                }
                Some(Err(e)) => {
                    self.stream = None;
                    self.broke(e)?;
                }
                None => {
                    self.stream = None;
                    self.broke(ClientError::Transport(
                        "the server ended the event stream".into(),
                    ))?;
                }
            }
        }
    }

    fn broke(&mut self, e: ClientError) -> Result<(), ClientError> {
        self.failures += 1;
        if self.failures > MAX_RESUMES {
            return Err(ClientError::Transport(format!(
                "the session's event stream keeps breaking off: {e}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::conversation::SessionState;

    fn session(id: &str, created: &str) -> Session {
        Session {
            id: id.into(),
            agent_id: "a".into(),
            harness: "h".into(),
            title: "t".into(),
            cwd: "/home/agent".into(),
            state: SessionState::Idle,
            acp_session_id: None,
            restore: None,
            process_id: None,
            created_at: created.into(),
            updated_at: created.into(),
            turns: 0,
            last_seq: 0,
        }
    }

    #[test]
    fn the_newest_session_is_the_last_created() {
        let id = |s: Option<Session>| s.map(|s| s.id);
        assert_eq!(id(newest(vec![])), None);
        assert_eq!(
            id(newest(vec![
                session("old", "2026-12-06T10:00:00Z"),
                session("new", "2026-12-06T11:00:00.5Z"),
                session("mid", "2026-12-06T10:30:00+00:00"),
            ])),
            Some("new".into())
        );
        // Equal times: the one listed last.
        assert_eq!(
            id(newest(vec![
                session("a", "2026-12-06T10:00:00Z"),
                session("b", "2026-12-06T10:00:00Z"),
            ])),
            Some("b".into())
        );
    }

    #[test]
    fn turn_ends_map_to_exit_codes() {
        assert_eq!(TurnEnd::Stopped("end_turn".into()).code(), 0);
        assert_eq!(
            TurnEnd::Stopped("cancelled".into()).code(),
            EXIT_INTERRUPTED
        );
        assert_ne!(TurnEnd::Stopped("error".into()).code(), 0);
        assert_eq!(TurnEnd::Quit.code(), EXIT_INTERRUPTED);
        assert_eq!(TurnEnd::BrokenPipe.code(), EXIT_BROKEN_PIPE);
    }
}

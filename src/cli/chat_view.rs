//! How `agenthold chat` shows a conversation: the agent's message text on stdout as it streams,
//! everything else on stderr (thoughts dimmed on a terminal, else prefixed `[thought]`; a status
//! line per tool call; plans, notices, permission questions and their outcomes).
//!
//! ACP's `session/update` objects come as the server stored them (`update` events, verbatim),
//! so they are read leniently here: a kind this client does not know, or a field missing, is
//! skipped, never an error.

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::Value;

use crate::api::types::conversation::{
    Approval, ApprovalOption, ApprovalOutcome, Notice, NoticeKind, PermissionResolved,
};

const DIM: &str = "\x1b[2m";
const UNDIM: &str = "\x1b[22m";
/// Up one line, to its start, and clear it: a tool call's status line is redrawn in place.
const REDRAW_LAST_LINE: &str = "\x1b[1A\r\x1b[2K";

/// A tool call as the updates told it so far.
#[derive(Debug, Clone, Default)]
struct Tool {
    title: String,
    status: String,
    /// The first line of a finished call's text content.
    outcome: Option<String>,
}

pub struct View {
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
    out_tty: bool,
    err_tty: bool,
    /// stdout's last line is unfinished.
    out_open: bool,
    /// stderr's last line is unfinished: a thought, or a question waiting for its answer.
    err_open: bool,
    /// The unfinished stderr line is a thought (more of it continues the line).
    in_thought: bool,
    tools: HashMap<String, Tool>,
    /// The tool call whose status line is the last thing written (a terminal redraws it).
    last_tool: Option<String>,
}

impl View {
    /// The process's own stdout and stderr.
    pub fn stdio() -> View {
        use std::io::IsTerminal;
        View::new(
            Box::new(io::stdout()),
            Box::new(io::stderr()),
            io::stdout().is_terminal(),
            io::stderr().is_terminal(),
        )
    }

    pub fn new(
        out: Box<dyn Write + Send>,
        err: Box<dyn Write + Send>,
        out_tty: bool,
        err_tty: bool,
    ) -> View {
        View {
            out,
            err,
            out_tty,
            err_tty,
            out_open: false,
            err_open: false,
            in_thought: false,
            tools: HashMap::new(),
            last_tool: None,
        }
    }

    /// One `update` event: ACP's `session/update` `update` object.
    pub fn update(&mut self, update: &Value) -> io::Result<()> {
        let kind = update.get("sessionUpdate").and_then(Value::as_str);
        match kind {
            Some("agent_message_chunk") => {
                let text = block_text(update.get("content").unwrap_or(&Value::Null));
                self.message(&text)
            }
            Some("agent_thought_chunk") => {
                let text = block_text(update.get("content").unwrap_or(&Value::Null));
                self.thought(&text)
            }
            Some("tool_call") => {
                let id = str_field(update, "toolCallId").unwrap_or_default();
                let tool = Tool {
                    title: str_field(update, "title").unwrap_or_else(|| "a tool call".into()),
                    status: str_field(update, "status").unwrap_or_else(|| "pending".into()),
                    outcome: None,
                };
                self.tools.insert(id.clone(), tool);
                self.tool_line(&id)
            }
            Some("tool_call_update") => {
                let id = str_field(update, "toolCallId").unwrap_or_default();
                let tool = self.tools.entry(id.clone()).or_insert_with(|| Tool {
                    title: id.clone(),
                    ..Tool::default()
                });
                if let Some(title) = str_field(update, "title") {
                    tool.title = title;
                }
                match str_field(update, "status") {
                    Some(status) if status != tool.status => {
                        tool.status = status;
                        // A finished call's first text says what came of it.
                        tool.outcome = match tool.status.as_str() {
                            "completed" | "failed" => first_text(update.get("content")),
                            _ => None,
                        };
                        self.tool_line(&id)
                    }
                    // Content or title only: the line says what matters, the status.
                    _ => Ok(()),
                }
            }
            Some("plan") => {
                let entries = update
                    .get("entries")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let mut text = String::from("[plan]");
                for e in entries {
                    let mark = match e.get("status").and_then(Value::as_str) {
                        Some("completed") => "[x]",
                        Some("in_progress") => "[~]",
                        _ => "[ ]",
                    };
                    let content = e.get("content").and_then(Value::as_str).unwrap_or("");
                    text.push_str(&format!("\n  {mark} {content}"));
                }
                self.line(&text)
            }
            // The user's own words (a harness replaying history), the commands and modes it
            // offers, and kinds this client does not know: nothing to show in a terminal.
            _ => Ok(()),
        }
    }

    /// The agent's message text, on stdout as it comes.
    pub fn message(&mut self, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.end_err_line()?;
        let shown = if self.out_tty {
            safe_for_terminal(text)
        } else {
            text.to_string()
        };
        self.out.write_all(shown.as_bytes())?;
        self.out.flush()?;
        self.out_open = !text.ends_with('\n');
        self.last_tool = None;
        Ok(())
    }

    /// A thought: dimmed on a terminal, else each line prefixed `[thought] `.
    pub fn thought(&mut self, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if !self.in_thought {
            self.end_err_line()?;
            self.end_out_line_on_terminal()?;
        }
        let mut shown = String::new();
        if self.err_tty {
            shown.push_str(DIM);
            shown.push_str(&safe_for_terminal(text));
            shown.push_str(UNDIM);
        } else {
            let mut at_start = !self.err_open;
            for piece in text.split_inclusive('\n') {
                if at_start {
                    shown.push_str("[thought] ");
                }
                shown.push_str(piece);
                at_start = piece.ends_with('\n');
            }
        }
        self.err.write_all(shown.as_bytes())?;
        self.err.flush()?;
        self.err_open = !text.ends_with('\n');
        self.in_thought = self.err_open;
        self.last_tool = None;
        Ok(())
    }

    /// A whole line (or lines) on stderr, after whatever was unfinished.
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        self.end_err_line()?;
        self.end_out_line_on_terminal()?;
        self.write_err_line(text)?;
        self.last_tool = None;
        Ok(())
    }

    pub fn notice(&mut self, notice: &Notice) -> io::Result<()> {
        let kind = serde_json::to_value(notice.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let text = match notice.kind {
            // "Starting the sandbox…" says it all.
            NoticeKind::Waking => format!("[notice] {}", notice.text),
            _ => format!("[notice: {kind}] {}", notice.text),
        };
        self.line(&text)
    }

    /// A permission question and its options, by id and name.
    pub fn question(&mut self, approval: &Approval) -> io::Result<()> {
        let mut text = format!(
            "[permission] the agent asks to: {}",
            self.permission_title(approval)
        );
        let width = approval
            .options
            .iter()
            .map(|o| o.option_id.chars().count())
            .max()
            .unwrap_or(0);
        for o in &approval.options {
            text.push_str(&format!(
                "\n  {:width$}  {} ({})",
                o.option_id, o.name, o.kind
            ));
        }
        self.line(&text)
    }

    /// The prompt for an answer, left open on stderr for the answer typed after it.
    pub fn ask(&mut self, text: &str) -> io::Result<()> {
        self.end_err_line()?;
        self.end_out_line_on_terminal()?;
        self.err.write_all(self.shown_err(text).as_bytes())?;
        self.err.flush()?;
        self.err_open = true;
        self.in_thought = false;
        self.last_tool = None;
        Ok(())
    }

    /// A line was read from stdin: on a terminal its echo ended the line the question left open.
    pub fn answered(&mut self, stdin_tty: bool) {
        if stdin_tty && !self.in_thought {
            self.err_open = false;
        }
    }

    pub fn resolved(&mut self, r: &PermissionResolved, asked: Option<&Approval>) -> io::Result<()> {
        let title = asked.map_or_else(|| r.id.clone(), |a| self.permission_title(a));
        let option = |id: &str| {
            let name = asked
                .and_then(|a| a.options.iter().find(|o| o.option_id == id))
                .map(|o: &ApprovalOption| format!(" ({})", o.name))
                .unwrap_or_default();
            format!("{id}{name}")
        };
        let how = match (r.outcome, r.option_id.as_deref()) {
            (ApprovalOutcome::Selected, Some(id)) => format!("answered {}", option(id)),
            (ApprovalOutcome::Expired, Some(id)) => {
                format!("nobody answered in time: {} was chosen", option(id))
            }
            (ApprovalOutcome::Expired, None) => "nobody answered in time: cancelled".into(),
            (ApprovalOutcome::Cancelled, _) => "cancelled".into(),
            (ApprovalOutcome::Selected, None) => "answered".into(),
        };
        self.line(&format!("[permission] {title}: {how}, by {}", r.by))
    }

    /// What a permission is for: its tool call's title, else the one its updates gave.
    pub fn permission_title(&self, approval: &Approval) -> String {
        tool_call_title(&approval.tool_call).unwrap_or_else(|| {
            let id = str_field(&approval.tool_call, "toolCallId").unwrap_or_default();
            self.tools
                .get(&id)
                .map(|t| t.title.clone())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| {
                    if id.is_empty() {
                        "use a tool".into()
                    } else {
                        id
                    }
                })
        })
    }

    /// The turn is over: unfinished lines are ended (stdout's too, so a shell's prompt starts
    /// on a line of its own), and a turn that did not end normally says how it ended.
    pub fn turn_ended(&mut self, stop_reason: &str) -> io::Result<()> {
        if self.out_open {
            self.out.write_all(b"\n")?;
            self.out.flush()?;
            self.out_open = false;
        }
        if stop_reason != "end_turn" {
            self.line(&format!("[turn] ended: {stop_reason}"))?;
        } else {
            self.end_err_line()?;
        }
        self.tools.clear();
        self.last_tool = None;
        Ok(())
    }

    fn tool_line(&mut self, id: &str) -> io::Result<()> {
        let Some(tool) = self.tools.get(id) else {
            return Ok(());
        };
        let mut text = format!("[tool] {}: {}", tool.title, tool.status);
        if let Some(outcome) = &tool.outcome {
            text.push_str(" (");
            text.push_str(outcome);
            text.push(')');
        }
        self.end_err_line()?;
        self.end_out_line_on_terminal()?;
        if self.err_tty && self.last_tool.as_deref() == Some(id) {
            self.err.write_all(REDRAW_LAST_LINE.as_bytes())?;
        }
        self.write_err_line(&text)?;
        self.last_tool = Some(id.to_string());
        Ok(())
    }

    fn write_err_line(&mut self, text: &str) -> io::Result<()> {
        let mut shown = self.shown_err(text);
        shown.push('\n');
        self.err.write_all(shown.as_bytes())?;
        self.err.flush()?;
        self.err_open = false;
        self.in_thought = false;
        Ok(())
    }

    fn shown_err(&self, text: &str) -> String {
        if self.err_tty {
            safe_for_terminal(text)
        } else {
            text.to_string()
        }
    }

    fn end_err_line(&mut self) -> io::Result<()> {
        if self.err_open {
            self.err.write_all(b"\n")?;
            self.err.flush()?;
            self.err_open = false;
            self.in_thought = false;
        }
        Ok(())
    }

    /// When both go to a terminal (likely the same one), a status line must not land in the
    /// middle of the agent's sentence. Into a file or pipe, stdout gets nothing but the text.
    fn end_out_line_on_terminal(&mut self) -> io::Result<()> {
        if self.out_open && self.out_tty && self.err_tty {
            self.out.write_all(b"\n")?;
            self.out.flush()?;
            self.out_open = false;
        }
        Ok(())
    }
}

/// The text of an ACP content block; blocks that are not text are named in brackets.
pub fn block_text(block: &Value) -> String {
    let field = |k: &str| block.get(k).and_then(Value::as_str);
    match field("type") {
        Some("text") => field("text").unwrap_or_default().to_string(),
        Some("resource_link") => format!(
            "[{}: {}]",
            field("name").unwrap_or("link"),
            field("uri").unwrap_or_default()
        ),
        Some("resource") => {
            let res = block.get("resource").unwrap_or(&Value::Null);
            match res.get("text").and_then(Value::as_str) {
                Some(text) => text.to_string(),
                None => format!(
                    "[resource: {}]",
                    res.get("uri").and_then(Value::as_str).unwrap_or_default()
                ),
            }
        }
        Some(other) => format!("[{other}]"),
        None => String::new(),
    }
}

/// Longest outcome shown on a tool call's status line.
const OUTCOME_CHARS: usize = 100;

/// The first line of the first text in a tool call's `content` (ACP `ToolCallContent`s:
/// `{"type": "content", "content": ContentBlock}`, diffs, terminals), cut to a status line's
/// length.
fn first_text(content: Option<&Value>) -> Option<String> {
    let text = content?.as_array()?.iter().find_map(|c| {
        let block = c.get("content")?;
        (block.get("type")?.as_str()? == "text").then(|| block_text(block))
    })?;
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut cut: String = line.chars().take(OUTCOME_CHARS).collect();
    if line.chars().count() > OUTCOME_CHARS {
        cut.push('\u{2026}');
    }
    Some(cut)
}

/// The `title` of an ACP tool call (or tool call update), when it has one.
pub fn tool_call_title(tool_call: &Value) -> Option<String> {
    str_field(tool_call, "title").filter(|t| !t.is_empty())
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Text from a harness, made harmless for a terminal: control characters other than newline
/// and tab (escape sequences could move the cursor, retitle the window or worse) are shown as
/// `^X` (or `\u{…}` for C1 controls) instead of being obeyed.
pub fn safe_for_terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => {}
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            '\u{7f}' => out.push_str("^?"),
            c if ('\u{80}'..='\u{9f}').contains(&c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().map_err(|_| io::ErrorKind::Other)?.extend(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Buf {
        fn text(&self) -> String {
            let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    fn view(tty: bool) -> (View, Buf, Buf) {
        let (out, err) = (Buf::default(), Buf::default());
        let v = View::new(Box::new(out.clone()), Box::new(err.clone()), tty, tty);
        (v, out, err)
    }

    fn chunk(kind: &str, text: &str) -> Value {
        json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
    }

    fn ok(r: io::Result<()>) {
        if let Err(e) = r {
            panic!("{e}");
        }
    }

    #[test]
    fn messages_go_to_stdout_and_the_rest_to_stderr() {
        let (mut v, out, err) = view(false);
        ok(v.update(&chunk("agent_message_chunk", "Hel")));
        ok(v.update(&chunk("agent_thought_chunk", "pondering\nmore")));
        ok(v.update(&chunk("agent_message_chunk", "lo")));
        ok(v.update(&json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit a.txt", "status": "pending"})));
        ok(v.update(
            &json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "content": []}),
        ));
        ok(v.update(&json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
            "content": [{"type": "diff", "path": "/a", "newText": "x"},
                        {"type": "content", "content": {"type": "text", "text": "\n wrote 3 lines \nmore"}}]})));
        ok(v.update(&json!({"sessionUpdate": "plan", "entries": [
            {"content": "a", "status": "completed", "priority": "high"},
            {"content": "b", "status": "pending", "priority": "low"}]})));
        ok(v.update(
            &json!({"sessionUpdate": "available_commands_update", "availableCommands": []}),
        ));
        ok(v.update(&json!({"sessionUpdate": "from_the_future", "x": 1})));
        ok(v.update(&json!("not even an object")));
        ok(v.turn_ended("end_turn"));
        // Off a terminal stdout carries the text only, ended by a newline.
        assert_eq!(out.text(), "Hello\n");
        assert_eq!(
            err.text(),
            "[thought] pondering\n[thought] more\n[tool] Edit a.txt: pending\n\
             [tool] Edit a.txt: completed (wrote 3 lines)\n[plan]\n  [x] a\n  [ ] b\n"
        );
    }

    #[test]
    fn on_a_terminal_thoughts_are_dimmed_tool_lines_redrawn_and_escapes_defused() {
        let (mut v, out, err) = view(true);
        ok(v.update(&chunk("agent_message_chunk", "a\x1b]0;pwned\x07b")));
        ok(v.update(&chunk("agent_thought_chunk", "hmm")));
        ok(v.update(&json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Run", "status": "pending"})));
        ok(v.update(&json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "in_progress"})));
        ok(v.update(
            &json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "failed"}),
        ));
        ok(v.turn_ended("cancelled"));
        assert_eq!(out.text(), "a^[]0;pwned^Gb\n");
        assert_eq!(
            err.text(),
            format!(
                "{DIM}hmm{UNDIM}\n[tool] Run: pending\n{REDRAW_LAST_LINE}[tool] Run: in_progress\n\
                 {REDRAW_LAST_LINE}[tool] Run: failed\n[turn] ended: cancelled\n"
            )
        );
    }

    fn approval() -> Approval {
        let option = |id: &str, name: &str, kind: &str| ApprovalOption {
            option_id: id.into(),
            name: name.into(),
            kind: kind.into(),
        };
        Approval {
            id: "ap1".into(),
            agent_id: "ag".into(),
            session_id: Some("s".into()),
            kind: crate::api::types::conversation::ApprovalKind::Permission,
            command: None,
            requester: None,
            tool_call: json!({"toolCallId": "t9"}),
            options: vec![
                option("b7", "Reject always", "reject_always"),
                option("a2", "Allow once", "allow_once"),
            ],
            state: crate::api::types::conversation::ApprovalState::Pending,
            created_at: String::new(),
            expires_at: String::new(),
            outcome: None,
            option_id: None,
            decided_by: None,
        }
    }

    #[test]
    fn questions_list_the_options_and_outcomes_name_them() {
        let (mut v, _, err) = view(false);
        ok(v.update(
            &json!({"sessionUpdate": "tool_call", "toolCallId": "t9", "title": "Delete /tmp/x"}),
        ));
        let a = approval();
        ok(v.question(&a));
        ok(v.ask("answer: "));
        v.answered(false);
        let r = PermissionResolved {
            id: "ap1".into(),
            outcome: ApprovalOutcome::Selected,
            option_id: Some("a2".into()),
            by: "admin".into(),
        };
        ok(v.resolved(&r, Some(&a)));
        let expired = PermissionResolved {
            outcome: ApprovalOutcome::Expired,
            option_id: None,
            by: "timeout".into(),
            ..r
        };
        ok(v.resolved(&expired, None));
        assert_eq!(
            err.text(),
            "[tool] Delete /tmp/x: pending\n\
             [permission] the agent asks to: Delete /tmp/x\n  b7  Reject always (reject_always)\n  a2  Allow once (allow_once)\n\
             answer: \n\
             [permission] Delete /tmp/x: answered a2 (Allow once), by admin\n\
             [permission] ap1: nobody answered in time: cancelled, by timeout\n"
        );
    }

    #[test]
    fn content_blocks_that_are_not_text_are_named() {
        assert_eq!(block_text(&json!({"type": "text", "text": "hi"})), "hi");
        assert_eq!(
            block_text(&json!({"type": "image", "data": "…"})),
            "[image]"
        );
        assert_eq!(
            block_text(&json!({"type": "resource_link", "name": "a.rs", "uri": "file:///a.rs"})),
            "[a.rs: file:///a.rs]"
        );
        assert_eq!(
            block_text(&json!({"type": "resource", "resource": {"uri": "x", "text": "body"}})),
            "body"
        );
        assert_eq!(block_text(&json!(null)), "");
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(safe_for_terminal("a\tb\nc\r\n"), "a\tb\nc\n");
        assert_eq!(safe_for_terminal("\x1b[2J\u{9b}x\x7f"), "^[[2J\\u{9b}x^?");
        assert_eq!(
            safe_for_terminal("caf\u{e9} \u{1F600}"),
            "caf\u{e9} \u{1F600}"
        );
    }
}

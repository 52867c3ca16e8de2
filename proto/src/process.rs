//! Background processes: the headers of the `process.*` channels and what they answer.
//!
//! sandboxd owns the processes (like terminal sessions): it keeps each one's output by absolute
//! byte offset, counted over both streams in the order it read them, so a reader that comes back
//! after any drop asks for exactly what it has not seen. A process is named by its id (made by
//! sandboxd, [`crate::is_session_id`] shaped) or by the tag it was started with.

use serde::{Deserialize, Serialize};

use crate::exec::ExecRequest;
use crate::session_id::is_session_id;

/// Longest tag, in bytes.
pub const MAX_TAG_LEN: usize = 64;
/// Most bytes of a process's command line that its [`ProcessInfo`] repeats: what a list shows,
/// so a 1 MiB script is not echoed back in every answer. Each argument counts one byte more,
/// as `execve` counts its NUL, so that a line of empty arguments is bounded too.
pub const MAX_SHOWN_COMMAND: usize = 8 * 1024;
/// Longest signal name a [`ProcessInfo`] may carry.
const MAX_SIGNAL_NAME: usize = 16;
/// Bounds on the output a server may ask each process to keep, in bytes.
pub const MIN_OUTPUT: u64 = 64 * 1024;
pub const MAX_OUTPUT: u64 = 1 << 30;

/// What ends an argument cut to fit [`MAX_SHOWN_COMMAND`].
pub const CUT_MARK: &str = "…";

/// Why a tag is refused, or `None` for a good one: 1 to [`MAX_TAG_LEN`] of ASCII letters,
/// digits, `.`, `_` and `-`, starting with a letter or digit.
pub fn tag_problem(tag: &str) -> Option<String> {
    if tag.is_empty() || tag.len() > MAX_TAG_LEN {
        return Some(format!("a tag is 1 to {MAX_TAG_LEN} characters"));
    }
    let first_ok = tag
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric());
    let all_ok = tag
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !first_ok || !all_ok {
        return Some(format!(
            "tag {:?} may hold only letters, digits, '.', '_' and '-', and starts with a letter \
             or digit",
            tag.chars().take(MAX_TAG_LEN).collect::<String>()
        ));
    }
    None
}

/// The command line as a [`ProcessInfo`] shows it: whole up to [`MAX_SHOWN_COMMAND`] bytes,
/// then cut (the argument that crosses the limit ends in [`CUT_MARK`], later ones are left out).
pub fn shown_command(command: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut room = MAX_SHOWN_COMMAND;
    for arg in command {
        if arg.len() < room {
            room -= arg.len() + 1;
            out.push(arg.clone());
            continue;
        }
        let mut end = room.min(arg.len());
        while !arg.is_char_boundary(end) {
            end -= 1;
        }
        out.push(format!("{}{CUT_MARK}", &arg[..end]));
        break;
    }
    out
}

impl ProcessInfo {
    /// The report as sandboxd makes it, or `None` when it cannot be one: what the server does
    /// with every report, since sandboxd is a program inside the sandbox.
    pub fn sanitized(mut self) -> Option<ProcessInfo> {
        if !is_session_id(&self.id) {
            return None;
        }
        self.command = shown_command(&self.command);
        if self
            .tag
            .as_deref()
            .is_some_and(|t| tag_problem(t).is_some())
        {
            self.tag = None;
        }
        if self
            .signal
            .as_ref()
            .is_some_and(|s| s.len() > MAX_SIGNAL_NAME)
        {
            self.signal = None;
        }
        Some(self)
    }
}

/// `process.start`: runs `run.command` in the background.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ProcessStart {
    /// The command, cwd, env and timeout, as an exec takes them (`output_cap` is not used).
    pub run: ExecRequest,
    #[serde(default)]
    pub tag: Option<String>,
    /// Keep a pipe to the process's stdin for `process.stdin`; without, stdin is `/dev/null`.
    #[serde(default)]
    pub stdin: bool,
    /// While it runs, the agent does not fall asleep.
    #[serde(default)]
    pub keep_awake: bool,
    /// Output kept for readers, in bytes (older output leaves and reads as a gap).
    pub output_bytes: u64,
    /// Processes that may run at once in this sandbox (and finished ones kept at most).
    pub max_running: u32,
    /// How long a finished process stays listed; `None` keeps it until the count forces it out.
    #[serde(default)]
    pub retention_ms: Option<u64>,
}

/// How a process stands.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    Running,
    /// It exited by itself (see `exit_code`).
    Exited,
    /// A signal ended it (see `signal`): one sent through the API, its timeout, or its own.
    Killed,
    /// It was running when its sandbox stopped (the agent slept, or sandboxd died); its output
    /// up to then is still there.
    Lost,
}

impl ProcessState {
    pub fn is_running(self) -> bool {
        self == ProcessState::Running
    }
}

/// One process, as every `process.*` channel reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    pub id: String,
    pub tag: Option<String>,
    /// See [`shown_command`].
    pub command: Vec<String>,
    /// Its process id in the sandbox (the leader of its process group).
    pub pid: Option<i32>,
    pub state: ProcessState,
    pub exit_code: Option<i32>,
    /// The signal's name without `SIG` (`TERM`, `KILL`), when one ended it.
    pub signal: Option<String>,
    /// Ended by its `timeoutMs`.
    #[serde(default)]
    pub timed_out: bool,
    /// Milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    pub ended_at_ms: Option<u64>,
    /// Output so far, both streams, in bytes: the offset of the next byte.
    pub output_bytes: u64,
    /// The oldest offset still kept; reading from before it starts with a gap.
    #[serde(default)]
    pub output_start: u64,
    pub keep_awake: bool,
    /// A pipe to its stdin is open (started with `stdin`, not yet closed with `eof`).
    #[serde(default)]
    pub stdin_open: bool,
    /// Who it runs as; an older sandboxd's records say nothing, and ran everything as the
    /// account.
    #[serde(default)]
    pub run_as: crate::RunAs,
}

/// The header of a channel about one process, named by id or tag.
macro_rules! about_a_process {
    ($($name:ident),*) => {$(
        #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
        pub struct $name {
            pub process: String,
        }
    )*};
}
about_a_process!(ProcessGet, ProcessRemove);

/// `process.list`: the reply says how many processes there are; one [`crate::Frame::Process`]
/// per process follows it, oldest first (fewer means the stream was cut). Finished processes
/// older than `retention_ms` are forgotten first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProcessList {
    #[serde(default)]
    pub retention_ms: Option<u64>,
}

/// `process.watch`, opened by sandboxd: a [`crate::Frame::Process`] for every process at once,
/// then one each time a process starts or ends, for as long as the tunnel lasts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessWatch {}

/// `process.output`: the output from `offset`. The reply is the process as it is; then
/// `Stdout`/`Stderr` frames carry the bytes from `offset` (a `Gap` frame wherever bytes have
/// left the buffer), and last a `Process` frame: how it ended, once everything up to its end
/// has been sent, or (without `follow`) the process still running, after the output produced
/// so far. A stream that ends without that frame was cut.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessOutput {
    pub process: String,
    #[serde(default)]
    pub offset: u64,
    #[serde(default)]
    pub follow: bool,
}

/// `process.attach`: one stream for a process's output and its stdin, for a caller that talks
/// to the process for as long as it runs (an agent harness speaking a protocol on its stdio)
/// rather than one `process.stdin` stream per write.
///
/// The reply is the process as it is. Then sandboxd sends what `process.output` with `follow`
/// sends from `offset` (`Stdout`, `Stderr` and `Gap` frames, and last a `Process` frame once the
/// process has ended and its output was all sent), while the server sends `Data` frames for the
/// process's stdin, in order, and `StdinEof` to close it. Writes are queued behind one that a
/// `process.stdin` stream has under way, not refused. When the process's stdin is not open at
/// the attach, or a write finds it not open (closed by another caller, or the process stopped
/// reading it), sandboxd sends one `StdinEof` among the output frames and drops what the server
/// sends for stdin after that. The end of the server's side, a close or a reset, is the server
/// leaving: it closes stdin with `StdinEof`, never by half-closing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessAttach {
    pub process: String,
    #[serde(default)]
    pub offset: u64,
}

/// `process.stdin`: after the reply the server sends raw bytes for the process's stdin and
/// half-closes; sandboxd answers a second reply with the [`crate::Size`] written. With `eof`,
/// stdin is closed after them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessStdin {
    pub process: String,
    #[serde(default)]
    pub eof: bool,
}

/// `process.signal`: sent to the process's whole group. `signal` is a name (`TERM`, `SIGTERM`)
/// or a number.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessSignal {
    pub process: String,
    pub signal: String,
}

/// `process.wait`: answers once the process has ended, or when `timeout_ms` is up, with the
/// process as it then is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProcessWait {
    pub process: String,
    pub timeout_ms: u64,
}

/// What a signal name or number in the API means.
pub fn parse_signal(s: &str) -> Option<i32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return SIGNALS.iter().any(|(_, v)| *v == n).then_some(n);
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

/// The name of signal `n`, without `SIG`; its number when it has none here.
pub fn signal_name(n: i32) -> String {
    SIGNALS
        .iter()
        .find(|(_, v)| *v == n)
        .map(|(k, _)| k.to_string())
        .unwrap_or_else(|| n.to_string())
}

/// The signals one may send (Linux's numbers, x86 and arm alike).
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
    ("SYS", 31),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("TERM"), Some(15));
        assert_eq!(parse_signal("sigkill"), Some(9));
        assert_eq!(parse_signal(" 2 "), Some(2));
        assert_eq!(parse_signal("0"), None, "0 only probes; it is no signal");
        assert_eq!(parse_signal("99"), None);
        assert_eq!(parse_signal("NOPE"), None);
        assert_eq!(signal_name(15), "TERM");
        assert_eq!(signal_name(40), "40");
    }

    #[test]
    fn tags() {
        assert_eq!(tag_problem("dev-server_1.2"), None);
        assert!(tag_problem("").is_some());
        assert!(tag_problem("-x").is_some());
        assert!(tag_problem("a b").is_some());
        assert!(tag_problem("ü").is_some());
        assert!(tag_problem(&"a".repeat(MAX_TAG_LEN + 1)).is_some());
        assert_eq!(tag_problem(&"a".repeat(MAX_TAG_LEN)), None);
    }

    #[test]
    fn a_long_command_is_shown_cut() {
        let short = vec!["sh".to_string(), "-c".to_string(), "true".to_string()];
        assert_eq!(shown_command(&short), short);
        let long = vec![
            "sh".to_string(),
            "-c".to_string(),
            "é".repeat(MAX_SHOWN_COMMAND),
            "more".to_string(),
        ];
        let shown = shown_command(&long);
        assert_eq!(shown.len(), 3);
        assert!(shown[2].ends_with(CUT_MARK));
        let bytes: usize = shown.iter().map(|a| a.len()).sum();
        assert!(bytes <= MAX_SHOWN_COMMAND + CUT_MARK.len(), "{bytes}");
        // A million empty arguments are bounded too.
        let empties = vec![String::new(); 1 << 20];
        assert!(shown_command(&empties).len() <= MAX_SHOWN_COMMAND + 1);
    }
}

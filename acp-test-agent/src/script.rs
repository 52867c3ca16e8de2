//! The command language: the text of a prompt decides what its turn does. The first word names
//! the command; text that starts with no command word is echoed. The full list is in the crate's
//! documentation, README.md.

use std::path::PathBuf;
use std::str::FromStr;

use agent_client_protocol_schema::v1::StopReason;

/// The largest `big` update: a typo must not take the sandbox's memory.
pub const BIG_MAX_BYTES: usize = 1 << 30;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// One `agent_message_chunk` with this text.
    Echo(String),
    /// This many `agent_message_chunk`s, `chunk 1 of N` to `chunk N of N`.
    Stream(u32),
    /// One `agent_thought_chunk`.
    Think(String),
    /// One `plan` update with three entries.
    Plan,
    /// A `tool_call`, then `session/request_permission`; the answer decides the rest.
    Tool,
    /// Waits for `session/cancel`.
    Wait,
    /// One chunk, then the process exits with this code.
    Crash(u8),
    /// This many `agent_message_chunk`s, as fast as the client reads them.
    Flood(u64),
    /// One `agent_message_chunk` whose text is this many bytes.
    Big(usize),
    /// `fs/read_text_file`, then the content as a chunk.
    FsRead(PathBuf),
    /// `fs/write_text_file`, then what happened as a chunk.
    FsWrite { path: PathBuf, text: String },
    /// A line that is not JSON and a request with a method no client has.
    Garbage,
    /// Ends the turn at once with this stop reason.
    Stop(StopReason),
    /// Answers `session/prompt` with a JSON-RPC error carrying this message.
    Fail(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{command}` {expects}")]
pub struct ScriptError {
    command: &'static str,
    expects: &'static str,
}

impl Command {
    pub fn parse(text: &str) -> Result<Command, ScriptError> {
        let trimmed = text.trim_start();
        let (word, rest) = trimmed
            .split_once(char::is_whitespace)
            .map_or((trimmed, ""), |(word, rest)| (word, rest.trim_start()));
        let bad = |command, expects| ScriptError { command, expects };
        let no_arguments = |command, then: Command| {
            if rest.trim().is_empty() {
                Ok(then)
            } else {
                Err(bad(command, "takes no arguments"))
            }
        };
        match word {
            "echo" => Ok(Command::Echo(rest.to_owned())),
            "stream" => number(rest, "stream", "needs a count: `stream 5`").map(Command::Stream),
            "think" if rest.is_empty() => Ok(Command::Think("Thinking it over.".to_owned())),
            "think" => Ok(Command::Think(rest.to_owned())),
            "plan" => no_arguments("plan", Command::Plan),
            "tool" => no_arguments("tool", Command::Tool),
            "wait" => no_arguments("wait", Command::Wait),
            "garbage" => no_arguments("garbage", Command::Garbage),
            "crash" if rest.trim().is_empty() => Ok(Command::Crash(3)),
            "crash" => match number(rest, "crash", CRASH_EXPECTS)? {
                0 => Err(bad("crash", CRASH_EXPECTS)),
                code => Ok(Command::Crash(code)),
            },
            "flood" => number(rest, "flood", "needs a count: `flood 10000`").map(Command::Flood),
            "big" => match number(rest, "big", "needs a size in bytes: `big 1048576`")? {
                size if size > BIG_MAX_BYTES => Err(bad("big", "is limited to 1 GiB")),
                size => Ok(Command::Big(size)),
            },
            "fs-read" if rest.trim().is_empty() => Err(bad("fs-read", "needs a path")),
            "fs-read" => Ok(Command::FsRead(PathBuf::from(rest.trim_end()))),
            "fs-write" => {
                let (path, text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                if path.is_empty() {
                    return Err(bad("fs-write", "needs a path, then the text"));
                }
                Ok(Command::FsWrite {
                    path: PathBuf::from(path),
                    text: text.to_owned(),
                })
            }
            "stop" => parse_stop_reason(rest.trim()).map(Command::Stop).ok_or(bad(
                "stop",
                "needs end_turn, max_tokens, max_turn_requests, refusal or cancelled",
            )),
            "fail" if rest.is_empty() => Ok(Command::Fail("the prompt said fail".to_owned())),
            "fail" => Ok(Command::Fail(rest.to_owned())),
            // No command word: the whole text, as it came, is echoed.
            _ => Ok(Command::Echo(text.to_owned())),
        }
    }
}

const CRASH_EXPECTS: &str = "takes an exit code from 1 to 255: `crash 7`";

fn number<T: FromStr>(
    rest: &str,
    command: &'static str,
    expects: &'static str,
) -> Result<T, ScriptError> {
    rest.trim()
        .parse()
        .map_err(|_| ScriptError { command, expects })
}

fn parse_stop_reason(name: &str) -> Option<StopReason> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_and_echo_are_echoed() {
        assert_eq!(
            Command::parse("hello there"),
            Ok(Command::Echo("hello there".into()))
        );
        assert_eq!(
            Command::parse("  two\nlines "),
            Ok(Command::Echo("  two\nlines ".into()))
        );
        assert_eq!(
            Command::parse("echo stream 3"),
            Ok(Command::Echo("stream 3".into()))
        );
        assert_eq!(Command::parse(""), Ok(Command::Echo(String::new())));
    }

    #[test]
    fn commands_take_their_arguments() {
        assert_eq!(Command::parse("stream 5"), Ok(Command::Stream(5)));
        assert_eq!(Command::parse("flood 100000"), Ok(Command::Flood(100_000)));
        assert_eq!(Command::parse("big 1024"), Ok(Command::Big(1024)));
        assert_eq!(Command::parse("crash"), Ok(Command::Crash(3)));
        assert_eq!(Command::parse("crash 7"), Ok(Command::Crash(7)));
        assert_eq!(Command::parse("tool"), Ok(Command::Tool));
        assert_eq!(
            Command::parse("stop refusal"),
            Ok(Command::Stop(StopReason::Refusal))
        );
        assert_eq!(
            Command::parse("fs-read /home/agent/a file.txt"),
            Ok(Command::FsRead(PathBuf::from("/home/agent/a file.txt")))
        );
        assert_eq!(
            Command::parse("fs-write /tmp/x line one\nline two"),
            Ok(Command::FsWrite {
                path: PathBuf::from("/tmp/x"),
                text: "line one\nline two".into()
            })
        );
    }

    #[test]
    fn a_command_word_with_bad_arguments_is_an_error_not_an_echo() {
        for text in [
            "stream",
            "stream many",
            "crash 0",
            "crash 256",
            "plan now",
            "fs-read",
            "stop",
        ] {
            assert!(Command::parse(text).is_err(), "{text}");
        }
        assert!(Command::parse("big 2000000000").is_err());
    }
}

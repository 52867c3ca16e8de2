//! The command line. Flags only, parsed by hand: the binary stays small and needs nothing but std
//! to start (it is copied into sandboxes of any image).

use std::ffi::OsString;
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: acp-test-agent [--restore load|resume|both|none] [--state-dir DIR] [--never-initialize]

A model-free ACP agent for tests: JSON-RPC 2.0 on stdin/stdout, one message a line; logs on stderr.
  --restore KIND        what `initialize` advertises for reopening a session: `loadSession`
                        (load), `sessionCapabilities.resume` (resume), both, or none (default: load)
  --state-dir DIR       where each session's history is kept (default: $HOME/.acp-test-agent)
  --never-initialize    read `initialize` and every later message, and never answer any of them
";

/// Which ways of reopening a session `initialize` advertises; the others are refused with -32601.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// `session/load`: the history is replayed as `session/update`s before the answer.
    Load,
    /// `session/resume`: the session is reopened without replay.
    Resume,
    Both,
    None,
}

impl Restore {
    pub fn offers_load(self) -> bool {
        matches!(self, Restore::Load | Restore::Both)
    }

    pub fn offers_resume(self) -> bool {
        matches!(self, Restore::Resume | Restore::Both)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub restore: Restore,
    pub state_dir: PathBuf,
    pub never_initialize: bool,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Invocation {
    Run(Options),
    Help,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error("unknown argument `{0}`")]
    UnknownArgument(String),
    #[error("{0} needs a value")]
    MissingValue(&'static str),
    #[error("--restore takes load, resume, both or none, not `{0}`")]
    BadRestore(String),
    #[error("no --state-dir given and no $HOME to put the default one in")]
    NoHome,
}

/// Parses the arguments after the program name. `home` is `$HOME`: read from the environment
/// only, never from the password database (a static binary must make no NSS calls).
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    home: Option<OsString>,
) -> Result<Invocation, OptionsError> {
    let mut restore = Restore::Load;
    let mut state_dir = None;
    let mut never_initialize = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        // `--flag=value` and `--flag value` both work.
        let (flag, inline_value) = match text.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(OsString::from(value)))
            }
            _ => (text.into_owned(), None),
        };
        match flag.as_str() {
            "--help" | "-h" => return Ok(Invocation::Help),
            "--never-initialize" => never_initialize = true,
            "--restore" => {
                let value = inline_value
                    .or_else(|| args.next())
                    .ok_or(OptionsError::MissingValue("--restore"))?;
                restore = parse_restore(&value.to_string_lossy())?;
            }
            "--state-dir" => {
                let value = inline_value
                    .or_else(|| args.next())
                    .ok_or(OptionsError::MissingValue("--state-dir"))?;
                state_dir = Some(PathBuf::from(value));
            }
            _ => return Err(OptionsError::UnknownArgument(flag)),
        }
    }
    let state_dir = match state_dir {
        Some(dir) => dir,
        None => PathBuf::from(home.ok_or(OptionsError::NoHome)?).join(".acp-test-agent"),
    };
    Ok(Invocation::Run(Options {
        restore,
        state_dir,
        never_initialize,
    }))
}

fn parse_restore(value: &str) -> Result<Restore, OptionsError> {
    match value {
        "load" => Ok(Restore::Load),
        "resume" => Ok(Restore::Resume),
        "both" => Ok(Restore::Both),
        "none" => Ok(Restore::None),
        other => Err(OptionsError::BadRestore(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], home: Option<&str>) -> Result<Invocation, OptionsError> {
        parse(args.iter().map(OsString::from), home.map(OsString::from))
    }

    #[test]
    fn defaults_keep_state_under_home_and_offer_load() {
        let Ok(Invocation::Run(options)) = run(&[], Some("/home/agent")) else {
            panic!("no options");
        };
        assert_eq!(options.restore, Restore::Load);
        assert_eq!(
            options.state_dir,
            PathBuf::from("/home/agent/.acp-test-agent")
        );
        assert!(!options.never_initialize);
    }

    #[test]
    fn flags_take_values_separately_or_after_an_equals_sign() {
        let Ok(Invocation::Run(options)) = run(
            &[
                "--restore=resume",
                "--state-dir",
                "/tmp/s",
                "--never-initialize",
            ],
            None,
        ) else {
            panic!("no options");
        };
        assert_eq!(options.restore, Restore::Resume);
        assert_eq!(options.state_dir, PathBuf::from("/tmp/s"));
        assert!(options.never_initialize);
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(run(&[], None), Err(OptionsError::NoHome));
        assert_eq!(
            run(&["--restore", "later"], Some("/h")),
            Err(OptionsError::BadRestore("later".into()))
        );
        assert_eq!(
            run(&["--state-dir"], Some("/h")),
            Err(OptionsError::MissingValue("--state-dir"))
        );
        assert_eq!(
            run(&["--verbose"], Some("/h")),
            Err(OptionsError::UnknownArgument("--verbose".into()))
        );
    }
}

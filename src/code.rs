//! Code that keeps its state: what a run may ask for, and a run's events gathered into one
//! answer. The kernels themselves are sandboxd's (its `kernel` module); the wake rule is the
//! lifecycle's (a run wakes the agent, a listing of contexts never does).

use agenthold_proto::code::PYTHON;
use std::collections::BTreeMap;

use agenthold_proto::{CodeError, CodeEvent, CodeRun, CodeRunInvalid};

use crate::tunnel::conn::{CodeRunStream, ConnError};

/// Why a run is refused before it reaches the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeInvalid {
    #[error("language {0:?} has no kernel: \"python\" is the only language")]
    Language(String),
    #[error(transparent)]
    Run(#[from] CodeRunInvalid),
}

impl CodeInvalid {
    /// The request field it is about.
    pub fn field(&self) -> &'static str {
        match self {
            CodeInvalid::Language(_) => "language",
            CodeInvalid::Run(CodeRunInvalid::TooLarge(_)) => "code",
            CodeInvalid::Run(CodeRunInvalid::Context(_)) => "context",
        }
    }
}

/// The run sandboxd gets for code in `language` (Python when absent), in `context` (the
/// default one when absent), interrupted after `timeout_ms`.
pub fn check_run(
    code: String,
    language: Option<&str>,
    context: Option<String>,
    timeout_ms: u64,
    agent_env: &BTreeMap<String, String>,
) -> Result<CodeRun, CodeInvalid> {
    if let Some(l) = language.filter(|l| *l != PYTHON) {
        return Err(CodeInvalid::Language(l.chars().take(64).collect()));
    }
    let run = CodeRun {
        code,
        context,
        timeout_ms: Some(timeout_ms),
        env: kernel_env(agent_env)?,
    };
    run.check()?;
    Ok(run)
}

/// The env a kernel starts with over the sandbox's own: the agent's, as commands get it. Held
/// to the size a run's header carries (the agent's env alone stays well under it).
pub fn kernel_env(
    agent_env: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, CodeInvalid> {
    let env: Vec<(String, String)> = agent_env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let len = agenthold_proto::code::env_len(&env);
    if len > agenthold_proto::MAX_CODE_LEN {
        return Err(CodeInvalid::Run(CodeRunInvalid::TooLarge(len)));
    }
    Ok(env)
}

/// A whole run: its results in order, its output, its exception.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Execution {
    pub results: Vec<serde_json::Map<String, serde_json::Value>>,
    pub stdout: String,
    pub stderr: String,
    pub error: Option<CodeError>,
    pub execution_count: Option<u64>,
    pub truncated: bool,
}

/// Waits for the run's end, keeping everything it produced.
pub async fn collect(mut run: CodeRunStream) -> Result<Execution, ConnError> {
    let mut out = Execution::default();
    while let Some(event) = run.next().await {
        match event? {
            CodeEvent::Stdout(s) => out.stdout.push_str(&s),
            CodeEvent::Stderr(s) => out.stderr.push_str(&s),
            CodeEvent::Result(r) => out.results.push(r),
            // A run reports one exception; a timeout after a KeyboardInterrupt says more.
            CodeEvent::Error(e) => out.error = Some(e),
            CodeEvent::Done(d) => {
                out.execution_count = d.execution_count;
                out.truncated = d.truncated;
                return Ok(out);
            }
        }
    }
    Err(ConnError::Lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthold_proto::MAX_CODE_LEN;

    #[test]
    fn only_python_code_within_the_limit_in_a_named_context_runs() {
        let none = BTreeMap::new();
        assert!(check_run("1".into(), None, None, 1, &none).is_ok());
        assert!(check_run("1".into(), Some("python"), Some("default".into()), 1, &none).is_ok());
        let e = check_run("1".into(), Some("r"), None, 1, &none).unwrap_err();
        assert_eq!(e.field(), "language");
        let e = check_run("x".repeat(MAX_CODE_LEN + 1), None, None, 1, &none).unwrap_err();
        assert_eq!(e.field(), "code");
        let e = check_run("1".into(), None, Some("../x".into()), 1, &none).unwrap_err();
        assert_eq!(e.field(), "context");
    }

    #[test]
    fn the_agents_env_goes_with_a_run_and_counts_toward_its_size() {
        let env = BTreeMap::from([("OPENAI_API_KEY".to_string(), "sk-1".to_string())]);
        let run = check_run("1".into(), None, None, 1, &env).expect("a run");
        assert_eq!(run.env, vec![("OPENAI_API_KEY".into(), "sk-1".into())]);
        let e = check_run("x".repeat(MAX_CODE_LEN - 10), None, None, 1, &env).unwrap_err();
        assert_eq!(e.field(), "code");
    }
}

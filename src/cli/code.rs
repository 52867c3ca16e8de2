//! `agenthold code AGENT FILE|-`: run Python in the agent's kernel, which keeps its variables
//! between calls; print what it printed and made; exit 1 when it raised.

use anyhow::Context;
use reqwest::Method;
use tokio::io::AsyncReadExt;

use super::client::ApiClient;
use crate::api::types::{Execution, RunCode};

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct CodeArgs {
    /// Agent id or name
    pub agent: String,
    /// A file of Python code, or - for stdin
    pub file: String,
    /// The context to run in (an id from the API's /code/contexts); the agent's default one
    /// when absent
    #[arg(long)]
    pub context: Option<String>,
    /// Interrupt the code after this many seconds
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
}

impl ApiClient {
    /// Runs code in a kernel and waits for the whole run.
    pub async fn run_code(&self, id: &str, req: &RunCode) -> Result<Execution, super::ClientError> {
        self.json(
            self.request(Method::POST, &["agents", id, "code"])
                .json(req),
        )
        .await
    }
}

/// What a run shows: its stdout and each result's text on stdout, its stderr and the error's
/// traceback on stderr.
pub fn render(out: &Execution) -> (String, String) {
    let mut stdout = out.stdout.clone();
    for r in &out.results {
        if let Some(text) = r.get("text/plain").and_then(|t| t.as_str()) {
            stdout.push_str(text);
            stdout.push('\n');
        } else if let Some(kind) = r.keys().next() {
            stdout.push_str(&format!("<{kind}>\n"));
        }
    }
    let mut stderr = out.stderr.clone();
    if let Some(e) = &out.error {
        if e.traceback.is_empty() {
            stderr.push_str(&format!("{}: {}\n", e.name, e.value));
        } else {
            stderr.push_str(&e.traceback);
            stderr.push('\n');
        }
    }
    if out.truncated {
        stderr.push_str("agenthold: output past 8 MiB was dropped\n");
    }
    (stdout, stderr)
}

pub(super) async fn run(client: &ApiClient, args: CodeArgs) -> anyhow::Result<i32> {
    let code = if args.file == "-" {
        let mut s = String::new();
        tokio::io::stdin()
            .read_to_string(&mut s)
            .await
            .context("reading the code from stdin")?;
        s
    } else {
        tokio::fs::read_to_string(&args.file)
            .await
            .with_context(|| format!("reading {}", args.file))?
    };
    let agent = client.find_agent(&args.agent).await?;
    let req = RunCode {
        code,
        language: None,
        context: args.context,
        timeout_ms: args.timeout.map(|s| s.saturating_mul(1000)),
    };
    let out = client.run_code(&agent.id, &req).await?;
    let (stdout, stderr) = render(&out);
    print!("{stdout}");
    eprint!("{stderr}");
    Ok(if out.error.is_some() { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::CodeError;

    #[test]
    fn results_go_to_stdout_and_the_traceback_to_stderr() {
        let mut png = serde_json::Map::new();
        png.insert("image/png".into(), "iVBOR".into());
        let mut text = serde_json::Map::new();
        text.insert("text/plain".into(), "42".into());
        let out = Execution {
            results: vec![png, text],
            stdout: "hi\n".into(),
            stderr: "warn\n".into(),
            error: Some(CodeError {
                name: "ValueError".into(),
                value: "v".into(),
                traceback: "Traceback…\nValueError: v".into(),
            }),
            execution_count: Some(1),
            truncated: false,
        };
        let (o, e) = render(&out);
        assert_eq!(o, "hi\n<image/png>\n42\n");
        assert_eq!(e, "warn\nTraceback…\nValueError: v\n");
    }
}

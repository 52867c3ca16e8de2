//! How the server has a command run in an agent's sandbox, whoever asks (an exec, a background
//! process, the setup script): what a command may be, the agent's `env` it starts with, and
//! the limits a background process is started with. [`crate::tunnel::conn`] sends what this
//! makes, and sends nothing else.
//!
//! Who a command runs as is decided here only for root ([`Launch::as_user`]: an agent's
//! `allowRoot` is the gate, and sandboxd trusts the server on it); otherwise sandboxd runs it as
//! the account it reports at hello (the image's `agent`, else its `USER`, else root).

use std::collections::BTreeMap;
use std::sync::Arc;

use agenthold_proto::process::{tag_problem, ProcessList, ProcessStart};
use agenthold_proto::{ExecRequest, ExecTooLarge, RunAs};

use crate::config::{SandboxConfig, ServerConfig};
use crate::egress::PLACEHOLDER_LEN;
use crate::model::Agent;
use crate::secrets::Secrets;

/// The longest `timeoutMs` a process may be started with (30 days).
pub const MAX_PROCESS_TIMEOUT_MS: u64 = 30 * 24 * 3600 * 1000;
/// Most variables a process's `env` may name.
pub const MAX_ENV_ENTRIES: usize = 4096;

/// Why a command is not run; [`CommandError::field`] names the request field it is about.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("command must name a program")]
    NoProgram,
    #[error("command may not contain NUL bytes")]
    NulInCommand,
    /// Why, as `agents::env::check_names` says it (the same message an agent's `env` gets).
    #[error("{}", crate::agents::env::message(.0))]
    BadEnv(String),
    #[error("cwd may not contain NUL bytes")]
    NulInCwd,
    #[error("timeoutMs must be between 1 and {max}")]
    ExecTimeout { max: u64 },
    #[error("timeoutMs must be between 1 and {MAX_PROCESS_TIMEOUT_MS} (30 days)")]
    ProcessTimeout,
    /// Why the tag is refused.
    #[error("{0}")]
    BadTag(String),
    #[error("env names {0} variables; a process may have at most {MAX_ENV_ENTRIES}")]
    TooManyVars(usize),
    /// Over exec's limits, the agent's `env` counted in.
    #[error(transparent)]
    TooLarge(#[from] ExecTooLarge),
}

impl CommandError {
    /// The camelCase request field it is about.
    pub fn field(&self) -> &'static str {
        match self {
            CommandError::NoProgram | CommandError::NulInCommand => "command",
            CommandError::BadEnv(_) | CommandError::TooManyVars(_) => "env",
            CommandError::NulInCwd => "cwd",
            CommandError::ExecTimeout { .. } | CommandError::ProcessTimeout => "timeoutMs",
            CommandError::BadTag(_) => "tag",
            CommandError::TooLarge(e) => e.field(),
        }
    }
}

/// Checks a command line, its cwd and env the way every command the API runs is checked, and
/// makes the request sandboxd takes (with `timeout_ms` as given, already checked).
pub fn check_command(
    command: &[String],
    cwd: Option<&str>,
    env: Option<&BTreeMap<String, String>>,
    timeout_ms: Option<u64>,
) -> Result<ExecRequest, CommandError> {
    if command.first().is_none_or(String::is_empty) {
        return Err(CommandError::NoProgram);
    }
    if command.iter().any(|a| a.contains('\0')) {
        return Err(CommandError::NulInCommand);
    }
    let env = env.cloned().unwrap_or_default();
    crate::agents::env::check_names(&env).map_err(CommandError::BadEnv)?;
    if cwd.is_some_and(|c| c.contains('\0')) {
        return Err(CommandError::NulInCwd);
    }
    let req = ExecRequest {
        command: command.to_vec(),
        cwd: cwd.map(str::to_string),
        env: env.into_iter().collect(),
        timeout_ms,
        output_cap: None,
        run_as: RunAs::Agent,
    };
    // Here, before waking the agent: past this limit the header would not be accepted.
    req.check_size()?;
    Ok(req)
}

/// An exec's timeout: the one asked for, or the server's default; within the server's maximum.
pub fn exec_timeout(asked: Option<u64>, server: &ServerConfig) -> Result<u64, CommandError> {
    let max = server.exec_max_timeout.as_millis() as u64;
    let timeout_ms = asked.unwrap_or(server.exec_default_timeout.as_millis() as u64);
    if timeout_ms == 0 || timeout_ms > max {
        return Err(CommandError::ExecTimeout { max });
    }
    Ok(timeout_ms)
}

/// What a background process may ask for beyond its command: a timeout of at most 30 days, a
/// tag of the shape [`tag_problem`] allows, and at most [`MAX_ENV_ENTRIES`] variables (an exec
/// takes any count within its 1 MiB; a process that lives on refuses a hostile number).
pub fn check_process(
    timeout_ms: Option<u64>,
    tag: Option<&str>,
    vars: usize,
) -> Result<(), CommandError> {
    if timeout_ms.is_some_and(|t| t == 0 || t > MAX_PROCESS_TIMEOUT_MS) {
        return Err(CommandError::ProcessTimeout);
    }
    if let Some(why) = tag.and_then(tag_problem) {
        return Err(CommandError::BadTag(why));
    }
    if vars > MAX_ENV_ENTRIES {
        return Err(CommandError::TooManyVars(vars));
    }
    Ok(())
}

/// One boot of one agent's sandbox, as what its programs start with: the agent's `env` and, for
/// each secret granted to it, the placeholder that stands for it in this boot. Made by the
/// lifecycle for the tunnel session it sends over; [`BootEnv::launch_env`] is the one place
/// every launch (exec, background process, setup, harness, terminal, code kernel) gets its
/// variables from. No value is ever near it: placeholders only.
#[derive(Clone)]
pub struct BootEnv {
    secrets: Arc<Secrets>,
    agent: String,
    /// The hash of the boot token the connected sandboxd presented; `None` when unknown (no
    /// sandboxd connected): then no placeholders, as no program runs.
    boot: Option<String>,
}

impl std::fmt::Debug for BootEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootEnv")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl BootEnv {
    pub fn new(secrets: Arc<Secrets>, agent: &str, boot: Option<String>) -> BootEnv {
        BootEnv {
            secrets,
            agent: agent.to_string(),
            boot,
        }
    }

    /// The variables a program of `agent` starts with in this boot: its `env`, and each granted
    /// secret's placeholder under the secret's name (over an `env` variable of that name: the
    /// grant is the newer, deliberate choice). A name whose secret is gone gets none.
    pub fn launch_env(&self, agent: &Agent) -> BTreeMap<String, String> {
        let mut env = agent.env.clone();
        if let Some(boot) = &self.boot {
            for name in agent.secrets.iter().filter(|n| self.secrets.exists(n)) {
                let placeholder = self.secrets.placeholder(&self.agent, boot, name);
                env.insert(name.clone(), placeholder);
            }
        }
        env
    }
}

/// A command with the agent's `env` in it: the only form in which the tunnel's client runs one,
/// so that no caller can forget the agent's variables. The placeholders of its granted secrets
/// depend on the boot, which a wake may change: they go in when it is sent
/// ([`Launch::into_request`]), and their room is counted now.
#[derive(Debug, Clone)]
pub struct Launch {
    run: ExecRequest,
    agent: Agent,
}

impl Launch {
    /// Puts `agent`'s env under the command's own variables (a variable the command names wins)
    /// and checks the size again with them, each granted secret counted at its placeholder's
    /// length.
    pub fn new(run: ExecRequest, agent: &Agent) -> Result<Launch, CommandError> {
        let mut sized = agent.env.clone();
        for name in &agent.secrets {
            sized.insert(name.clone(), "x".repeat(PLACEHOLDER_LEN));
        }
        with_agent_env(run.clone(), &sized).check_size()?;
        Ok(Launch {
            run,
            agent: agent.clone(),
        })
    }

    /// Forwards at most `bytes` of each of stdout and stderr (an exec whose output is
    /// collected into one answer).
    pub fn with_output_cap(mut self, bytes: u64) -> Launch {
        self.run.output_cap = Some(bytes);
        self
    }

    /// The exec header for the sandbox in `boot`.
    pub(crate) fn into_request(self, boot: &BootEnv) -> ExecRequest {
        with_agent_env(self.run, &boot.launch_env(&self.agent))
    }
}

/// `run` with `agent_env` under its own variables.
fn with_agent_env(mut run: ExecRequest, agent_env: &BTreeMap<String, String>) -> ExecRequest {
    let mut env: Vec<(String, String)> = agent_env
        .iter()
        .filter(|(k, _)| !run.env.iter().any(|(own, _)| own == *k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.append(&mut run.env);
    run.env = env;
    run
}

/// A command asked to run as root for an agent without `allowRoot`.
#[derive(Debug, thiserror::Error)]
#[error(
    "agent {agent} does not allow root: \"user\": \"root\" needs \"allowRoot\": true on the agent \
     (set it at create, or with PATCH; sudo follows at the next rebuild)"
)]
pub struct RootNotAllowed {
    pub agent: String,
}

impl Launch {
    /// Runs it as `user` (the account when `None`): root only for an agent whose `allowRoot`
    /// is true. This is the only check: sandboxd cannot know the agent's setting and runs a
    /// command as root when told to.
    pub fn as_user(
        mut self,
        user: Option<RunAs>,
        agent: &crate::model::Agent,
    ) -> Result<Launch, RootNotAllowed> {
        let user = user.unwrap_or_default();
        if user == RunAs::Root && !agent.allow_root {
            return Err(RootNotAllowed {
                agent: agent.id.clone(),
            });
        }
        self.run.run_as = user;
        Ok(self)
    }
}

/// How a background process is to run, beyond its command.
#[derive(Debug, Clone, Default)]
pub struct ProcessOptions {
    pub tag: Option<String>,
    /// Keep a pipe to its stdin.
    pub stdin: bool,
    /// The agent does not fall asleep while it runs.
    pub keep_awake: bool,
}

/// The server's limits on background processes (`sandbox.process_output_kb`,
/// `sandbox.max_processes`, `sandbox.process_retention`), as every start and list sends them.
#[derive(Debug, Clone, Copy)]
pub struct ProcessLimits {
    output_bytes: u64,
    max_running: u32,
    retention_ms: u64,
}

impl ProcessLimits {
    pub fn of(sandbox: &SandboxConfig) -> ProcessLimits {
        ProcessLimits {
            output_bytes: sandbox.process_output_kb.saturating_mul(1024),
            max_running: sandbox.max_processes,
            retention_ms: sandbox.process_retention.as_millis() as u64,
        }
    }

    /// The `process.start` header for `launch` in `boot`.
    pub fn start(&self, launch: Launch, boot: &BootEnv, options: ProcessOptions) -> ProcessStart {
        ProcessStart {
            run: launch.into_request(boot),
            tag: options.tag,
            stdin: options.stdin,
            keep_awake: options.keep_awake,
            output_bytes: self.output_bytes,
            max_running: self.max_running,
            retention_ms: Some(self.retention_ms),
        }
    }

    /// The `process.list` header: finished processes past their retention are forgotten first.
    pub fn list(&self) -> ProcessList {
        ProcessList {
            retention_ms: Some(self.retention_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(env: &[(&str, &str)]) -> ExecRequest {
        ExecRequest {
            command: vec!["true".into()],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    fn agent(env: &[(&str, &str)], secrets: &[&str]) -> Agent {
        Agent {
            id: "agent1".into(),
            name: "a".into(),
            image: "i".into(),
            cpus: 1.0,
            memory_mb: 64,
            disk_mb: None,
            runtime: "runc".into(),
            egress: None,
            idle_minutes: 0,
            deep_sleep_minutes: None,
            state: crate::model::AgentState::Running,
            error: None,
            needs_rebuild: false,
            created_at: chrono::Utc::now(),
            last_activity_at: None,
            sleeps_at: None,
            pull: None,
            preset: None,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
            setup: None,
            ttl_minutes: None,
            expires_at: None,
            labels: Default::default(),
            allow_root: false,
            approvals: Default::default(),
            owner_id: "admin".into(),
            owner_name: "admin".into(),
            warm: false,
            access: Default::default(),
        }
    }

    /// Secrets with `GITHUB_TOKEN` set, in a fresh directory.
    async fn secrets() -> (tempfile::TempDir, Arc<Secrets>) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&dir.path().join("db"))
            .await
            .unwrap();
        let s = Secrets::open(store, &dir.path().join("key")).await.unwrap();
        s.put(
            "GITHUB_TOKEN",
            crate::secrets::NewSecret {
                value: "ghp_the_value".into(),
                hosts: vec!["api.github.com".parse().unwrap()],
                header: None,
                format: None,
                in_body: false,
            },
        )
        .await
        .unwrap();
        (dir, Arc::new(s))
    }

    #[tokio::test]
    async fn the_agents_env_goes_under_the_commands_own_with_its_placeholders() {
        let (_dir, s) = secrets().await;
        let a = agent(
            &[("A", "agent"), ("B", "agent"), ("GITHUB_TOKEN", "plain")],
            &["GITHUB_TOKEN", "GONE"],
        );
        let boot = BootEnv::new(s.clone(), &a.id, Some("boot1".into()));
        let launch = Launch::new(run(&[("B", "own"), ("C", "own")]), &a).unwrap();
        let env = launch.into_request(&boot).env;
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (&**k, &**v)).collect();
        let placeholder = s.placeholder("agent1", "boot1", "GITHUB_TOKEN");
        // One entry per name: the command's own value where both name it; the placeholder over
        // the agent's variable of that name; none for a secret that is gone.
        assert_eq!(
            pairs,
            [
                ("A", "agent"),
                ("GITHUB_TOKEN", &*placeholder),
                ("B", "own"),
                ("C", "own")
            ]
        );
        assert!(!format!("{env:?}").contains("ghp_the_value"));
        // No boot known: no placeholders (nothing runs).
        let none = BootEnv::new(s, &a.id, None).launch_env(&a);
        assert_eq!(none["GITHUB_TOKEN"], "plain");
    }

    #[test]
    fn the_agents_env_counts_towards_the_size_limit() {
        let big = "x".repeat(100 * 1024);
        let mut a = agent(&[], &[]);
        a.env = (0..12).map(|i| (format!("V{i}"), big.clone())).collect();
        let err = Launch::new(run(&[]), &a).unwrap_err();
        assert!(
            matches!(err, CommandError::TooLarge(ExecTooLarge::Total(_))),
            "{err}"
        );
        assert_eq!(err.field(), "command");
    }

    #[test]
    fn a_command_is_checked_before_anything_is_sent() {
        let no_program = check_command(&[String::new()], None, None, None).unwrap_err();
        assert_eq!(no_program.field(), "command");
        let env: BTreeMap<String, String> = [("A=B".to_string(), "x".to_string())].into();
        let bad_env = check_command(&["sh".into()], None, Some(&env), None).unwrap_err();
        assert_eq!(bad_env.field(), "env");
        assert_eq!(
            bad_env.to_string(),
            crate::agents::env::message(&crate::agents::env::check(&env).unwrap_err())
        );
        assert!(check_process(Some(0), None, 0).is_err());
        assert!(check_process(Some(MAX_PROCESS_TIMEOUT_MS), Some("web"), 3).is_ok());
        assert_eq!(
            check_process(None, Some("-x"), 0).unwrap_err().field(),
            "tag"
        );
    }
}

//! The preset's setup script: run once as a background process (tag `setup`) when an agent's
//! sandbox first says hello, again after a rebuild when the preset says so, or on request. Its
//! outcome is recorded on the agent; a failed setup leaves the agent running.

use std::sync::Arc;
use std::time::Duration;

use agenthold_proto::process::ProcessState;
use agenthold_proto::{ErrorCode, ExecRequest, ProcessInfo};

use super::{Lifecycle, LifecycleError};
use crate::launch::{Launch, ProcessOptions};
use crate::model::{Agent, SetupState, SetupStatus};
use crate::tunnel::conn::{ConnError, ProcessName};

/// The tag the setup process runs under; its output is `processes/setup/output`.
pub const SETUP_TAG: &str = "setup";
/// How long one wait for the script's end lasts before it is asked again.
const WAIT_SLICE: Duration = Duration::from_secs(600);

impl Lifecycle {
    /// The setup script of the agent's preset, if it has one (a preset removed from the config
    /// since the agent was made has none).
    pub fn setup_script(&self, agent: &Agent) -> Option<String> {
        let config = self.config();
        let preset = config.presets.get(agent.preset.as_deref()?)?;
        preset.setup.clone()
    }

    /// Whether a rebuild should run the setup script again.
    pub(super) fn setup_on_rebuild(&self, agent: &Agent) -> bool {
        let config = self.config();
        agent
            .preset
            .as_deref()
            .and_then(|p| config.presets.get(p))
            .is_some_and(|p| p.setup_on_rebuild && p.setup.is_some())
    }

    /// sandboxd said hello: runs a setup that has not run yet, or follows one that was running
    /// when the server (or its tunnel) went away.
    pub(super) fn setup_after_hello(self: &Arc<Self>, id: &str) {
        let (lc, id) = (self.clone(), id.to_string());
        tokio::spawn(async move {
            let Ok(agent) = lc.store.get_agent(&id).await else {
                return;
            };
            if lc.setup_script(&agent).is_none() {
                return;
            }
            match agent.setup {
                None => {
                    let _ = lc.start_setup(&id).await;
                }
                Some(SetupStatus {
                    state: SetupState::Running,
                    process_id: Some(pid),
                    ..
                }) => {
                    if lc.setup_watched(&id, &pid, true) {
                        lc.follow_setup(&id, &pid).await;
                    }
                }
                Some(_) => {}
            }
        });
    }

    /// Runs the setup script now (`POST …/setup`): `Conflict` when the agent has none or it
    /// is running.
    pub async fn rerun_setup(self: &Arc<Self>, id: &str) -> Result<Agent, LifecycleError> {
        let agent = self.get(id).await?;
        if self.setup_script(&agent).is_none() {
            return Err(LifecycleError::Refused(format!(
                "agent {id} has no setup script (its preset has none)"
            )));
        }
        if let Some(SetupStatus {
            state: SetupState::Running,
            process_id,
            ..
        }) = &agent.setup
        {
            // Nobody follows it (its follower lost the tunnel's stream while the tunnel stayed
            // up): follow it again, so that its end is recorded and a rerun is possible then.
            if let Some(pid) = process_id {
                if self.setup_watched(id, pid, true) {
                    let (lc, id, pid) = (self.clone(), id.to_string(), pid.clone());
                    tokio::spawn(async move { lc.follow_setup(&id, &pid).await });
                }
            }
            return Err(LifecycleError::Refused(format!(
                "agent {id}'s setup script is running; wait for it to end"
            )));
        }
        self.start_setup(id).await?;
        self.get(id).await
    }

    /// Starts the script as a background process and follows it in the background. A start
    /// that fails is recorded as a failed setup.
    async fn start_setup(self: &Arc<Self>, id: &str) -> Result<(), LifecycleError> {
        let conn = self.wake_conn(id).await?;
        let _starting = self.setup_start.lock().await;
        let agent = self.get(id).await?;
        let Some(script) = self.setup_script(&agent) else {
            return Ok(());
        };
        if agent
            .setup
            .as_ref()
            .is_some_and(|s| s.state == SetupState::Running)
        {
            // Started a moment ago by the hello or a request that got here first.
            return Ok(());
        }
        let run = ExecRequest {
            command: vec!["/bin/sh".into(), "-c".into(), script],
            ..ExecRequest::default()
        };
        let options = ProcessOptions {
            tag: Some(SETUP_TAG.into()),
            stdin: false,
            // A setup that installs for a while must not be put to sleep halfway.
            keep_awake: true,
        };
        let started: Result<ProcessInfo, String> = match Launch::new(run, &agent) {
            Ok(launch) => conn
                .start_process(launch, options)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match started {
            Ok(info) => {
                self.record_setup(id, status_of(id, &info)).await;
                if info.state.is_running() && self.setup_watched(id, &info.id, true) {
                    let (lc, id) = (self.clone(), id.to_string());
                    tokio::spawn(async move { lc.follow_setup(&id, &info.id).await });
                }
            }
            Err(why) => {
                let status = SetupStatus {
                    state: SetupState::Failed,
                    exit_code: None,
                    process_id: None,
                    error: Some(format!("the setup script could not be started: {why}")),
                };
                self.record_setup(id, status).await;
            }
        }
        Ok(())
    }

    /// Waits for the setup process to end and records how; a sandbox that went away before
    /// that leaves the record for the next hello to settle.
    async fn follow_setup(self: &Arc<Self>, id: &str, pid: &str) {
        match ProcessName::parse(pid.to_string()) {
            Ok(name) => self.wait_for_setup(id, &name).await,
            Err(e) => tracing::debug!(agent = id, "the setup's process is not followed: {e}"),
        }
        self.setup_watched(id, pid, false);
    }

    /// Waits, while the sandbox stays connected, for the setup process `name` to end, and
    /// records how.
    async fn wait_for_setup(self: &Arc<Self>, id: &str, name: &ProcessName) {
        while let Some(conn) = self.conn(id) {
            match conn.wait(name, WAIT_SLICE).await {
                Ok(info) if info.state.is_running() => continue,
                Ok(info) => {
                    self.record_setup(id, status_of(id, &info)).await;
                    return;
                }
                // sandboxd no longer knows it: the sandbox restarted while it ran.
                Err(ConnError::Refused(c)) if c.code == ErrorCode::NotFound => {
                    let status = SetupStatus {
                        state: SetupState::Failed,
                        exit_code: None,
                        process_id: Some(name.as_str().to_string()),
                        error: Some(format!(
                            "the sandbox stopped while the setup script ran ({}); run it \
                             again with POST /api/v1/agents/{id}/setup",
                            c.message
                        )),
                    };
                    self.record_setup(id, status).await;
                    return;
                }
                Err(why) => {
                    tracing::debug!(agent = id, "following the setup script stopped: {why}");
                    return;
                }
            }
        }
    }

    async fn record_setup(&self, id: &str, status: SetupStatus) {
        if let Some(why) = &status.error {
            tracing::warn!(agent = id, "setup: {why}");
        }
        if let Err(e) = self.store.set_setup(id, Some(&status)).await {
            tracing::debug!(agent = id, "setup state not recorded: {e}");
            return;
        }
        if let Ok(agent) = self.store.get_agent(id).await {
            self.publish(&agent);
        }
    }

    /// Marks (`true`) or unmarks one setup run (the agent and its process) as followed by a
    /// task; marking answers whether it was not already. Keyed by the run, so that a rerun
    /// starting while the last run's follower finishes gets a follower of its own.
    fn setup_watched(&self, id: &str, pid: &str, on: bool) -> bool {
        let mut set = self
            .setup_followers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (id.to_string(), pid.to_string());
        if on {
            set.insert(key)
        } else {
            set.remove(&key)
        }
    }
}

/// The setup status of agent `id` that `info`, its script's process, stands for.
fn status_of(id: &str, info: &ProcessInfo) -> SetupStatus {
    let (state, error) = match info.state {
        ProcessState::Running => (SetupState::Running, None),
        ProcessState::Exited if info.exit_code == Some(0) => (SetupState::Done, None),
        ProcessState::Exited => (
            SetupState::Failed,
            Some(format!(
                "the setup script exited with {}; its output is at \
                 processes/{SETUP_TAG}/output",
                info.exit_code.unwrap_or(-1)
            )),
        ),
        ProcessState::Killed => (
            SetupState::Failed,
            Some(format!(
                "the setup script was killed (SIG{})",
                info.signal.as_deref().unwrap_or("?")
            )),
        ),
        ProcessState::Lost => (
            SetupState::Failed,
            Some(format!(
                "the sandbox stopped while the setup script ran; run it again with POST \
                 /api/v1/agents/{id}/setup"
            )),
        ),
    };
    SetupStatus {
        state,
        exit_code: info.exit_code,
        process_id: Some(info.id.clone()),
        error,
    }
}

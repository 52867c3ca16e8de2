//! Reading the config file again while the server runs (on `SIGHUP`, and on
//! `POST /api/v1/admin/reload`): the file is checked whole, as a start would check it; what can
//! change at runtime is put in force for whatever reads the config next (new agents, requests,
//! the egress proxy's next decision, the log), running agents are left as they are, and the
//! keys only a restart can change are named and kept (see [`super::restart`]). An invalid file
//! changes nothing.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use super::restart::{self, Plan};
use super::{Config, ConfigError};
use crate::logging::LogFilter;

/// Where a server's config comes from, so that it can be read again.
pub struct ConfigSource {
    /// The file given with `--config`; `None` for a server on the defaults, which has nothing
    /// to read again.
    pub path: Option<PathBuf>,
    /// The log's filter, which `server.log_level` sets.
    pub log: LogFilter,
}

impl ConfigSource {
    /// A server built from a config in memory (tests): no file, and logging left alone.
    pub fn none() -> ConfigSource {
        ConfigSource {
            path: None,
            log: LogFilter::unmanaged(),
        }
    }
}

/// What a reload did, by dotted key (`presets.dev.image`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Changed, and in force now.
    pub applied: Vec<String>,
    /// Changed in the file, but kept at the running value until a restart.
    pub needs_restart: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(
        "this server was started without a config file (--config), so there is none to read \
         again"
    )]
    NoFile,
    /// The file cannot be read or is not a valid config; the message names the file and key.
    #[error("{0}")]
    Invalid(#[from] ConfigError),
}

/// Replaces the config in force (the one `watch` that everything reads) with the file's.
pub struct Reloader {
    source: ConfigSource,
    config: watch::Sender<Arc<Config>>,
    /// Why the driver cannot limit homes, if it cannot; a file may then not give new agents a
    /// default limit (a start would refuse it too).
    no_disk_limits: Option<String>,
    /// One reload at a time, so that each compares the file with what the one before put in
    /// force.
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl Reloader {
    pub fn new(
        source: ConfigSource,
        config: watch::Sender<Arc<Config>>,
        no_disk_limits: Option<String>,
    ) -> Reloader {
        Reloader {
            source,
            config,
            no_disk_limits,
            one_at_a_time: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads the file again and puts in force what can change at runtime; says in the log what
    /// changed, what needs a restart, or why the file was refused.
    pub async fn reload(&self) -> Result<Reloaded, ReloadError> {
        let _turn = self.one_at_a_time.lock().await;
        let outcome = self.read_and_apply().await;
        let file = self
            .source
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        match &outcome {
            Ok(done) => log_reloaded(&file, done),
            Err(ReloadError::Invalid(e)) => tracing::error!(
                key = e.key(),
                "config reload refused; the server keeps its config: {e}"
            ),
            Err(e) => tracing::warn!("config reload refused: {e}"),
        }
        outcome
    }

    async fn read_and_apply(&self) -> Result<Reloaded, ReloadError> {
        let path = self.source.path.as_deref().ok_or(ReloadError::NoFile)?;
        let file = path.display().to_string();
        let yaml = tokio::fs::read_to_string(path)
            .await
            .map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        let new = Config::from_yaml_str(&yaml, &file, |k| std::env::var(k).ok())?;
        let old = self.config.borrow().clone();
        let Plan {
            config,
            applied,
            needs_restart,
        } = restart::plan(&old, new);
        self.check(&config, &file)?;
        if config.server.log_level != old.server.log_level {
            self.source
                .log
                .set(&config.server.log_level)
                .map_err(|problem| ConfigError::Invalid {
                    file: file.clone(),
                    key: "server.log_level".to_string(),
                    problem,
                })?;
        }
        self.config.send_replace(Arc::new(config));
        Ok(Reloaded {
            applied,
            needs_restart,
        })
    }

    /// What is put in force must hold together with the settings kept from the start, and
    /// fit what the driver can do.
    fn check(&self, config: &Config, file: &str) -> Result<(), ConfigError> {
        config.validate(file)?;
        if let Some(why) = &self.no_disk_limits {
            if config.sandbox.default_disk_mb > 0 {
                return Err(ConfigError::Invalid {
                    file: file.to_string(),
                    key: "sandbox.default_disk_mb".to_string(),
                    problem: format!(
                        "({}) would give new agents a disk limit, but {why}; set it to 0",
                        config.sandbox.default_disk_mb
                    ),
                });
            }
        }
        Ok(())
    }
}

fn log_reloaded(file: &str, done: &Reloaded) {
    if done.applied.is_empty() && done.needs_restart.is_empty() {
        tracing::info!("config reloaded from {file}: nothing changed");
    }
    if !done.applied.is_empty() {
        tracing::info!(
            "config reloaded from {file}; in force now: {}",
            done.applied.join(", ")
        );
    }
    if !done.needs_restart.is_empty() {
        tracing::warn!(
            "config reload: these keys changed in {file} but take effect only at a restart, \
             so the server keeps their running values until then: {}",
            done.needs_restart.join(", ")
        );
    }
}

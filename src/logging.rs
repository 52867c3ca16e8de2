//! The server's log: `tracing` events to stderr under a filter (`server.log_level`, or
//! `AGENTHOLD_LOG`) that a config reload changes in place through `tracing_subscriber::reload`.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter, Registry};

/// The filter of this process's log, for a reload to change; or none, for a server inside a
/// process that set up its own logging (the tests'), whose level a reload leaves alone.
#[derive(Clone)]
pub struct LogFilter(Option<reload::Handle<EnvFilter, Registry>>);

impl LogFilter {
    /// Sends this process's log to stderr under `filter`, which the config's load has checked
    /// (were it not to parse, the log would fall back to `info`).
    pub fn install(filter: &str) -> LogFilter {
        let parsed = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
        let (layer, handle) = reload::Layer::new(parsed);
        tracing_subscriber::registry()
            .with(layer)
            .with(fmt::layer().with_writer(std::io::stderr))
            .init();
        LogFilter(Some(handle))
    }

    /// For a server whose process logs as it chose itself.
    pub fn unmanaged() -> LogFilter {
        LogFilter(None)
    }

    /// Filters the log by `filter` from now on.
    pub fn set(&self, filter: &str) -> Result<(), String> {
        let Some(handle) = &self.0 else {
            return Ok(());
        };
        let parsed = EnvFilter::try_new(filter).map_err(|e| e.to_string())?;
        handle.reload(parsed).map_err(|e| e.to_string())
    }
}

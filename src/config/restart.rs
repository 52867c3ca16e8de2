//! Which settings a running server took once, at its start, and keeps until it restarts: its
//! listeners with their caps and timeouts, its data directory and credentials, the driver and
//! everything the driver read, the runtimes it settled with the engine, and the egress proxy's
//! own settings. Everything else (presets, the egress default, the limits and defaults of new
//! agents, exec's and the file API's limits, terminal and process settings, idle times, the
//! log level) is read anew at each use and changes with a reload.

use super::diff::changed_keys;
use super::Config;

/// What a reload of `old` to a new file puts in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The new config, with the settings that need a restart kept at their running values.
    pub config: Config,
    /// The keys whose new values are in force with [`Plan::config`].
    pub applied: Vec<String>,
    /// The keys the file changed that only a restart puts in force.
    pub needs_restart: Vec<String>,
}

/// How `new` can replace the running `old`.
pub fn plan(old: &Config, new: Config) -> Plan {
    let mut config = new.clone();
    keep_start_settings(&mut config, old);
    Plan {
        applied: changed_keys(old, &config),
        needs_restart: changed_keys(&config, &new),
        config,
    }
}

/// Puts back into `new` every setting the running server holds from its start (`old`).
fn keep_start_settings(new: &mut Config, old: &Config) {
    let (n, o) = (&mut new.server, &old.server);
    // The API listener, its caps and header timeout (which the tunnel's listener shares).
    n.listen = o.listen;
    n.max_connections = o.max_connections;
    n.max_connections_per_ip = o.max_connections_per_ip;
    n.trusted_proxies.clone_from(&o.trusted_proxies);
    n.header_timeout = o.header_timeout;
    // The preview listener (its domain, scheme and cap are read at each use).
    n.previews.listen = o.previews.listen;
    // The database, and the admin token and session length the API's authentication took.
    n.data_dir.clone_from(&o.data_dir);
    n.admin_token.clone_from(&o.admin_token);
    n.session_ttl = o.session_ttl;
    n.secrets_key_file.clone_from(&o.secrets_key_file);
    // The audit log's file, opened once (the retention is read at each pruning).
    n.audit_log.clone_from(&o.audit_log);

    let (n, o) = (&mut new.sandbox, &old.sandbox);
    // The driver, and what it read when it started.
    n.driver = o.driver;
    n.docker.clone_from(&o.docker);
    n.sandboxd_path.clone_from(&o.sandboxd_path);
    n.tmp_mb = o.tmp_mb;
    n.rootfs_mb = o.rootfs_mb;
    n.pids_limit = o.pids_limit;
    n.nofile = o.nofile;
    n.ping_interval = o.ping_interval;
    // Settled with the engine's runtimes at start.
    n.runtime.clone_from(&o.runtime);
    n.allowed_runtimes.clone_from(&o.allowed_runtimes);
    // The tunnel's listener, its caps, and each agent's share of its streams.
    n.tunnel_listen = o.tunnel_listen;
    n.tunnel_max_connections = o.tunnel_max_connections;
    n.tunnel_max_connections_per_ip = o.tunnel_max_connections_per_ip;
    n.max_streams_per_agent = o.max_streams_per_agent;
    // The sleeper's clock.
    n.idle_check_interval = o.idle_check_interval;
    // The proxy's listener, resolver, caps and dialer: all of `sandbox.egress` but the rules
    // of new agents.
    let default = std::mem::take(&mut n.egress.default);
    n.egress.clone_from(&o.egress);
    n.egress.default = default;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn what_new_agents_and_requests_read_is_applied() {
        let old = Config::without_file();
        let mut new = old.clone();
        new.presets.get_mut("dev").unwrap().cpus = Some(1.0);
        new.sandbox.egress.default.allow = vec!["pypi.org".parse().unwrap()];
        new.sandbox.default_memory_mb = 2048;
        new.server.exec_max_timeout = Duration::from_secs(3600);
        new.server.log_level = "debug".into();
        new.server.audit_retention = Duration::from_secs(7 * 86400);
        let p = plan(&old, new.clone());
        assert_eq!(p.config, new);
        assert!(p.needs_restart.is_empty(), "{:?}", p.needs_restart);
        assert_eq!(
            p.applied,
            [
                "presets.dev.cpus",
                "sandbox.default_memory_mb",
                "sandbox.egress.default.allow",
                "server.audit_retention",
                "server.exec_max_timeout",
                "server.log_level",
            ]
        );
    }

    #[test]
    fn what_the_server_took_at_start_waits_for_a_restart() {
        let old = Config::without_file();
        let mut new = old.clone();
        new.server.listen = "127.0.0.1:9999".parse().unwrap();
        new.server.data_dir = "/elsewhere".into();
        new.sandbox.driver = crate::config::DriverKind::Fake;
        new.sandbox.docker.socket = "/run/other.sock".into();
        new.sandbox.egress.port = 9091;
        new.sandbox.runtime = "runsc".into();
        new.sandbox.default_cpus = 1.0;
        new.server.audit_log = Some("/var/log/agenthold-audit.jsonl".into());
        let p = plan(&old, new);
        assert_eq!(p.applied, ["sandbox.default_cpus"]);
        assert_eq!(
            p.needs_restart,
            [
                "sandbox.docker.socket",
                "sandbox.driver",
                "sandbox.egress.port",
                "sandbox.runtime",
                "server.audit_log",
                "server.data_dir",
                "server.listen",
            ]
        );
        assert_eq!(p.config.server.listen, old.server.listen);
        assert_eq!(p.config.sandbox.egress.port, 8091);
        assert_eq!(p.config.sandbox.default_cpus, 1.0);
    }
}

//! Loading and checking the config file: defaults, every key's bad values, the messages.

use std::time::Duration;

use ipnet::IpNet;

use super::*;
use crate::egress::SecretGuard;

fn no_env(_: &str) -> Option<String> {
    None
}

fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_yaml_str(yaml, "config.yaml", no_env)
}

fn err(yaml: &str) -> String {
    match load(yaml) {
        Ok(c) => panic!("expected an error for {yaml:?}, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_and_comment_only_files_are_all_defaults() {
    assert_eq!(load("").unwrap(), Config::default());
    assert_eq!(load("# nothing here\n").unwrap(), Config::default());
    assert_eq!(load("server:\nsandbox:\n").unwrap(), Config::default());
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = Config::default();
    assert_eq!(c.server.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(c.server.data_dir, PathBuf::from("./data"));
    assert_eq!(c.server.admin_token, None);
    assert_eq!(c.server.max_file_mb, 4096);
    assert_eq!(c.server.exec_output_cap_kb, 1024);
    assert_eq!(c.server.exec_default_timeout, Duration::from_secs(600));
    assert_eq!(c.server.exec_max_timeout, Duration::from_secs(86400));
    assert_eq!(c.server.session_ttl, Duration::from_secs(30 * 86400));
    assert_eq!(c.server.public_url, None);
    assert!(c.server.trusted_proxies.is_empty());
    assert_eq!(c.sandbox.driver, DriverKind::Docker);
    assert_eq!(c.sandbox.default_image, "debian:bookworm-slim");
    assert_eq!(c.sandbox.default_cpus, 2.0);
    assert_eq!(c.sandbox.default_memory_mb, 4096);
    assert_eq!(c.sandbox.default_idle_minutes, 15);
    assert_eq!(c.sandbox.max_cpus, 8.0);
    assert_eq!(c.sandbox.max_memory_mb, 16384);
    assert_eq!(c.sandbox.pids_limit, 4096);
    assert_eq!(c.sandbox.tunnel_listen, "0.0.0.0:8090".parse().unwrap());
    assert_eq!(c.sandbox.idle_check_interval, Duration::from_secs(30));
    assert_eq!(c.sandbox.idle_minute, Duration::from_secs(60));
    assert_eq!(c.sandbox.sandboxd_path, None);
    assert_eq!(c.sandbox.ping_interval, Duration::from_secs(15));
    assert_eq!(c.sandbox.max_streams_per_agent, 128);
    let d = &c.sandbox.docker;
    assert_eq!(d.name_prefix, "agenthold");
    assert_eq!(d.network_pool, "10.213.0.0/16".parse().unwrap());
    assert_eq!(d.subnet_bits, 28);
    assert_eq!(c.sandbox.runtime(), None);
    assert_eq!(c.sandbox.allowed_runtimes, None);
    assert_eq!(c.server.log_level, "info");
    assert_eq!(d.server_container(), None);
    assert_eq!(d.socket(), None);
    assert_eq!(d.sandboxd_volume_name(), "agenthold-sandboxd");
    assert!(d.no_new_privileges);
    assert_eq!(
        d.cap_drop,
        [
            "NET_RAW",
            "MKNOD",
            "AUDIT_WRITE",
            "SYS_CHROOT",
            "SETFCAP",
            "NET_BIND_SERVICE"
        ]
    );
    assert!(d.host_mounts.is_empty());
    assert_eq!(c.database_path(), PathBuf::from("./data/agenthold.db"));
    assert!(c.warnings().is_empty());
    // The defaults pass their own validation.
    c.validate("defaults").unwrap();
}

#[test]
fn example_file_loads_and_equals_a_server_without_a_file() {
    let c = Config::from_yaml_str(
        include_str!("../../config.example.yaml"),
        "config.example.yaml",
        no_env,
    )
    .unwrap();
    assert_eq!(c, Config::without_file());
}

#[test]
fn the_seed_block_loads() {
    let c = load(
        "sandbox:
  driver: docker            # or \"fake\" for development without Docker
  default_image: debian:bookworm-slim
  default_cpus: 2
  default_memory_mb: 4096
  max_cpus: 8
  max_memory_mb: 16384
  pids_limit: 4096
  docker:
    name_prefix: agenthold  # change to run several installations on one host
    network_pool: 10.213.0.0/16
    subnet_bits: 28         # 14 usable addresses per agent
    runtime: \"\"             # e.g. sysbox-runc or runsc
    server_container: \"\"    # autodetected
",
    )
    .unwrap();
    assert_eq!(c, Config::default());
}

#[test]
fn values_are_read() {
    let c = load(
        "server:
  listen: 0.0.0.0:9000
  data_dir: /var/lib/agenthold
  admin_token: s3cret-s3cret-s3cret
  exec_default_timeout: 1m
  public_url: https://Agents.example.com/
  trusted_proxies: [10.0.0.2, 172.18.0.0/16, \"::1\"]
sandbox:
  driver: fake
  default_cpus: 0.5
  pids_limit: -1
  tunnel_listen: 127.0.0.1:8091
  egress:
    port: 8092
    default: {allow: [pypi.org, '*.pythonhosted.org:443'], deny: [10.0.0.0/8]}
    upstream_proxy: http://proxy.corp.example:3128
    resolve: {pypi.test: 127.0.0.1, v6.test: '::1'}
    max_connections: 8
    header_timeout: 2s
  idle_check_interval: 1s
  idle_minute: 2s
  sandboxd_path: /opt/sandboxd
  runtime: runsc
  allowed_runtimes: [runc, runsc]
  docker:
    name_prefix: ah-test
    sandboxd_volume: sbd
    cap_drop: []
    host_mounts: ['/srv/cache:/cache:ro', '/srv/x:/x']
",
    )
    .unwrap();
    assert_eq!(c.server.listen, "0.0.0.0:9000".parse().unwrap());
    assert_eq!(
        c.database_path(),
        PathBuf::from("/var/lib/agenthold/agenthold.db")
    );
    assert_eq!(
        c.server.admin_token.as_deref(),
        Some("s3cret-s3cret-s3cret")
    );
    assert_eq!(c.server.exec_default_timeout, Duration::from_secs(60));
    let public = c.server.public_url.as_ref().unwrap();
    assert_eq!(public.to_string(), "https://agents.example.com");
    assert!(public.is_https());
    assert_eq!(
        c.server.trusted_proxies,
        vec![
            "10.0.0.2/32".parse::<IpNet>().unwrap(),
            "172.18.0.0/16".parse().unwrap(),
            "::1/128".parse().unwrap(),
        ]
    );
    assert_eq!(c.sandbox.driver, DriverKind::Fake);
    assert_eq!(c.sandbox.default_cpus, 0.5);
    assert_eq!(c.sandbox.pids_limit, -1);
    assert_eq!(c.sandbox.idle_check_interval, Duration::from_secs(1));
    assert_eq!(c.sandbox.idle_minute, Duration::from_secs(2));
    assert_eq!(c.sandbox.tunnel_listen, "127.0.0.1:8091".parse().unwrap());
    let e = &c.sandbox.egress;
    assert_eq!(e.port, 8092);
    assert_eq!(
        serde_json::to_value(&e.default).unwrap(),
        serde_json::json!({"allow": ["pypi.org", "*.pythonhosted.org:443"], "deny": ["10.0.0.0/8"]})
    );
    assert_eq!(
        e.upstream_proxy
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("proxy.corp.example:3128")
    );
    assert_eq!(
        e.resolve["v6.test"],
        "::1".parse::<std::net::IpAddr>().unwrap()
    );
    assert_eq!(e.max_connections, 8);
    assert_eq!(e.header_timeout, Duration::from_secs(2));
    assert_eq!(
        c.sandbox.sandboxd_path,
        Some(PathBuf::from("/opt/sandboxd"))
    );
    assert_eq!(c.sandbox.runtime(), Some("runsc"));
    assert_eq!(
        c.sandbox.allowed_runtimes,
        Some(vec!["runc".to_string(), "runsc".to_string()])
    );
    assert_eq!(c.sandbox.docker.sandboxd_volume_name(), "sbd");
    assert!(c.sandbox.docker.cap_drop.is_empty());
    assert_eq!(
        c.sandbox.docker.parsed_host_mounts().unwrap(),
        vec![
            HostMount {
                host: "/srv/cache".into(),
                container: "/cache".into(),
                read_only: true
            },
            HostMount {
                host: "/srv/x".into(),
                container: "/x".into(),
                read_only: false
            },
        ]
    );
    // Untouched keys keep their defaults.
    assert_eq!(c.sandbox.max_cpus, 8.0);
    assert_eq!(c.sandbox.docker.subnet_bits, 28);
}

#[test]
fn egress_settings_are_checked_and_named() {
    for (yaml, says) in [
        (
            "sandbox:\n  egress:\n    default: {allow: ['py pi.org']}\n",
            "sandbox.egress.default",
        ),
        (
            "sandbox:\n  egress:\n    default: {allow: ['py pi.org']}\n",
            "is not an egress rule",
        ),
        (
            "sandbox:\n  egress:\n    default: {alow: []}\n",
            "unknown field `alow`",
        ),
        (
            "sandbox:\n  egress:\n    upstream_proxy: proxy:3128\n",
            "sandbox.egress.upstream_proxy",
        ),
        (
            "sandbox:\n  egress:\n    upstream_proxy: http://user:pw@proxy:3128\n",
            "is not a proxy address",
        ),
        (
            "sandbox:\n  egress:\n    resolve: {Pypi.Test: 127.0.0.1}\n",
            "sandbox.egress.resolve names \"Pypi.Test\", which is not a host name in lowercase",
        ),
        (
            "sandbox:\n  egress:\n    resolve: {pypi.test: nowhere}\n",
            "sandbox.egress.resolve",
        ),
        (
            "sandbox:\n  tunnel_listen: :9000\n  egress:\n    port: 9000\n",
            "sandbox.egress.port (9000) is the tunnel's port too",
        ),
        (
            "sandbox:\n  egress:\n    max_connections: 0\n",
            "sandbox.egress.max_connections must be at least 1",
        ),
    ] {
        let e = err(yaml);
        assert!(e.contains(says), "{yaml}: {e}");
    }
    let c = load("sandbox:\n  egress:\n    upstream_proxy: \"\"\n").unwrap();
    assert_eq!(c.sandbox.egress.upstream_proxy, None);
}

#[test]
fn ca_certificates_must_be_a_file_of_certificates_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let cert = "-----BEGIN CERTIFICATE-----\nMIIBAA==\n-----END CERTIFICATE-----\n";
    let key = "-----BEGIN PRIVATE KEY-----\nMIIBAA==\n-----END PRIVATE KEY-----\n";
    let yaml = |path: &str| format!("sandbox:\n  egress:\n    ca_certificates: {path}\n");
    let missing = dir.path().join("missing.pem").display().to_string();
    for (path, says) in [
        (missing, "cannot read"),
        (file("empty.pem", "just words\n"), "holds no certificate"),
        (
            file("key.pem", &format!("{cert}{key}")),
            "holds a PrivateKey besides certificates",
        ),
        (
            file("broken.pem", "-----BEGIN CERTIFICATE-----\n!!\n"),
            "is not PEM text",
        ),
        (
            file("huge.pem", &cert.repeat(20_000)),
            "at most 1048576 bytes",
        ),
    ] {
        let e = err(&yaml(&path));
        assert!(
            e.contains("sandbox.egress.ca_certificates") && e.contains(says),
            "{path}: {e}"
        );
    }
    // Text around the certificates (a bundle's comments) is allowed, and kept as written.
    let text = format!("# Corporate root\n{cert}");
    let c = load(&yaml(&file("corp.pem", &text))).unwrap();
    assert_eq!(c.sandbox.egress.read_ca_certificates().unwrap(), Some(text));
    assert_eq!(
        load("{}")
            .unwrap()
            .sandbox
            .egress
            .read_ca_certificates()
            .unwrap(),
        None
    );
}

#[test]
fn port_only_listen_means_every_address() {
    for yaml in [
        "sandbox:\n  tunnel_listen: \":8090\"\n",
        "sandbox:\n  tunnel_listen: :8090\n",
    ] {
        assert_eq!(
            load(yaml).unwrap().sandbox.tunnel_listen,
            "0.0.0.0:8090".parse().unwrap(),
            "{yaml}"
        );
    }
    assert_eq!(
        load("server:\n  listen: \"[::1]:8080\"\n")
            .unwrap()
            .server
            .listen,
        "[::1]:8080".parse().unwrap()
    );
    let e = err("sandbox:\n  tunnel_listen: localhost:8090\n");
    assert!(e.contains("config.yaml: sandbox.tunnel_listen: "), "{e}");
    assert!(e.contains("not an address"), "{e}");
    let e = err("sandbox:\n  tunnel_listen: \":99999\"\n");
    assert!(e.contains("sandbox.tunnel_listen"), "{e}");
}

#[test]
fn unknown_keys_are_refused_at_every_level() {
    let e = err("serverr:\n  listen: 127.0.0.1:1\n");
    assert!(e.starts_with("config.yaml: "), "{e}");
    assert!(e.contains("unknown field `serverr`"), "{e}");

    let e = err("server:\n  port: 80\n");
    assert!(
        e.contains("config.yaml: server: unknown field `port`"),
        "{e}"
    );

    let e = err("sandbox:\n  docker:\n    name_prefx: x\n");
    assert!(
        e.contains("config.yaml: sandbox.docker: unknown field `name_prefx`"),
        "{e}"
    );
    assert!(e.contains("line 3"), "{e}");
}

#[test]
fn wrong_types_name_the_key() {
    let e = err("sandbox:\n  default_cpus: two\n");
    assert!(
        e.contains("config.yaml: sandbox.default_cpus: invalid type"),
        "{e}"
    );
    let e = err("sandbox:\n  max_memory_mb: -5\n");
    assert!(e.contains("sandbox.max_memory_mb"), "{e}");
    let e = err("sandbox:\n  driver: podman\n");
    assert!(
        e.contains("sandbox.driver: unknown variant `podman`"),
        "{e}"
    );
    let e = err("sandbox:\n  egress:\n    secret_guard: everywhere\n");
    assert!(
        e.contains(
            "sandbox.egress.secret_guard: unknown variant `everywhere`, expected `hosts` or `all`"
        ),
        "{e}"
    );
    let ok = |yaml: &str| load(yaml).unwrap().sandbox.egress.secret_guard;
    assert_eq!(
        ok("sandbox:\n  egress:\n    secret_guard: all\n"),
        SecretGuard::All
    );
    assert_eq!(ok("{}\n"), SecretGuard::Hosts, "the default");
    for n in ["0", "4097"] {
        let e = err(&format!(
            "sandbox:\n  egress:\n    secret_body_budget_mb: {n}\n"
        ));
        assert!(
            e.contains("sandbox.egress.secret_body_budget_mb") && e.contains("must be 1 to 4096"),
            "{e}"
        );
    }
    let e = err("sandbox:\n  egress:\n    secret_body_timeout: 500ms\n");
    assert!(
        e.contains("sandbox.egress.secret_body_timeout (500ms) must be at least 1s"),
        "{e}"
    );
    assert_eq!(
        load("{}\n").unwrap().sandbox.egress.secret_body_timeout,
        Duration::from_secs(30),
        "the default"
    );
    let e = err("sandbox:\n  docker:\n    network_pool: 10.213.0.0\n");
    assert!(
        e.contains("sandbox.docker.network_pool: \"10.213.0.0\" is not an IPv4 network"),
        "{e}"
    );
    let e = err("sandbox:\n  docker:\n    network_pool: fd00::/8\n");
    assert!(e.contains("is not an IPv4 network"), "{e}");
    let e = err("sandbox:\n  docker:\n    cap_drop: NET_RAW\n");
    assert!(e.contains("sandbox.docker.cap_drop"), "{e}");
    let e = err("server:\n  public_url: https://agents.example.com/ui\n");
    assert!(
        e.contains("server.public_url: \"https://agents.example.com/ui\" is not an http(s) origin"),
        "{e}"
    );
    assert!(e.contains("line 2"), "{e}");
    let e = err("server:\n  public_url: agents.example.com\n");
    assert!(e.contains("server.public_url: "), "{e}");
    assert_eq!(
        load("server:\n  public_url: \"\"\n")
            .unwrap()
            .server
            .public_url,
        None
    );
    let e = err("server:\n  trusted_proxies: [10.0.0.2, proxy.local]\n");
    assert!(
        e.contains("server.trusted_proxies[1]: \"proxy.local\" is not an IP address"),
        "{e}"
    );
    let e = err("server:\n  trusted_proxies: [10.0.0.2/8]\n");
    assert!(e.contains("did you mean 10.0.0.0/8?"), "{e}");
    let e = err("server:\n  trusted_proxies: 10.0.0.2\n");
    assert!(e.contains("server.trusted_proxies"), "{e}");
    let e = err("sandbox: [1, 2]\n");
    assert!(e.contains("config.yaml: sandbox: invalid type"), "{e}");
    let e = err("server:\n  listen: [\n");
    assert!(e.starts_with("config.yaml: "), "{e}");
}

#[test]
fn durations_need_a_unit() {
    let e = err("sandbox:\n  idle_check_interval: 30\n");
    assert!(
        e.contains("sandbox.idle_check_interval: 30 has no unit"),
        "{e}"
    );
    let e = err("sandbox:\n  ping_interval: soon\n");
    assert!(
        e.contains("sandbox.ping_interval: \"soon\" is not a duration"),
        "{e}"
    );
    assert_eq!(
        load("sandbox:\n  idle_check_interval: 2m 30s\n")
            .unwrap()
            .sandbox
            .idle_check_interval,
        Duration::from_secs(150)
    );
}

#[test]
fn impossible_values_are_refused_with_one_message() {
    let cases: &[(&str, &str)] = &[
        (
            "sandbox:\n  warm_max: 10000\n",
            "config.yaml: sandbox.warm_max (10000) must be at most 1000: each entry is a started sandbox holding its memory and disk",
        ),
        (
            "presets:\n  p:\n    warm: 10000\n",
            "config.yaml: presets.p.warm (10000) must be at most sandbox.warm_max (16), which all pools share",
        ),
        (
            "sandbox:\n  default_cpus: 16\n",
            "config.yaml: sandbox.default_cpus (16) is above sandbox.max_cpus (8)",
        ),
        (
            "sandbox:\n  default_cpus: 0\n",
            "config.yaml: sandbox.default_cpus (0) must be a number above 0",
        ),
        (
            "sandbox:\n  max_cpus: -1\n",
            "config.yaml: sandbox.max_cpus (-1) must be a number above 0",
        ),
        (
            "sandbox:\n  max_cpus: .nan\n",
            "config.yaml: sandbox.max_cpus (NaN) must be a number above 0",
        ),
        (
            "sandbox:\n  process_output_kb: 1\n",
            "config.yaml: sandbox.process_output_kb (1) must be between 64 and 1048576 (1 GiB)",
        ),
        (
            "sandbox:\n  process_retention: 0s\n",
            "config.yaml: sandbox.process_retention (0ns) must be at least 1s: a finished process must stay long enough to be read",
        ),
        (
            "sandbox:\n  max_processes: 0\n",
            "config.yaml: sandbox.max_processes (0) must be between 1 and 1024",
        ),
        (
            "sandbox:\n  terminal_buffer_kb: 0\n",
            "config.yaml: sandbox.terminal_buffer_kb (0) must be between 1 and 262144 (256 MiB)",
        ),
        (
            "sandbox:\n  max_streams_per_agent: 0\n",
            "config.yaml: sandbox.max_streams_per_agent (0) must be between 1 and 224 (the \
             tunnel's limit of 256 streams, less 32 kept for pings and streams being closed)",
        ),
        (
            "sandbox:\n  max_streams_per_agent: 225\n",
            "config.yaml: sandbox.max_streams_per_agent (225) must be between 1 and 224 (the \
             tunnel's limit of 256 streams, less 32 kept for pings and streams being closed)",
        ),
        (
            "sandbox:\n  terminal_detach_minutes: 99999\n",
            "config.yaml: sandbox.terminal_detach_minutes (99999) must be at most 10080 (a week)",
        ),
        (
            "sandbox:\n  default_memory_mb: 8\n",
            "config.yaml: sandbox.default_memory_mb (8) must be at least 16",
        ),
        (
            "sandbox:\n  max_memory_mb: 15\n",
            "config.yaml: sandbox.max_memory_mb (15) must be at least 16",
        ),
        (
            "sandbox:\n  default_memory_mb: 20000\n",
            "config.yaml: sandbox.default_memory_mb (20000) is above sandbox.max_memory_mb (16384)",
        ),
        (
            "sandbox:\n  max_disk_mb: 63\n",
            "config.yaml: sandbox.max_disk_mb (63) must be at least 64",
        ),
        (
            "sandbox:\n  default_disk_mb: 32\n",
            "config.yaml: sandbox.default_disk_mb (32) must be 0 (no limit) or between 64 and \
             sandbox.max_disk_mb (102400)",
        ),
        (
            "sandbox:\n  default_disk_mb: 200000\n",
            "config.yaml: sandbox.default_disk_mb (200000) must be 0 (no limit) or between 64 \
             and sandbox.max_disk_mb (102400)",
        ),
        (
            "sandbox:\n  rootfs_mb: 10\n",
            "config.yaml: sandbox.rootfs_mb (10) must be 0 (no limit) or at least 64",
        ),
        (
            "sandbox:\n  default_idle_minutes: 0\n",
            "config.yaml: sandbox.default_idle_minutes must be at least 1",
        ),
        (
            "sandbox:\n  pids_limit: 10\n",
            "config.yaml: sandbox.pids_limit (10) must be at least 16, or -1 for no limit",
        ),
        (
            "sandbox:\n  pids_limit: 0\n",
            "config.yaml: sandbox.pids_limit (0) must be at least 16, or -1 for no limit",
        ),
        (
            "sandbox:\n  nofile:\n    soft: 9000\n",
            "config.yaml: sandbox.nofile (soft 9000, hard 8192) needs 64 <= soft <= hard <= 1048576",
        ),
        (
            "sandbox:\n  nofile:\n    soft: 10\n",
            "config.yaml: sandbox.nofile (soft 10, hard 8192) needs 64 <= soft <= hard <= 1048576",
        ),
        (
            "sandbox:\n  idle_check_interval: 500ms\n",
            "config.yaml: sandbox.idle_check_interval (500ms) must be at least 1s",
        ),
        (
            "sandbox:\n  idle_minute: 999ms\n",
            "config.yaml: sandbox.idle_minute (999ms) must be at least 1s",
        ),
        (
            "sandbox:\n  ping_interval: 0s\n",
            "config.yaml: sandbox.ping_interval (0s) must be at least 1s",
        ),
        (
            "sandbox:\n  tunnel_max_connections: 0\n",
            "config.yaml: sandbox.tunnel_max_connections (0) must be between 1 and 1048576",
        ),
        (
            "sandbox:\n  tunnel_max_connections_per_ip: 0\n",
            "config.yaml: sandbox.tunnel_max_connections_per_ip (0) must be between 1 and \
             sandbox.tunnel_max_connections (2048)",
        ),
        (
            "server:\n  max_connections: 100\n",
            "config.yaml: server.max_connections_per_ip (256) must be between 1 and \
             server.max_connections (100)",
        ),
        (
            "server:\n  max_connections: 2000000\n",
            "config.yaml: server.max_connections (2000000) must be between 1 and 1048576",
        ),
        (
            "server:\n  header_timeout: 100ms\n",
            "config.yaml: server.header_timeout (100ms) must be at least 1s",
        ),
        (
            "server:\n  header_timeout: 1h\n",
            "config.yaml: server.header_timeout (1h) must be at most 10m",
        ),
        (
            "server:\n  data_dir: \"\"\n",
            "config.yaml: server.data_dir is empty; name a directory",
        ),
        (
            "server:\n  max_file_mb: 0\n",
            "config.yaml: server.max_file_mb must be at least 1",
        ),
        (
            "server:\n  exec_output_cap_kb: 0\n",
            "config.yaml: server.exec_output_cap_kb must be at least 1",
        ),
        (
            "server:\n  exec_default_timeout: 2d\n",
            "config.yaml: server.exec_default_timeout (2days) is above server.exec_max_timeout (1day)",
        ),
        (
            "server:\n  session_ttl: 0s\n",
            "config.yaml: server.session_ttl (0s) must be at least 1s",
        ),
        (
            "server:\n  session_ttl: 401d\n",
            "config.yaml: server.session_ttl is longer than 400 days, the longest a browser keeps a cookie",
        ),
        (
            "server:\n  audit_retention: 30m\n",
            "config.yaml: server.audit_retention (30m) must be 0s (keep forever) or at least 1h",
        ),
        (
            "server:\n  audit_log: /nonexistent-dir-of-agenthold/audit.jsonl\n",
            "config.yaml: server.audit_log is in /nonexistent-dir-of-agenthold, which is not a directory",
        ),
        (
            "server:\n  admin_token: \"two words\"\n",
            "config.yaml: server.admin_token contains spaces",
        ),
        (
            "sandbox:\n  default_image: \" \"\n",
            "config.yaml: sandbox.default_image is empty",
        ),
        (
            "sandbox:\n  docker:\n    name_prefix: Agent_Hold\n",
            "config.yaml: sandbox.docker.name_prefix (\"Agent_Hold\") must be 1 to 32 lowercase",
        ),
        (
            "sandbox:\n  docker:\n    name_prefix: \"\"\n",
            "config.yaml: sandbox.docker.name_prefix (\"\") must be",
        ),
        (
            "sandbox:\n  docker:\n    name_prefix: -ah\n",
            "config.yaml: sandbox.docker.name_prefix (\"-ah\") must be",
        ),
        (
            "sandbox:\n  docker:\n    name_prefix: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
            "config.yaml: sandbox.docker.name_prefix (\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\") must be",
        ),
        (
            "sandbox:\n  docker:\n    network_pool: 10.213.5.0/16\n",
            "config.yaml: sandbox.docker.network_pool (10.213.5.0/16) has host bits set; did you mean 10.213.0.0/16?",
        ),
        (
            "sandbox:\n  docker:\n    subnet_bits: 30\n",
            "config.yaml: sandbox.docker.subnet_bits (30) must be above the pool's prefix length (16) and at most 29",
        ),
        (
            "sandbox:\n  docker:\n    subnet_bits: 16\n",
            "config.yaml: sandbox.docker.subnet_bits (16) must be above the pool's prefix length (16)",
        ),
        (
            "sandbox:\n  docker:\n    network_pool: 10.0.0.0/28\n",
            "config.yaml: sandbox.docker.subnet_bits (28) must be above the pool's prefix length (28)",
        ),
        (
            "sandbox:\n  runtime: \" runsc\"\n",
            "config.yaml: sandbox.runtime (\" runsc\") is not a runtime name like runc",
        ),
        (
            "sandbox:\n  runtime: \"run sc\"\n",
            "config.yaml: sandbox.runtime (\"run sc\") is not a runtime name like runc",
        ),
        (
            "sandbox:\n  allowed_runtimes: []\n",
            "config.yaml: sandbox.allowed_runtimes is empty",
        ),
        (
            "sandbox:\n  allowed_runtimes: [runc, \"-x\"]\n",
            "config.yaml: sandbox.allowed_runtimes[1] (\"-x\") is not a runtime name",
        ),
        (
            "sandbox:\n  allowed_runtimes: [runc, runsc, runc]\n",
            "config.yaml: sandbox.allowed_runtimes[2] (\"runc\") is listed twice",
        ),
        (
            "sandbox:\n  runtime: runsc\n  allowed_runtimes: [runc]\n",
            "config.yaml: sandbox.allowed_runtimes (runc) does not hold sandbox.runtime (runsc)",
        ),
        (
            "sandbox:\n  allowed_runtimes: runc\n",
            "config.yaml: sandbox.allowed_runtimes",
        ),
        (
            "sandbox:\n  runtime: runc\n  docker:\n    runtime: runsc\n",
            "config.yaml: sandbox.docker.runtime (\"runsc\") is the old place of sandbox.runtime, which says \"runc\"",
        ),
        (
            "sandbox:\n  allowed_runtimes: [runc]\n  docker:\n    allowed_runtimes: [runsc]\n",
            "config.yaml: sandbox.docker.allowed_runtimes (runsc) is the old place of sandbox.allowed_runtimes",
        ),
        (
            "sandbox:\n  docker:\n    runtime: runsc\n    allowed_runtimes: [runc]\n",
            "config.yaml: sandbox.allowed_runtimes (runc) does not hold sandbox.runtime (runsc)",
        ),
        (
            "server:\n  log_level: \"\"\n",
            "config.yaml: server.log_level is empty",
        ),
        (
            "server:\n  log_level: \"info,agenthold=loud\"\n",
            "config.yaml: server.log_level (\"info,agenthold=loud\") is not a log level",
        ),
        (
            "sandbox:\n  docker:\n    cap_drop: [NET_RAW, \"NET ADMIN\"]\n",
            "config.yaml: sandbox.docker.cap_drop[1] (\"NET ADMIN\") is not a capability name",
        ),
        (
            "sandbox:\n  docker:\n    host_mounts: [\"/a\"]\n",
            "config.yaml: sandbox.docker.host_mounts[0] (\"/a\") is not HOST:CONTAINER",
        ),
        (
            "sandbox:\n  docker:\n    host_mounts: [\"/a:/b:rx\"]\n",
            "config.yaml: sandbox.docker.host_mounts[0] (\"/a:/b:rx\") has mode \"rx\"",
        ),
        (
            "sandbox:\n  docker:\n    host_mounts: [\"/a:b\"]\n",
            "config.yaml: sandbox.docker.host_mounts[0] (\"/a:b\") needs an absolute container path",
        ),
        (
            "sandbox:\n  docker:\n    host_mounts: [\"data:/b\"]\n",
            "config.yaml: sandbox.docker.host_mounts[0] (\"data:/b\") needs an absolute host path",
        ),
        (
            "sandbox:\n  docker:\n    host_mounts: [\"/a:/home/agent/\"]\n",
            "config.yaml: sandbox.docker.host_mounts[0] (\"/a:/home/agent/\") would cover",
        ),
    ];
    for (yaml, want) in cases {
        let e = err(yaml);
        assert!(e.starts_with(want), "for {yaml:?}\n got: {e}\nwant: {want}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn small_values_at_the_limits_are_fine() {
    let c = load(
        "sandbox:
  default_memory_mb: 16
  max_memory_mb: 16
  default_cpus: 8
  pids_limit: 16
  ping_interval: 1s
  max_streams_per_agent: 224
  default_disk_mb: 64
  max_disk_mb: 64
  docker:
    network_pool: 10.0.0.0/8
    subnet_bits: 29
",
    )
    .unwrap();
    assert_eq!(c.sandbox.docker.subnet_bits, 29);
    assert_eq!(c.sandbox.max_streams_per_agent, 224);
}

#[test]
fn env_token_wins_over_the_file() {
    let env = |k: &str| (k == ADMIN_TOKEN_ENV).then(|| "from-env-from-env".to_string());
    let c = Config::from_yaml_str("server:\n  admin_token: from-file\n", "c.yaml", env).unwrap();
    assert_eq!(c.server.admin_token.as_deref(), Some("from-env-from-env"));

    let c = Config::load(None, env).unwrap();
    assert_eq!(c.server.admin_token.as_deref(), Some("from-env-from-env"));

    // An empty variable is unset, not an empty token.
    let empty = |_: &str| Some(String::new());
    let c = Config::from_yaml_str("server:\n  admin_token: from-file\n", "c.yaml", empty).unwrap();
    assert_eq!(c.server.admin_token.as_deref(), Some("from-file"));
    assert_eq!(
        load("server:\n  admin_token: \"\"\n")
            .unwrap()
            .server
            .admin_token,
        None
    );

    let bad = |_: &str| Some("a b".to_string());
    let e = Config::load(None, bad).unwrap_err().to_string();
    assert!(
        e.starts_with("defaults: AGENTHOLD_ADMIN_TOKEN contains spaces"),
        "{e}"
    );
}

#[test]
fn env_log_filter_wins_over_the_file() {
    let env = |k: &str| (k == LOG_ENV).then(|| "agenthold=debug".to_string());
    let c = Config::from_yaml_str("server:\n  log_level: warn\n", "c.yaml", env).unwrap();
    assert_eq!(c.server.log_level, "agenthold=debug");
    let c = Config::from_yaml_str("server:\n  log_level: warn\n", "c.yaml", no_env).unwrap();
    assert_eq!(c.server.log_level, "warn");

    let bad = |k: &str| (k == LOG_ENV).then(|| "agenthold=loud".to_string());
    let e = Config::load(None, bad).unwrap_err();
    assert_eq!(e.key(), Some("AGENTHOLD_LOG"));
}

#[test]
fn load_reads_the_file_and_names_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agenthold.yaml");
    std::fs::write(&path, "sandbox:\n  default_cpus: 99\n").unwrap();
    let e = Config::load(Some(&path), no_env).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: sandbox.default_cpus (99) is above sandbox.max_cpus (8)",
            path.display()
        )
    );

    std::fs::write(&path, "sandbox:\n  driver: fake\n").unwrap();
    let c = Config::load(Some(&path), no_env).unwrap();
    assert_eq!(c.sandbox.driver, DriverKind::Fake);

    let missing = dir.path().join("nope.yaml");
    let e = Config::load(Some(&missing), no_env).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    let e = e.to_string();
    assert!(
        e.starts_with(&format!("{}: cannot read", missing.display())),
        "{e}"
    );

    assert_eq!(Config::load(None, no_env).unwrap(), Config::without_file());
}

#[test]
fn risky_settings_are_reported_as_warnings() {
    let c = load(
        "server:\n  admin_token: short\nsandbox:\n  docker:\n    no_new_privileges: false\n    host_mounts: ['/etc:/host-etc:ro']\n",
    )
    .unwrap();
    let w = c.warnings();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(w.iter().any(|l| l.contains("/etc:/host-etc:ro")), "{w:?}");
    assert!(w.iter().any(|l| l.contains("no_new_privileges")), "{w:?}");
    assert!(w.iter().any(|l| l.contains("admin_token")), "{w:?}");
    let c = load("sandbox:\n  driver: fake\n").unwrap();
    assert!(c.warnings()[0].contains("fake"));
}

#[test]
fn runtimes_written_where_they_were_are_read_with_a_warning() {
    let c = load("sandbox:\n  docker:\n    runtime: runsc\n    allowed_runtimes: [runc, runsc]\n")
        .unwrap();
    assert_eq!(c.sandbox.runtime(), Some("runsc"));
    assert_eq!(
        c.sandbox.allowed_runtimes,
        Some(vec!["runc".to_string(), "runsc".to_string()])
    );
    let w = c.warnings();
    assert!(
        w.iter()
            .any(|l| l.starts_with("sandbox.docker.runtime has moved to sandbox.runtime")),
        "{w:?}"
    );
    assert!(
        w.iter().any(|l| l
            .starts_with("sandbox.docker.allowed_runtimes has moved to sandbox.allowed_runtimes")),
        "{w:?}"
    );
    // Both places saying the same is no conflict.
    let c = load("sandbox:\n  runtime: runsc\n  docker:\n    runtime: runsc\n").unwrap();
    assert_eq!(c.sandbox.runtime(), Some("runsc"));
}

#[test]
fn presets_are_read_with_their_keys_and_defaults() {
    let c = load(
        "sandbox:\n  default_preset: dev\npresets:\n  dev:\n    description: Tools\n    \
         image: agenthold/agent:bookworm\n    cpus: 4\n    memoryMb: 8192\n    env:\n      \
         NODE_ENV: development\n    setup: echo hi > ~/x\n    setupOnRebuild: true\n  \
         minimal: {}\n",
    )
    .unwrap();
    let infos = c.preset_infos();
    assert_eq!(
        infos.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["dev", "minimal"]
    );
    let (dev, minimal) = (&infos[0], &infos[1]);
    assert!(dev.default && !minimal.default);
    assert_eq!(
        (dev.image.as_str(), dev.cpus, dev.memory_mb),
        ("agenthold/agent:bookworm", 4.0, 8192)
    );
    assert!(dev.setup_on_rebuild);
    assert_eq!(dev.env["NODE_ENV"], "development");
    assert_eq!(minimal.image, "debian:bookworm-slim");
    assert_eq!(minimal.cpus, 2.0);
    assert_eq!(minimal.disk_mb, Some(10240));
    assert_eq!(minimal.egress, None);
    assert_eq!((minimal.ttl_minutes, minimal.labels.len()), (None, 0));
    let c = load("presets:\n  ci:\n    ttlMinutes: 90\n    labels: {team: ml}\n").unwrap();
    let ci = &c.preset_infos()[0];
    assert_eq!(ci.ttl_minutes, Some(90));
    assert_eq!(ci.labels["team"], "ml");
}

#[test]
fn a_bad_preset_names_its_key() {
    for (yaml, key) in [
        ("presets:\n  dev:\n    cpus: 99\n", "presets.dev.cpus"),
        ("presets:\n  dev:\n    cpus: 0\n", "presets.dev.cpus"),
        (
            "presets:\n  dev:\n    memoryMb: 8\n",
            "presets.dev.memoryMb",
        ),
        ("presets:\n  dev:\n    diskMb: 10\n", "presets.dev.diskMb"),
        (
            "presets:\n  dev:\n    idleMinutes: 99999\n",
            "presets.dev.idleMinutes",
        ),
        ("presets:\n  dev:\n    image: 'a b'\n", "presets.dev.image"),
        (
            "presets:\n  dev:\n    env: {HTTP_PROXY: x}\n",
            "presets.dev.env",
        ),
        ("presets:\n  dev:\n    env: {1A: x}\n", "presets.dev.env"),
        ("presets:\n  dev:\n    setup: '  '\n", "presets.dev.setup"),
        (
            "presets:\n  dev:\n    ttlMinutes: 0\n",
            "presets.dev.ttlMinutes",
        ),
        (
            "presets:\n  dev:\n    ttlMinutes: 525601\n",
            "presets.dev.ttlMinutes",
        ),
        (
            "presets:\n  dev:\n    labels: {Team: x}\n",
            "presets.dev.labels",
        ),
        ("presets:\n  Dev: {}\n", "presets.Dev"),
        (
            "sandbox:\n  default_preset: nope\npresets:\n  dev: {}\n",
            "sandbox.default_preset",
        ),
    ] {
        let e = err(yaml);
        assert!(e.contains(&format!("{key} ")), "{yaml:?}: {e}");
    }
    // Unknown keys inside a preset are refused by name, with their place.
    let e = err("presets:\n  dev:\n    cpu: 2\n");
    assert!(e.contains("presets.dev") && e.contains("cpu"), "{e}");
    let e = err("sandbox:\n  default_preset: nope\npresets:\n  dev: {}\n");
    assert!(e.contains("dev"), "the message lists the presets: {e}");
}

#[test]
fn a_bad_preset_says_what_its_key_takes() {
    for (yaml, message) in [
        (
            "presets:\n  dev:\n    image: 'a b'\n",
            "presets.dev.image (\"a b\") must be 1 to 255 printable ASCII characters, no spaces",
        ),
        (
            "presets:\n  dev:\n    cpus: 99\n",
            "presets.dev.cpus (99) must be above 0 and at most sandbox.max_cpus (8)",
        ),
        (
            "presets:\n  dev:\n    memoryMb: 8\n",
            "presets.dev.memoryMb (8) must be between 16 and sandbox.max_memory_mb (16384)",
        ),
        (
            "presets:\n  dev:\n    diskMb: 10\n",
            "presets.dev.diskMb (10) must be 0 (no limit) or between 64 and sandbox.max_disk_mb \
             (102400)",
        ),
        (
            "presets:\n  dev:\n    idleMinutes: 99999\n",
            "presets.dev.idleMinutes (99999) must be at most 10080 (a week); 0 = never sleep",
        ),
        (
            "presets:\n  Dev: {}\n",
            "presets.Dev is not a valid preset name: lowercase letters, digits and '-', at most \
             63, not starting or ending with '-'",
        ),
    ] {
        assert_eq!(err(yaml), format!("config.yaml: {message}"), "{yaml:?}");
    }
    // A preset may ask for a home without a limit, which a request cannot.
    assert!(load("presets:\n  dev:\n    diskMb: 0\n").is_ok());
}

#[test]
fn without_a_file_the_dev_preset_is_the_default() {
    let c = Config::load(None, no_env).unwrap();
    let infos = c.preset_infos();
    let names: Vec<_> = infos
        .iter()
        .map(|p| (p.name.as_str(), p.image.as_str(), p.default))
        .collect();
    assert_eq!(
        names,
        [
            ("dev", AGENT_IMAGE, true),
            ("minimal", "debian:bookworm-slim", false)
        ]
    );
    // Only `dev` lets its agents become root.
    let root: Vec<_> = infos
        .iter()
        .map(|p| (p.name.as_str(), p.allow_root))
        .collect();
    assert_eq!(root, [("dev", true), ("minimal", false)]);
    // A file that names no presets has none.
    assert!(load("").unwrap().presets.is_empty());
}

#[test]
fn previews_settings_are_read_and_bad_ones_named() {
    let c = load(
        "server:\n  previews:\n    listen: 0.0.0.0:9443\n    domain: preview.example.com\n    \
         public_url_scheme: https\n    max_per_agent: 3\n",
    )
    .unwrap();
    let p = &c.server.previews;
    assert_eq!(p.listen, "0.0.0.0:9443".parse().unwrap());
    assert_eq!(p.domain, "preview.example.com");
    assert_eq!(p.public_url_scheme, crate::config::UrlScheme::Https);
    assert_eq!(p.max_per_agent, 3);
    for (yaml, key) in [
        (
            "server:\n  previews:\n    domain: Example.COM\n",
            "server.previews.domain",
        ),
        (
            "server:\n  previews:\n    domain: 10.0.0.1\n",
            "server.previews.domain",
        ),
        (
            "server:\n  previews:\n    domain: \"\"\n",
            "server.previews.domain",
        ),
        (
            "server:\n  previews:\n    max_per_agent: 0\n",
            "server.previews.max_per_agent",
        ),
        (
            "server:\n  previews:\n    public_url_scheme: ftp\n",
            "public_url_scheme",
        ),
        ("server:\n  previews:\n    listn: 1\n", "listn"),
        (
            "server:\n  listen: 127.0.0.1:8080\n  previews:\n    listen: 127.0.0.1:8080\n",
            "server.previews.listen",
        ),
    ] {
        let e = err(yaml);
        assert!(e.contains(key), "{yaml:?}: {e}");
    }
}

#[test]
fn dangerous_patterns_are_compiled_at_load_and_a_bad_one_names_itself() {
    let c = load("approvals:\n  dangerous_patterns: ['\\bnuke\\b']\n").unwrap();
    assert!(c
        .approvals
        .dangerous_patterns
        .matches("sudo NUKE  everything"));
    assert!(!c.approvals.dangerous_patterns.matches("rm -rf ~"));
    let e = err("approvals:\n  dangerous_patterns: ['ok', '(unclosed']\n");
    assert!(
        e.contains("approvals") && e.contains("dangerous_patterns[1]") && e.contains("(unclosed"),
        "{e}"
    );
}

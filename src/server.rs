//! `agenthold serve`: opens the store, settles the sandboxes, and runs the API and the tunnel.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::agents::runtimes::Runtimes;
use crate::api::{self, auth::Auth, AppState};
use crate::config::reload::{ConfigSource, Reloader};
use crate::config::{Config, DriverKind};
use crate::egress::{Dialer, Proxy, ProxySettings};
use crate::lifecycle::Lifecycle;
use crate::listener::{self, ConnectionLimiter};
use crate::metrics::Metrics;
use crate::store::{hash_token, new_token, Store};
use crate::tunnel;

const ADMIN_HASH_KEY: &str = "admin_token_hash";

/// A server that is listening.
pub struct Server {
    pub api_addr: SocketAddr,
    pub tunnel_addr: SocketAddr,
    /// The preview listener (`server.previews.listen`).
    pub previews_addr: SocketAddr,
    pub lifecycle: Arc<Lifecycle>,
    /// The database, for tools and tests that look at it beside the server; every change of
    /// an agent's state goes through [`Lifecycle`].
    pub store: Store,
    api: TcpListener,
    tunnel: TcpListener,
    previews: TcpListener,
    /// The egress proxy and its listener.
    egress: (Arc<Proxy>, TcpListener),
    pub egress_addr: SocketAddr,
    /// The egress resolver's socket, in transparent mode.
    resolver: Option<tokio::net::UdpSocket>,
    /// Each listener's own caps, so a flood on one leaves the other its file handles.
    pub api_connections: Arc<ConnectionLimiter>,
    pub tunnel_connections: Arc<ConnectionLimiter>,
    pub egress_connections: Arc<ConnectionLimiter>,
    pub previews_connections: Arc<ConnectionLimiter>,
    state: AppState,
    /// An admin token made at this start, kept and shown once the server serves.
    new_admin_token: Option<String>,
}

/// The admin token's hash: from config or environment if given, else the one made at first
/// start. When there is none, a new one is made, with the token: it is kept and shown only once
/// the server serves (see [`Server::run`]), so a start that fails first spends nothing.
async fn admin_token_hash(
    config: &Config,
    store: &Store,
) -> anyhow::Result<(String, Option<String>)> {
    if let Some(token) = &config.server.admin_token {
        return Ok((hash_token(token), None));
    }
    if let Some(hash) = store.get_setting(ADMIN_HASH_KEY).await? {
        return Ok((hash, None));
    }
    let token = new_token();
    Ok((hash_token(&token), Some(token)))
}

/// How to use an admin token, said where one is shown.
pub fn token_usage(token: &str) -> String {
    format!(
        "Use it with `export AGENTHOLD_TOKEN={token}` for the CLI and the Python client, or sign \
         in to the web UI with it."
    )
}

/// `agenthold admin-token --reset`: a new admin token for the server whose data directory
/// `config` names, replacing the old one (whose web sessions end). Refused when the config or
/// the environment sets the token, which would win over the new one.
pub async fn reset_admin_token(config: &Config) -> anyhow::Result<String> {
    if config.server.admin_token.is_some() {
        anyhow::bail!(
            "the admin token is set by server.admin_token or {}; change it there instead",
            crate::config::ADMIN_TOKEN_ENV
        );
    }
    let path = config.database_path();
    if !path.exists() {
        anyhow::bail!(
            "{} does not exist: no server has run with server.data_dir {} (pass the server's \
             --config)",
            path.display(),
            config.server.data_dir.display()
        );
    }
    let store = Store::open(&path)
        .await
        .with_context(|| format!("opening {}", path.display()))?;
    let token = new_token();
    store
        .set_setting(ADMIN_HASH_KEY, &hash_token(&token))
        .await
        .with_context(|| format!("storing the new token's hash in {}", path.display()))?;
    Ok(token)
}

impl Server {
    /// Opens everything and binds both listeners, without serving yet; a server with no file
    /// to read its config from again (see [`Server::bind_from`]).
    pub async fn bind(config: Config) -> anyhow::Result<Server> {
        Server::bind_from(config, ConfigSource::none()).await
    }

    /// [`Server::bind`], for `config` as read from `source`, which a reload reads again.
    pub async fn bind_from(config: Config, source: ConfigSource) -> anyhow::Result<Server> {
        // What the server fixes at its start (listeners, the driver) is read from this; all
        // else reads the config in force at each use, which a reload replaces.
        let config = Arc::new(config);
        for warning in config.warnings() {
            tracing::warn!("{warning}");
        }
        let Caps {
            api: api_connections,
            tunnel: tunnel_connections,
            egress: egress_connections,
            previews: previews_connections,
        } = connection_limiters(&config);
        tokio::fs::create_dir_all(&config.server.data_dir)
            .await
            .with_context(|| format!("creating {}", config.server.data_dir.display()))?;
        let store = Store::open(&config.database_path())
            .await
            .with_context(|| format!("opening {}", config.database_path().display()))?;
        let (admin_hash, new_admin_token) = admin_token_hash(&config, &store).await?;

        let tunnel = TcpListener::bind(config.sandbox.tunnel_listen)
            .await
            .with_context(|| {
                format!(
                    "binding sandbox.tunnel_listen {}",
                    config.sandbox.tunnel_listen
                )
            })?;
        let tunnel_addr = tunnel.local_addr()?;
        let egress_addr = SocketAddr::new(tunnel_addr.ip(), config.sandbox.egress.port);
        let egress_listener = TcpListener::bind(egress_addr).await.with_context(|| {
            format!("binding the egress proxy at {egress_addr} (sandbox.egress.port)")
        })?;
        let egress_addr = egress_listener.local_addr()?;
        let resolver = if config.sandbox.egress.transparent {
            let addr = SocketAddr::new(tunnel_addr.ip(), config.sandbox.egress.dns_port);
            Some(tokio::net::UdpSocket::bind(addr).await.with_context(|| {
                format!("binding the egress resolver at {addr} (sandbox.egress.dns_port)")
            })?)
        } else {
            None
        };
        let dns_port = resolver
            .as_ref()
            .and_then(|s| s.local_addr().ok())
            .map(|a| a.port());
        let api = TcpListener::bind(config.server.listen)
            .await
            .with_context(|| format!("binding server.listen {}", config.server.listen))?;
        let api_addr = api.local_addr()?;
        let previews_listener = TcpListener::bind(config.server.previews.listen)
            .await
            .with_context(|| {
                format!(
                    "binding server.previews.listen {}",
                    config.server.previews.listen
                )
            })?;
        let previews_addr = previews_listener.local_addr()?;

        let egress_ca = Arc::new(
            crate::egress::InstallationCa::open(&config.server.data_dir)
                .context("the egress proxy's installation CA")?,
        );
        let interception = Arc::new(
            crate::egress::Interception::new(
                egress_ca.clone(),
                config
                    .sandbox
                    .egress
                    .read_ca_certificates()
                    .context("sandbox.egress.ca_certificates")?
                    .as_deref(),
            )
            .context("the egress proxy's TLS")?,
        );
        let metrics = Arc::new(Metrics::default());
        let driver = crate::driver::open(
            &config,
            crate::driver::Wiring {
                subnets: Arc::new(store.clone()),
                tunnel: tunnel_addr,
                egress_port: egress_addr.port(),
                dns_port,
                repairs: metrics.repairs(),
                egress_ca: egress_ca.certificate_pem().to_string(),
            },
        )
        .await?;
        let auth = Auth::load(
            admin_hash,
            driver.sandbox_networks(),
            store.clone(),
            config.server.session_ttl,
        )
        .await
        .context("reading the web sessions")?;
        let runtimes = Runtimes::resolve(
            config.sandbox.runtime(),
            config.sandbox.allowed_runtimes.as_deref(),
            &driver.runtimes(),
        )
        .map_err(anyhow::Error::msg)?;
        tracing::info!(
            allowed = runtimes.allowed.join(","),
            default = runtimes.default,
            "agents' runtimes"
        );
        let secrets_key = config.server.secrets_key_path();
        let secrets = Arc::new(
            crate::secrets::Secrets::open(store.clone(), &secrets_key)
                .await
                .with_context(|| format!("opening the secrets (key {})", secrets_key.display()))?,
        );
        let (config_tx, config_rx) = tokio::sync::watch::channel(config.clone());
        let lifecycle = Arc::new(Lifecycle::new(
            store.clone(),
            driver,
            config_rx,
            metrics,
            runtimes,
            secrets.clone(),
        ));
        let reloader = Arc::new(Reloader::new(
            source,
            config_tx,
            lifecycle.disk_limits_unavailable(),
        ));
        let egress = egress_proxy(
            &config,
            &lifecycle,
            [
                api_addr.port(),
                tunnel_addr.port(),
                egress_addr.port(),
                previews_addr.port(),
            ],
            egress_connections.clone(),
            interception,
        );
        let sessions = crate::sessions::Sessions::new(store.clone(), lifecycle.clone());
        let previews = crate::previews::Previews::new(
            store.clone(),
            lifecycle.clone(),
            previews_addr.port(),
            api_addr.port(),
        )
        .await
        .context("reading the preview cookies' key")?;
        let audit = crate::audit::Audit::open(store.clone(), config.server.audit_log.as_deref())
            .with_context(|| {
                format!(
                    "opening server.audit_log {}",
                    config
                        .server
                        .audit_log
                        .as_deref()
                        .unwrap_or(std::path::Path::new(""))
                        .display()
                )
            })?;
        let state = AppState {
            audit: Arc::new(audit),
            lc: lifecycle.clone(),
            auth: Arc::new(auth),
            reloader,
            sessions,
            previews,
            secrets,
        };
        Ok(Server {
            api_addr,
            tunnel_addr,
            previews_addr,
            previews: previews_listener,
            lifecycle,
            store,
            api,
            tunnel,
            egress: (egress, egress_listener),
            egress_addr,
            resolver,
            api_connections,
            tunnel_connections,
            egress_connections,
            previews_connections,
            state,
            new_admin_token,
        })
    }

    /// What reads the config file again (on `SIGHUP`, as the API's reload does).
    pub fn reloader(&self) -> Arc<Reloader> {
        self.state.reloader.clone()
    }

    /// Serves until `shutdown` resolves. The tunnel comes up before reconcile, so sandboxes
    /// that survived a restart can reconnect while their agents are being settled.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let lc = self.lifecycle.clone();
        let header_timeout = lc.config().server.header_timeout;
        // The tasks below end with this future, also when it is dropped rather than run to its
        // end (an embedded server stopped by abort): none of them goes on alone, the pool keeper
        // making sandboxes for a server that is gone.
        let owned = tokio_util::task::AbortOnDropHandle::new;
        let trim_task = owned(tokio::spawn(listener::return_memory_after_floods(vec![
            self.api_connections.clone(),
            self.tunnel_connections.clone(),
            self.egress_connections.clone(),
            self.previews_connections.clone(),
        ])));
        let tunnel_task = owned(tokio::spawn(listener::serve(
            self.tunnel,
            self.tunnel_connections,
            header_timeout,
            tunnel::router(lc.clone()),
            // Ends when the task is aborted below; sandboxes reconnect to the next server.
            std::future::pending(),
        )));
        let egress_shutdown = tokio_util::sync::CancellationToken::new();
        let (proxy, egress_listener) = self.egress;
        let egress_serve = owned(tokio::spawn(
            proxy
                .clone()
                .serve(egress_listener, egress_shutdown.clone()),
        ));
        let egress_follow = owned(tokio::spawn(lc.clone().follow_rule_changes(proxy)));
        let resolver_task = self.resolver.map(|socket| {
            owned(tokio::spawn(crate::egress::dns::serve(
                socket,
                lc.clone(),
                egress_shutdown.clone(),
            )))
        });
        crate::lifecycle::reconcile::reconcile(&lc)
            .await
            .context("reconciling at startup")?;
        let events_task = owned(tokio::spawn(
            crate::lifecycle::reconcile::follow_driver_events(lc.clone()),
        ));
        let sleeper_task = owned(tokio::spawn(crate::lifecycle::sleeper::run(lc.clone())));
        let expiry_task = owned(tokio::spawn(crate::lifecycle::expiry::run(lc.clone())));
        let pool_task = owned(tokio::spawn(crate::lifecycle::pool::run(lc.clone())));
        let token_expiry_task = owned(tokio::spawn({
            let auth = self.state.auth.clone();
            async move { auth.directory.end_tokens_at_expiry().await }
        }));
        let audit_task = owned(tokio::spawn({
            let lc = lc.clone();
            self.state
                .audit
                .clone()
                .prune_periodically(AUDIT_PRUNE_EVERY, move || {
                    Some(lc.config().server.audit_retention).filter(|d| !d.is_zero())
                })
        }));
        // After reconcile: the turns the last server left running are carried on once their
        // sandboxes reconnect.
        self.state
            .sessions
            .recover()
            .await
            .context("carrying on the sessions' turns at startup")?;
        if let Some(token) = &self.new_admin_token {
            // Kept only now that everything has started: a start that failed before this spent
            // no token, and the next one makes and shows one.
            self.store
                .set_setting(ADMIN_HASH_KEY, &hash_token(token))
                .await
                .context("storing the admin token's hash")?;
            eprintln!(
                "\n  agenthold made an admin token. It is shown only this once; keep it:\n\n    \
                 {token}\n\n  {}\n  A lost token is replaced with `agenthold admin-token --reset` \
                 (on this machine, with this server's --config).\n",
                token_usage(token)
            );
        }

        let previews_shutdown = tokio_util::sync::CancellationToken::new();
        let previews_task = owned(tokio::spawn(listener::serve(
            self.previews,
            self.previews_connections,
            header_timeout,
            crate::previews::gateway::router(self.state.previews.clone(), self.state.auth.clone()),
            previews_shutdown.clone().cancelled_owned(),
        )));
        tracing::info!(
            api = %self.api_addr,
            previews = %self.previews_addr,
            tunnel = %self.tunnel_addr,
            egress = %self.egress_addr,
            driver = lc.driver_kind(),
            "agenthold is serving"
        );
        // Commands held for approval fail closed as the server stops, so that their requests
        // end and the listener's drain does not wait for an answer that cannot come.
        let sessions = self.state.sessions.clone();
        let shutdown = async move {
            shutdown.await;
            sessions.expire_held_commands().await;
        };
        listener::serve(
            self.api,
            self.api_connections,
            header_timeout,
            api::router(self.state),
            shutdown,
        )
        .await;
        tunnel_task.abort();
        previews_shutdown.cancel();
        let _ = previews_task.await;
        egress_shutdown.cancel();
        egress_follow.abort();
        let _ = egress_serve.await;
        if let Some(task) = resolver_task {
            let _ = task.await;
        }
        trim_task.abort();
        events_task.abort();
        sleeper_task.abort();
        expiry_task.abort();
        pool_task.abort();
        token_expiry_task.abort();
        audit_task.abort();
        // Last, with nothing left to take a dropped tunnel for a sandbox gone (the pool keeper
        // would remove its entries): in a process that goes on (an embedded server, as the
        // tests' are), sandboxes would otherwise stay with this server and never dial the next.
        lc.tunnels().disconnect_all();
        lc.shutdown().await;
        Ok(())
    }
}

/// How often audit entries older than `server.audit_retention` are deleted (and once at start).
const AUDIT_PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The egress proxy (its listener is bound with the tunnel's, before the driver, which tells
/// sandboxes its port).
fn egress_proxy(
    config: &Config,
    lifecycle: &Arc<Lifecycle>,
    own_ports: [u16; 4],
    limiter: Arc<ConnectionLimiter>,
    interception: Arc<crate::egress::Interception>,
) -> Arc<Proxy> {
    let e = &config.sandbox.egress;
    // Never dialled whatever the rules: the agent networks (a public pool is possible). The
    // host's own addresses are refused too, looked up at each dial.
    let never = lifecycle.sandbox_networks();
    Proxy::new(
        lifecycle.clone(),
        Dialer::new(e.dial_settings(), never, own_ports.to_vec()),
        ProxySettings {
            max_connections: e.max_connections,
            limiter,
            header_timeout: e.header_timeout,
            interception,
            secret_guard: e.secret_guard,
            body_budget: e.secret_body_budget_mb * 1024 * 1024,
            body_timeout: e.secret_body_timeout,
        },
    )
}

/// The fake driver's sandboxes all dial the tunnel (and the proxy) from the server's own loopback
/// address, so the cap per address (one sandbox's share) would hold all of them together: that
/// address counts only against the total. Docker sandboxes each come from an address of their
/// own bridge.
fn fake_sandboxes_source(config: &Config) -> Vec<ipnet::IpNet> {
    match config.sandbox.driver {
        DriverKind::Fake => vec![ipnet::IpNet::from(std::net::IpAddr::from(
            std::net::Ipv4Addr::LOCALHOST,
        ))],
        DriverKind::Docker => Vec::new(),
    }
}

/// Each listener's share of the process's file handles.
struct Caps {
    api: Arc<ConnectionLimiter>,
    tunnel: Arc<ConnectionLimiter>,
    /// The egress proxy's: all agents together (each connection holds two handles, the
    /// sandbox's and the destination's), and per sandbox address.
    egress: Arc<ConnectionLimiter>,
    /// The preview listener's: browsers, as on the API's, with the same caps.
    previews: Arc<ConnectionLimiter>,
}

/// Raises the open-file limit and sizes every listener's cap to fit under it.
fn connection_limiters(config: &Config) -> Caps {
    let api = config.server.max_connections as usize;
    let tunnel = config.sandbox.tunnel_max_connections as usize;
    let egress = config.sandbox.egress.max_total_connections;
    // A proxied connection holds two handles: the sandbox's and the destination's.
    let wanted = [api, tunnel, egress.saturating_mul(2), api];
    let [api, tunnel, egress_fds, previews] = match listener::raise_nofile_limit() {
        Ok(nofile) => {
            let fitted = listener::fit_to_budget(nofile, wanted);
            if fitted != wanted {
                tracing::warn!(
                    nofile,
                    "the open-file limit (RLIMIT_NOFILE) cannot hold server.max_connections \
                     ({api}, on the API's listener and the previews' each), sandbox.tunnel_max_connections ({tunnel}) and \
                     sandbox.egress.max_total_connections ({egress}) with {} to spare; \
                     holding at most {}, {} and {}; raise the hard limit (ulimit -Hn, LimitNOFILE=)",
                    listener::FD_RESERVE,
                    fitted[0],
                    fitted[1],
                    (fitted[2] / 2).max(1)
                );
            }
            fitted
        }
        Err(e) => {
            tracing::warn!("could not raise the open-file limit (RLIMIT_NOFILE): {e}");
            wanted
        }
    };
    let c = &config.server;
    Caps {
        egress: ConnectionLimiter::new(
            "egress",
            (egress_fds / 2).max(1),
            config.sandbox.egress.max_connections,
            fake_sandboxes_source(config),
        ),
        api: ConnectionLimiter::new(
            "api",
            api,
            c.max_connections_per_ip as usize,
            c.trusted_proxies.clone(),
        ),
        previews: ConnectionLimiter::new(
            "previews",
            previews,
            c.max_connections_per_ip as usize,
            c.trusted_proxies.clone(),
        ),
        tunnel: ConnectionLimiter::new(
            "tunnel",
            tunnel,
            config.sandbox.tunnel_max_connections_per_ip as usize,
            fake_sandboxes_source(config),
        ),
    }
}

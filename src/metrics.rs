//! What an operator watches: `GET /metrics` in the Prometheus (OpenMetrics) text format.
//!
//! Counters and histograms are kept as things happen; the gauges (agents by state, tunnels, SSE
//! subscribers) are read from the server's own state at each scrape, so they can never drift.
//! The route sits behind the API's auth; `server.metrics_token` opens it to a scraper that holds
//! that token alone.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::model::AgentState;

/// The path of the route, on the API listener.
pub const PATH: &str = "/metrics";
/// What Prometheus is told it gets.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The lifecycle operations that are timed.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum OpKind {
    create,
    start,
    stop,
    rebuild,
    destroy,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    ok,
    error,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    kind: OpKind,
    outcome: Outcome,
}

/// What reconcile and the driver found out of place and put right.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Repair {
    /// An operation a crash interrupted, taken up again at startup.
    resumed_operation,
    /// A sandbox (or its leftovers) that belongs to no agent, removed.
    orphan_removed,
    /// A running agent whose sandbox had stopped while the server was down.
    found_stopped,
    /// A sleeping agent whose sandbox had been started outside (or a paused one unpaused).
    found_started,
    /// An agent whose sandbox had been paused outside.
    found_paused,
    /// A second network of one agent (a crash while Docker made one), removed.
    duplicate_network,
    /// A container made anew because its network was gone or it mounted an old sandboxd folder.
    container_remade,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RepairLabels {
    kind: Repair,
}

/// Why a tunnel connection was refused before its session began.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum TunnelRefusal {
    /// No agent id or no token.
    no_credentials,
    /// A token that is not the agent's current boot token (or an agent that does not exist).
    invalid_token,
    /// A right token for an agent that is not starting or running.
    not_started,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TunnelRefusalLabels {
    reason: TunnelRefusal,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

/// A handle for counting repairs, cheap to clone (the driver holds one).
#[derive(Clone, Default)]
pub struct Repairs(Family<RepairLabels, Counter>);

impl Repairs {
    pub fn record(&self, kind: Repair) {
        self.0.get_or_create(&RepairLabels { kind }).inc();
    }
}

/// Gauges read at scrape time.
pub struct Snapshot {
    pub agents_by_state: Vec<(AgentState, i64)>,
    pub tunnels: i64,
}

pub struct Metrics {
    registry: Registry,
    ops: Family<OpLabels, Histogram, fn() -> Histogram>,
    repairs: Repairs,
    reconnects: Counter,
    tunnel_refusals: Family<TunnelRefusalLabels, Counter>,
    agents: Family<StateLabels, Gauge>,
    tunnels: Gauge,
    sse: Gauge,
    sse_live: Arc<AtomicI64>,
}

fn op_histogram() -> Histogram {
    // 50 ms to about 100 s: an exec-sized stop up to a create that pulls an image.
    Histogram::new(exponential_buckets(0.05, 2.0, 12))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("agenthold");
        let ops = Family::<OpLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            op_histogram as fn() -> Histogram,
        );
        let repairs = Repairs::default();
        let reconnects = Counter::default();
        let tunnel_refusals = Family::<TunnelRefusalLabels, Counter>::default();
        let agents = Family::<StateLabels, Gauge>::default();
        let tunnels = Gauge::default();
        let sse = Gauge::default();
        registry.register("agents", "Agents by state", agents.clone());
        registry.register(
            "operation_seconds",
            "How long lifecycle operations took (a create includes its first start), by kind and outcome",
            ops.clone(),
        );
        registry.register(
            "reconcile_repairs",
            "Things found out of place and put right, by kind",
            repairs.0.clone(),
        );
        registry.register(
            "tunnel_connections",
            "Sandboxes connected over the tunnel",
            tunnels.clone(),
        );
        registry.register(
            "sandboxd_reconnects",
            "Hellos from a sandboxd whose agent was already running (a dropped tunnel came back)",
            reconnects.clone(),
        );
        registry.register(
            "tunnel_refusals",
            "Tunnel connections refused before a session began, by reason",
            tunnel_refusals.clone(),
        );
        registry.register(
            "sse_subscribers",
            "Clients following GET /api/v1/events",
            sse.clone(),
        );
        Metrics {
            registry,
            ops,
            repairs,
            reconnects,
            tunnel_refusals,
            agents,
            tunnels,
            sse,
            sse_live: Arc::default(),
        }
    }
}

impl Metrics {
    pub fn observe_op(&self, kind: OpKind, outcome: Outcome, took: Duration) {
        self.ops
            .get_or_create(&OpLabels { kind, outcome })
            .observe(took.as_secs_f64());
    }

    pub fn repairs(&self) -> Repairs {
        self.repairs.clone()
    }

    pub fn sandboxd_reconnected(&self) {
        self.reconnects.inc();
    }

    pub fn tunnel_refused(&self, reason: TunnelRefusal) {
        self.tunnel_refusals
            .get_or_create(&TunnelRefusalLabels { reason })
            .inc();
    }

    /// Counts an SSE subscriber for as long as the guard lives.
    pub fn sse_subscriber(&self) -> SseGuard {
        self.sse_live.fetch_add(1, Ordering::Relaxed);
        SseGuard(self.sse_live.clone())
    }

    /// The text Prometheus scrapes, with the gauges taken from `now`.
    pub fn render(&self, now: Snapshot) -> Result<String, std::fmt::Error> {
        for state in AgentState::ALL {
            let n = now
                .agents_by_state
                .iter()
                .find(|(s, _)| *s == state)
                .map_or(0, |(_, n)| *n);
            self.agents
                .get_or_create(&StateLabels {
                    state: state.to_string(),
                })
                .set(n);
        }
        self.tunnels.set(now.tunnels);
        self.sse.set(self.sse_live.load(Ordering::Relaxed));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

pub struct SseGuard(Arc<AtomicI64>);

impl Drop for SseGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_live_gauges() {
        let m = Metrics::default();
        m.observe_op(OpKind::start, Outcome::ok, Duration::from_millis(300));
        m.repairs().record(Repair::duplicate_network);
        m.sandboxd_reconnected();
        m.tunnel_refused(TunnelRefusal::invalid_token);
        let sse = m.sse_subscriber();
        let text = m
            .render(Snapshot {
                agents_by_state: vec![(AgentState::Running, 3)],
                tunnels: 2,
            })
            .expect("render");
        assert!(
            text.contains("agenthold_agents{state=\"running\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("agenthold_agents{state=\"error\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("agenthold_operation_seconds_count{kind=\"start\",outcome=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("agenthold_reconcile_repairs_total{kind=\"duplicate_network\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("agenthold_sandboxd_reconnects_total 1"),
            "{text}"
        );
        assert!(text.contains("agenthold_tunnel_connections 2"), "{text}");
        assert!(
            text.contains("agenthold_tunnel_refusals_total{reason=\"invalid_token\"} 1"),
            "{text}"
        );
        assert!(text.contains("agenthold_sse_subscribers 1"), "{text}");
        drop(sse);
        let text = m
            .render(Snapshot {
                agents_by_state: vec![],
                tunnels: 0,
            })
            .expect("render");
        assert!(text.contains("agenthold_sse_subscribers 0"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}

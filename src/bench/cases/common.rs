//! What the cases share: waiting for agents to run (on the event stream), reading a terminal
//! until the shell answers, the plain-Docker baseline container, finding sandboxd in an
//! agent's container, and watching the server's peak RSS.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::{Ctx, STEP_DEADLINE};
use crate::api::types::Agent;
use crate::api::types::AgentState;
use crate::bench::docker_cli::docker;
use crate::bench::server_proc::{children, rss_kib};
use crate::cli::{ApiClient, CreateAgent, ServerEvent, Terminal};

const WAKE_MESSAGE: &str = "Starting the sandbox";

pub async fn wait_state(client: &ApiClient, id: &str, want: AgentState) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_DEADLINE;
    loop {
        let a = client.get_agent(id).await?;
        if a.state == want {
            return Ok(());
        }
        if a.state == AgentState::Error {
            bail!("agent {id} failed: {}", a.error.unwrap_or_default());
        }
        if Instant::now() > deadline {
            bail!("agent {id} did not become {want} (it is {})", a.state);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn create_running(client: &ApiClient, name: &str) -> anyhow::Result<String> {
    let mut ids = create_all_running(client, &[name.to_string()]).await?;
    ids.pop().context("no agent was created")
}

/// Creates the agents named `names` at once and waits until all of them run, returning their
/// ids in order. Waits on the server's event stream, with a slow poll in case events are lost:
/// polling alone (every 5 ms per agent) made a burst of 50 cost the server 10,000 requests a
/// second, CPU taken from the very work being measured.
pub async fn create_all_running(
    client: &ApiClient,
    names: &[String],
) -> anyhow::Result<Vec<String>> {
    create_all_running_with(client, names, None).await
}

/// [`create_all_running`], with these `egress` rules for every agent.
pub async fn create_all_running_with(
    client: &ApiClient,
    names: &[String],
    egress: Option<crate::api::types::EgressRules>,
) -> anyhow::Result<Vec<String>> {
    let like = CreateAgent {
        egress,
        ..Default::default()
    };
    let created = create_all_running_like(client, names, &like).await?;
    Ok(created.into_iter().map(|a| a.id).collect())
}

/// Creates the agents named `names` at once, each as `like` asks but for its name, and waits
/// until all of them run; returns them as their creates answered, in order.
pub async fn create_all_running_like(
    client: &ApiClient,
    names: &[String],
    like: &CreateAgent,
) -> anyhow::Result<Vec<Agent>> {
    // Subscribed before the first create, so no state change can slip past.
    let mut events = client.events().await?;
    let created = futures::future::try_join_all(names.iter().map(|name| async move {
        let a = client
            .create_agent(&CreateAgent {
                name: name.clone(),
                ..like.clone()
            })
            .await?;
        anyhow::Ok(a)
    }))
    .await?;
    let ids: Vec<String> = created.iter().map(|a| a.id.clone()).collect();
    until_running(&mut events, client, &ids).await?;
    Ok(created)
}

/// Until the warm pool of `preset` has `n` entries ready: each is a sandbox made and
/// started, one at a time, so the deadline grows with `n`.
pub async fn until_pool_ready(client: &ApiClient, preset: &str, n: u32) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_DEADLINE + Duration::from_secs(10) * n;
    loop {
        let pools = client.pool().await?;
        if pools.iter().any(|p| p.preset == preset && p.ready >= n) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the warm pool of preset {preset} did not have {n} entries ready in time: {pools:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Until the warm pool of `preset` holds no entry (its preset's `warm` went to 0).
pub async fn until_pool_empty(client: &ApiClient, preset: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_DEADLINE;
    loop {
        let pools = client.pool().await?;
        if !pools
            .iter()
            .any(|p| p.preset == preset && p.ready + p.starting > 0)
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the warm pool of preset {preset} was not emptied in time: {pools:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Destroys the agents `ids` at once and waits until they are gone.
pub async fn destroy_all(client: &ApiClient, ids: &[String]) -> anyhow::Result<()> {
    futures::future::try_join_all(ids.iter().map(|id| client.delete_agent(id))).await?;
    let deadline = Instant::now() + STEP_DEADLINE;
    loop {
        let left = client.list_agents().await?;
        if !left.iter().any(|a| ids.contains(&a.id)) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "destroyed agents were still listed after {STEP_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Events = futures::stream::BoxStream<'static, Result<ServerEvent, crate::cli::ClientError>>;

/// Waits until every agent in `ids` runs, on `events` (subscribed before the agents were
/// asked to start) and a slow poll.
pub async fn until_running(
    events: &mut Events,
    client: &ApiClient,
    ids: &[String],
) -> anyhow::Result<()> {
    let mut pending: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    let mut poll = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(ServerEvent::Agent(a))) => note(&mut pending, &a)?,
                Some(Ok(_)) => {}
                Some(Err(e)) => bail!("the event stream failed: {e}"),
                None => bail!("the event stream ended"),
            },
            _ = poll.tick() => {
                for a in client.list_agents().await? {
                    note(&mut pending, &a)?;
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                bail!("{} of {} agents were not running in time", pending.len(), ids.len())
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
    }
}

/// Takes a running agent off `pending`; an agent of ours in `error` fails the wait.
fn note(
    pending: &mut std::collections::HashSet<&str>,
    a: &crate::api::types::Agent,
) -> anyhow::Result<()> {
    if !pending.contains(a.id.as_str()) {
        return Ok(());
    }
    match a.state {
        AgentState::Running => {
            pending.remove(a.id.as_str());
        }
        AgentState::Error => bail!(
            "agent {} failed: {}",
            a.id,
            a.error.clone().unwrap_or_default()
        ),
        _ => {}
    }
    Ok(())
}

/// Reads the terminal until a byte from the shell (not the server's wake notice) arrives.
pub async fn first_shell_bytes(term: &mut Terminal) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    loop {
        let msg = tokio::time::timeout_at(deadline, term.next())
            .await
            .context("no terminal output")?;
        match msg {
            Some(Ok(Message::Binary(b))) => {
                if !String::from_utf8_lossy(&b).contains(WAKE_MESSAGE) && !b.is_empty() {
                    return Ok(());
                }
            }
            Some(Ok(Message::Close(c))) => bail!("the terminal closed: {c:?}"),
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("terminal: {e}"),
            None => bail!("the terminal ended"),
        }
    }
}

/// Reads the terminal until `needle` shows.
pub async fn read_until(term: &mut Terminal, needle: &[u8]) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    let mut seen: Vec<u8> = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, term.next())
            .await
            .context("terminal timeout")?
        {
            Some(Ok(Message::Binary(b))) => {
                seen.extend_from_slice(&b);
                if seen.windows(needle.len()).any(|w| w == needle) {
                    return Ok(());
                }
                if seen.len() > 1 << 20 {
                    seen.drain(..seen.len() - 4096);
                }
            }
            Some(Ok(Message::Close(c))) => bail!("the terminal closed: {c:?}"),
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("terminal: {e}"),
            None => bail!("the terminal ended"),
        }
    }
}

pub async fn keys(term: &mut Terminal, k: &[u8]) -> anyhow::Result<()> {
    term.send(Message::Binary(k.to_vec().into())).await?;
    Ok(())
}

/// Whether the ready agent image ([`crate::config::AGENT_IMAGE`]) is there: the previews
/// case needs its python3, the code case its ipykernel.
pub async fn have_ready_image() -> bool {
    docker(&["image", "inspect", crate::config::AGENT_IMAGE])
        .await
        .is_ok()
}

/// A running container of `image` for the baselines.
pub async fn baseline_container(prefix: &str, image: &str, name: &str) -> anyhow::Result<String> {
    let name = format!("{prefix}-base-{name}");
    docker(&[
        "run", "-d", "--init", "--name", &name, image, "sleep", "infinity",
    ])
    .await?;
    Ok(name)
}

/// sandboxd's pid in agent `id`'s container: under `--init` it is the init's child (the
/// biggest one), or the init itself when it has none.
pub async fn sandboxd_pid(cx: &Ctx<'_>, id: &str) -> anyhow::Result<u32> {
    let container = format!("{}-{id}", cx.prefix);
    let init: u32 = docker(&["inspect", "-f", "{{.State.Pid}}", &container])
        .await?
        .parse()?;
    // A child whose memory cannot be read (it just ended) is not the one: the init stands in
    // rather than a figure of 0.
    Ok(children(init)
        .into_iter()
        .filter_map(|p| rss_kib(p).map(|kib| (kib, p)))
        .max()
        .map_or(init, |(_, p)| p))
}

/// Samples the server's RSS every 20 ms until dropped, keeping the peak.
pub struct RssWatch {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssWatch {
    pub fn start(pid: u32) -> RssWatch {
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let p = peak.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Some(r) = rss_kib(pid) {
                    p.fetch_max(r, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        RssWatch { peak, task }
    }

    pub fn peak_kib(self) -> u64 {
        self.task.abort();
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

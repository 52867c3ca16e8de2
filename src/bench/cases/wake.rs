//! `--case wake`: a sleeping agent's terminal → first shell byte, against `docker start` +
//! `docker exec echo`; and a paused one's, against `docker unpause` + `docker exec echo`.

use std::time::Instant;

use super::common::{baseline_container, first_shell_bytes, wait_state};
use super::Ctx;
use crate::api::types::AgentState;
use crate::bench::docker_cli::docker;
use crate::bench::stats::{ms, Row};
use crate::bench::target::Bound;
use crate::cli::AgentAction;

const TARGET: &[Bound] = &[Bound::AtMost(400.0), Bound::RatioAtMost(1.0)];

pub async fn wake_to_first_byte(cx: &mut Ctx<'_>, id: &str) -> anyhow::Result<Row> {
    let client = cx.client();
    let base_name = baseline_container(cx.prefix, cx.image, "wake").await?;
    let mut ours = Vec::new();
    let mut base = Vec::new();
    for _ in 0..cx.runs {
        client.action(id, AgentAction::Stop).await?;
        wait_state(&client, id, AgentState::Sleeping).await?;
        let t = Instant::now();
        let mut term = client.connect_terminal(id, 80, 24).await?;
        first_shell_bytes(&mut term).await?;
        ours.push(ms(t.elapsed()));
        drop(term);

        docker(&["stop", "-t", "0", &base_name]).await?;
        let t = Instant::now();
        docker(&["start", &base_name]).await?;
        docker(&["exec", &base_name, "echo", "x"]).await?;
        base.push(ms(t.elapsed()));
    }
    wait_state(&client, id, AgentState::Running).await?;
    Ok(Row::times("wake → first terminal byte", &ours, Some(&base)).judged(TARGET))
}

/// The light sleep's wake: a paused agent's new terminal → first shell byte.
const PAUSED_TARGET: &[Bound] = &[Bound::AtMost(30.0), Bound::RatioAtMost(1.0)];

pub async fn wake_from_paused_to_first_byte(cx: &mut Ctx<'_>, id: &str) -> anyhow::Result<Row> {
    let client = cx.client();
    let base_name = baseline_container(cx.prefix, cx.image, "wake-paused").await?;
    let mut ours = Vec::new();
    let mut base = Vec::new();
    for _ in 0..cx.runs {
        client.action(id, AgentAction::Pause).await?;
        wait_state(&client, id, AgentState::Paused).await?;
        let t = Instant::now();
        let mut term = client.connect_terminal(id, 80, 24).await?;
        first_shell_bytes(&mut term).await?;
        ours.push(ms(t.elapsed()));
        drop(term);

        docker(&["pause", &base_name]).await?;
        let t = Instant::now();
        docker(&["unpause", &base_name]).await?;
        docker(&["exec", &base_name, "echo", "x"]).await?;
        base.push(ms(t.elapsed()));
    }
    wait_state(&client, id, AgentState::Running).await?;
    Ok(
        Row::times("wake from paused → first terminal byte", &ours, Some(&base))
            .judged(PAUSED_TARGET),
    )
}

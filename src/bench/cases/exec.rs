//! `--case exec`: exec `true`, against `docker exec true`.

use std::time::Instant;

use anyhow::bail;

use super::Ctx;
use crate::bench::docker_cli::timed;
use crate::bench::stats::{ms, Row};
use crate::bench::target::Bound;
use crate::cli::ExecBody;

const TARGET: &[Bound] = &[Bound::AtMost(10.0), Bound::RatioAtMost(0.2)];

pub async fn exec_true(cx: &mut Ctx<'_>, id: &str, base_name: &str) -> anyhow::Result<Row> {
    let client = cx.client();
    let n = cx.runs * 10;
    let req = ExecBody {
        command: vec!["true".into()],
        ..Default::default()
    };
    client.exec(id, &req).await?;
    let mut ours = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let r = client.exec(id, &req).await?;
        ours.push(ms(t.elapsed()));
        if r.exit_code != 0 {
            bail!("`true` exited with {}", r.exit_code);
        }
    }
    let mut base = Vec::new();
    for _ in 0..n {
        base.push(ms(timed(&["exec", base_name, "true"]).await?));
    }
    Ok(Row::times("exec `true`", &ours, Some(&base)).judged(TARGET))
}

//! A row's target: bounds declared once, each both the text the table shows and the check of
//! the row against it, so the two cannot drift apart.

use super::stats::Row;

/// One bound a row's figures must keep.
#[derive(Debug, Clone)]
pub enum Bound {
    /// The row's figure (its p50, for timings) at most this, in the row's unit.
    AtMost(f64),
    /// The row's figure at least this, in the row's unit (a throughput).
    AtLeast(f64),
    /// ours / baseline at most this.
    RatioAtMost(f64),
    /// ours / baseline at least this.
    RatioAtLeast(f64),
    /// The p50 at most this above the baseline's p50, in the row's unit.
    AddsAtP50(f64),
    /// The p99 at most this above the baseline's p99, in the row's unit.
    AddsAtP99(f64),
    /// (ours − baseline) / `count` at most `limit`, in the row's unit: the growth per item.
    EachAtMost { limit: f64, count: usize },
    /// `done` of `of` things did `what` (a count, not one of the row's figures).
    All {
        what: &'static str,
        done: usize,
        of: usize,
    },
}

impl Bound {
    fn describe(&self, row: &Row) -> String {
        let unit = &row.unit;
        match self {
            // A timing row shows percentiles, so its bound names the one it judges.
            Bound::AtMost(v) if row.ours_p95.is_some() => format!("p50 ≤ {v} {unit}"),
            Bound::AtMost(v) => format!("≤ {v} {unit}"),
            Bound::AtLeast(v) => format!("≥ {v} {unit}"),
            Bound::RatioAtMost(v) => format!("ratio ≤ {v:?}"),
            Bound::RatioAtLeast(v) => format!("ratio ≥ {v:?}"),
            Bound::AddsAtP50(v) => format!("+p50 ≤ {v} {unit}"),
            Bound::AddsAtP99(v) => format!("+p99 ≤ {v} {unit}"),
            Bound::EachAtMost { limit, count } => {
                let grew = row
                    .baseline
                    .map_or(f64::NAN, |b| (row.ours_p50 - b) / *count as f64);
                format!("≤ {limit} {unit} more each (grew {grew:.1} {unit} each)")
            }
            Bound::All { what, done, of } => format!("all {what} ({done} of {of})"),
        }
    }

    fn holds(&self, row: &Row) -> bool {
        let ratio = |ok: &dyn Fn(f64) -> bool| row.ratio.is_some_and(ok);
        match *self {
            Bound::AtMost(v) => row.ours_p50 <= v,
            Bound::AtLeast(v) => row.ours_p50 >= v,
            Bound::RatioAtMost(v) => ratio(&|r| r <= v),
            Bound::RatioAtLeast(v) => ratio(&|r| r >= v),
            Bound::AddsAtP50(v) => row.baseline.is_some_and(|b| row.ours_p50 - b <= v),
            Bound::AddsAtP99(v) => match (row.ours_p99, row.baseline_p99) {
                (Some(ours), Some(base)) => ours - base <= v,
                _ => false,
            },
            Bound::EachAtMost { limit, count } => row
                .baseline
                .is_some_and(|b| (row.ours_p50 - b) / count as f64 <= limit),
            Bound::All { done, of, .. } => done == of,
        }
    }
}

impl Row {
    /// This row with its target: `bounds`, all of which must hold.
    pub fn judged(mut self, bounds: &[Bound]) -> Row {
        self.target = bounds
            .iter()
            .map(|b| b.describe(&self))
            .collect::<Vec<_>>()
            .join(", ");
        self.met = Some(bounds.iter().all(|b| b.holds(&self)));
        self
    }

    /// Adds `note` (what the figures alone do not say) to the target's text, in parentheses.
    pub fn noted(mut self, note: &str) -> Row {
        self.target = format!("{} ({note})", self.target);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_and_the_check_come_from_one_bound() {
        let row = Row::times("x", &[8.0, 8.0], Some(&[100.0]))
            .judged(&[Bound::AtMost(10.0), Bound::RatioAtMost(0.2)]);
        assert_eq!(row.target, "p50 ≤ 10 ms, ratio ≤ 0.2");
        assert_eq!(row.met, Some(true));
        let row = Row::value("y", "MiB", 5.0, None, false).judged(&[Bound::AtMost(4.0)]);
        assert_eq!(row.target, "≤ 4 MiB");
        assert_eq!(row.met, Some(false));
        let row =
            Row::value("z", "updates/s", 12000.0, None, true).judged(&[Bound::AtLeast(10000.0)]);
        assert_eq!(row.target, "≥ 10000 updates/s");
        assert_eq!(row.met, Some(true));
    }

    #[test]
    fn added_time_is_judged_against_the_baseline_percentiles() {
        let row = Row::times("echo", &[1.5, 1.5], Some(&[1.0, 9.0]))
            .judged(&[Bound::AddsAtP50(1.0), Bound::AddsAtP99(5.0)]);
        assert_eq!(row.target, "+p50 ≤ 1 ms, +p99 ≤ 5 ms");
        assert_eq!(row.met, Some(true));
        let row =
            Row::value("rss", "KiB", 300.0, Some(100.0), false).judged(&[Bound::EachAtMost {
                limit: 64.0,
                count: 2,
            }]);
        assert_eq!(row.target, "≤ 64 KiB more each (grew 100.0 KiB each)");
        assert_eq!(row.met, Some(false));
    }
}

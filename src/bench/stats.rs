//! Percentiles and the result table.

use std::time::Duration;

use serde::Serialize;

/// The value at quantile `q` (0..=1) of `samples`, by nearest rank.
pub fn percentile(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub case: String,
    pub unit: String,
    pub ours_p50: f64,
    pub ours_p95: Option<f64>,
    pub ours_p99: Option<f64>,
    /// The same thing done with plain Docker (or the floor), in the same run.
    pub baseline: Option<f64>,
    /// The baseline's p99, for a target on the time added at p99 (not in the table).
    #[serde(skip)]
    pub baseline_p99: Option<f64>,
    /// ours / baseline for times and sizes; baseline / ours is never used, so lower is better
    /// for times and higher is better for throughputs (see `higher_is_better`).
    pub ratio: Option<f64>,
    pub higher_is_better: bool,
    pub samples: usize,
    pub target: String,
    /// None when the target cannot be judged from this row alone.
    pub met: Option<bool>,
}

impl Row {
    pub fn times(case: &str, ours: &[f64], baseline: Option<&[f64]>) -> Row {
        let p50 = percentile(ours, 0.5);
        let base = baseline.map(|b| percentile(b, 0.5));
        Row {
            case: case.into(),
            unit: "ms".into(),
            ours_p50: p50,
            ours_p95: Some(percentile(ours, 0.95)),
            ours_p99: Some(percentile(ours, 0.99)),
            baseline: base,
            baseline_p99: baseline.map(|b| percentile(b, 0.99)),
            ratio: base.map(|b| p50 / b),
            higher_is_better: false,
            samples: ours.len(),
            target: String::new(),
            met: None,
        }
    }

    pub fn value(
        case: &str,
        unit: &str,
        ours: f64,
        baseline: Option<f64>,
        higher_is_better: bool,
    ) -> Row {
        Row {
            case: case.into(),
            unit: unit.into(),
            ours_p50: ours,
            ours_p95: None,
            ours_p99: None,
            baseline,
            baseline_p99: None,
            ratio: baseline.map(|b| ours / b),
            higher_is_better,
            samples: 1,
            target: String::new(),
            met: None,
        }
    }
}

fn num(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The table a person reads.
pub fn render(rows: &[Row]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header(vec![
        "case", "unit", "ours p50", "ours p95", "ours p99", "docker", "ratio", "target", "met",
    ]);
    for r in rows {
        t.add_row(vec![
            r.case.clone(),
            r.unit.clone(),
            num(r.ours_p50),
            r.ours_p95.map(num).unwrap_or_else(|| "-".into()),
            r.ours_p99.map(num).unwrap_or_else(|| "-".into()),
            r.baseline.map(num).unwrap_or_else(|| "-".into()),
            r.ratio.map(num).unwrap_or_else(|| "-".into()),
            r.target.clone(),
            match r.met {
                Some(true) => "yes".into(),
                Some(false) => "NO".into(),
                None => "-".into(),
            },
        ]);
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&s, 0.5), 50.0);
        assert_eq!(percentile(&s, 0.95), 95.0);
        assert_eq!(percentile(&s, 0.99), 99.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn ratios_compare_with_the_baseline() {
        let r = Row::times("x", &[2.0, 2.0], Some(&[1.0]));
        assert_eq!(r.ratio, Some(2.0));
        let table = render(&[r.judged(&[crate::bench::target::Bound::RatioAtMost(1.0)])]);
        assert!(table.contains("NO"));
    }
}

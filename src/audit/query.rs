//! Which entries a reader asks for, and the checks on what they send.

use chrono::{DateTime, Utc};

use crate::model::audit::{Action, AuditQuery, Visible};

/// Entries a page holds when the reader names no `limit`.
pub const DEFAULT_LIMIT: u32 = 100;
/// The most a page may hold.
pub const MAX_LIMIT: u32 = 1000;

/// A filter that cannot be used; `field` is its query parameter.
#[derive(Debug, thiserror::Error)]
#[error("{why}")]
pub struct QueryError {
    pub field: &'static str,
    pub why: String,
}

fn bad(field: &'static str, why: String) -> QueryError {
    QueryError { field, why }
}

/// The filters as a reader sends them.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    pub agent: Option<String>,
    pub user: Option<String>,
    pub action: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub before: Option<i64>,
    pub limit: Option<u32>,
}

/// The longest id or name a filter may hold: longer matches nothing anyway.
pub const MAX_NAME: usize = 200;

/// Checks `f` at `now` (a relative time like `24h` means that long before `now`).
pub fn parse(f: Filters, now: DateTime<Utc>) -> Result<AuditQuery, QueryError> {
    let name = |field: &'static str, v: Option<String>| match v {
        Some(s) if s.is_empty() => Err(bad(field, format!("{field} is empty: leave it out"))),
        Some(s) if s.chars().count() > MAX_NAME => Err(bad(
            field,
            format!(
                "{field} is {} characters long; at most {MAX_NAME}",
                s.chars().count()
            ),
        )),
        other => Ok(other),
    };
    let action = match f.action {
        None => None,
        Some(s) => Some(Action::parse(&s).ok_or_else(|| {
            let known: Vec<_> = Action::ALL.iter().map(|a| a.as_str()).collect();
            bad(
                "action",
                format!(
                    "{:?} is not an action; one of {}",
                    super::detail::clip(&s, 50),
                    known.join(", ")
                ),
            )
        })?),
    };
    // `since` after `until` is a range with nothing in it, not a mistake worth a 400.
    let since = time("since", f.since, now)?;
    let until = time("until", f.until, now)?;
    let limit = f.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(bad(
            "limit",
            format!("limit is {limit}; it must be 1 to {MAX_LIMIT}"),
        ));
    }
    if let Some(b) = f.before.filter(|b| *b < 1) {
        return Err(bad("before", format!("before is {b}; ids start at 1")));
    }
    Ok(AuditQuery {
        agent: name("agent", f.agent)?,
        user: name("user", f.user)?,
        action,
        since,
        until,
        before: f.before,
        limit,
        visible: Visible::Nothing,
    })
}

/// A duration ago as `since`/`until` take it: 1 to 6 digits and one unit (`90m`, `7d`). The
/// OpenAPI document gives the same pattern.
pub const AGO_PATTERN: &str = "^[0-9]{1,6}[smhdw]$";

/// An RFC 3339 time (`2026-01-02T03:04:05Z`) or a duration before `now` ([`AGO_PATTERN`]).
fn time(
    field: &'static str,
    v: Option<String>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, QueryError> {
    let Some(s) = v else {
        return Ok(None);
    };
    if let Ok(t) = DateTime::parse_from_rfc3339(&s) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    let shown = super::detail::clip(&s, 50);
    let why = || {
        format!("{field} {shown:?} is neither an RFC 3339 time (2026-01-02T03:04:05Z) nor a duration ago: 1 to 6 digits and s, m, h, d or w (24h, 7d)")
    };
    ago(&s)
        .and_then(|ago| now.checked_sub_signed(ago))
        .map(Some)
        .ok_or_else(|| bad(field, why()))
}

/// `7d` → seven days; `None` for anything but [`AGO_PATTERN`].
fn ago(s: &str) -> Option<chrono::Duration> {
    let unit = s.chars().last()?;
    let digits = &s[..s.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    match unit {
        's' => chrono::Duration::try_seconds(n),
        'm' => chrono::Duration::try_minutes(n),
        'h' => chrono::Duration::try_hours(n),
        'd' => chrono::Duration::try_days(n),
        'w' => chrono::Duration::try_weeks(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(f: Filters) -> Result<AuditQuery, QueryError> {
        super::parse(f, Utc::now())
    }

    #[test]
    fn bad_filters_name_their_field() {
        let cases = [
            (
                Filters {
                    action: Some("rm".into()),
                    ..Filters::default()
                },
                "action",
            ),
            (
                Filters {
                    since: Some("yesterday".into()),
                    ..Filters::default()
                },
                "since",
            ),
            (
                Filters {
                    limit: Some(0),
                    ..Filters::default()
                },
                "limit",
            ),
            (
                Filters {
                    limit: Some(MAX_LIMIT + 1),
                    ..Filters::default()
                },
                "limit",
            ),
            (
                Filters {
                    since: Some("7days".into()),
                    ..Filters::default()
                },
                "since",
            ),
            (
                Filters {
                    until: Some(String::new()),
                    ..Filters::default()
                },
                "until",
            ),
            (
                Filters {
                    action: Some(String::new()),
                    ..Filters::default()
                },
                "action",
            ),
            (
                Filters {
                    user: Some(String::new()),
                    ..Filters::default()
                },
                "user",
            ),
            (
                Filters {
                    before: Some(0),
                    ..Filters::default()
                },
                "before",
            ),
            (
                Filters {
                    agent: Some("a".repeat(MAX_NAME + 1)),
                    ..Filters::default()
                },
                "agent",
            ),
        ];
        for (f, field) in cases {
            let e = parse(f.clone()).expect_err(&format!("{f:?}"));
            assert_eq!(e.field, field, "{f:?}: {e}");
        }
        let ok = parse(Filters {
            action: Some("exec".into()),
            since: Some("2026-01-02T03:04:05Z".into()),
            until: Some("1h".into()),
            ..Filters::default()
        })
        .unwrap();
        assert_eq!(ok.action, Some(Action::Exec));
        assert_eq!(ok.limit, DEFAULT_LIMIT);
        let now = Utc::now();
        let week = super::parse(
            Filters {
                since: Some("1w".into()),
                until: Some("999999w".into()),
                ..Filters::default()
            },
            now,
        )
        .expect("a range the wrong way round is empty, not wrong");
        assert_eq!(week.since, Some(now - chrono::Duration::days(7)));
    }
}

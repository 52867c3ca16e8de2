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
const MAX_NAME: usize = 200;

/// Checks `f` at `now` (a relative time like `24h` means that long before `now`).
pub fn parse(f: Filters, now: DateTime<Utc>) -> Result<AuditQuery, QueryError> {
    let name = |field: &'static str, v: Option<String>| match v.filter(|s| !s.is_empty()) {
        Some(s) if s.len() > MAX_NAME => Err(bad(
            field,
            format!("{field} is {} bytes long; at most {MAX_NAME}", s.len()),
        )),
        other => Ok(other),
    };
    let action = match f.action.filter(|s| !s.is_empty()) {
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
    let since = time("since", f.since, now)?;
    let until = time("until", f.until, now)?;
    if let (Some(s), Some(u)) = (since, until) {
        if s > u {
            return Err(bad("since", format!("since ({s}) is after until ({u})")));
        }
    }
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

/// An RFC 3339 time (`2026-01-02T03:04:05Z`) or a duration before `now` (`90m`, `7d`).
fn time(
    field: &'static str,
    v: Option<String>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, QueryError> {
    let Some(s) = v.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if let Ok(t) = DateTime::parse_from_rfc3339(&s) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    let shown = super::detail::clip(&s, 50);
    let why = || {
        format!("{field} {shown:?} is neither an RFC 3339 time (2026-01-02T03:04:05Z) nor a duration ago (24h, 7d)")
    };
    let ago = humantime::parse_duration(&s).map_err(|_| bad(field, why()))?;
    chrono::Duration::from_std(ago)
        .ok()
        .and_then(|ago| now.checked_sub_signed(ago))
        .map(Some)
        .ok_or_else(|| bad(field, why()))
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
                    since: Some("1h".into()),
                    until: Some("2h".into()),
                    ..Filters::default()
                },
                "since",
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
    }
}

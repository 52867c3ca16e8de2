//! Server-Sent Events framing (the `GET /api/v1/events` stream), per the WHATWG rules we need.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `message` when the server gave none.
    pub event: String,
    /// The `data:` fields joined with `\n`.
    pub data: String,
    pub id: Option<String>,
}

/// Collects fields line by line and hands out an event at each blank line.
#[derive(Debug, Default)]
pub struct SseParser {
    event: Option<String>,
    data: Option<String>,
    id: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one line without its terminator.
    pub fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None; // a comment: servers send these as keep-alives
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {} // `retry` and unknown fields matter only to browsers reconnecting
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        // An event without data is not dispatched (the spec's rule), only reset.
        let data = self.data.take()?;
        Some(SseEvent {
            event: event
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "message".into()),
            data,
            id: self.id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        text.split('\n').filter_map(|l| p.line(l)).collect()
    }

    #[test]
    fn named_events_with_data() {
        let evs = parse("event: agent\ndata: {\"id\":\"a\"}\n\n");
        assert_eq!(
            evs,
            [SseEvent {
                event: "agent".into(),
                data: "{\"id\":\"a\"}".into(),
                id: None
            }]
        );
    }

    #[test]
    fn comments_multiline_data_and_defaults() {
        let evs = parse(": keep-alive\n\ndata:one\ndata: two\nid: 7\n\nevent: x\n\n");
        assert_eq!(evs.len(), 1, "{evs:?}");
        assert_eq!(evs[0].event, "message");
        assert_eq!(evs[0].data, "one\ntwo");
        assert_eq!(evs[0].id.as_deref(), Some("7"));
    }

    #[test]
    fn only_one_leading_space_is_stripped_and_colons_in_values_stay() {
        let evs = parse("data:  a: b\n\n");
        assert_eq!(evs[0].data, " a: b");
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        assert!(parse("event: agent\ndata: {}").is_empty());
    }
}

//! The embedded web UI (owned by the web UI work; placeholder).

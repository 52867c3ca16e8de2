//! SQLite store (placeholder).

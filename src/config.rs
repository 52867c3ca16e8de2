//! Configuration (placeholder).

//! The command-line client (owned by the CLI work; placeholder).

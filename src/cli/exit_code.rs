//! Exit codes the CLI shares between its commands.

/// What coreutils `timeout` exits with, so scripts can tell a timeout from a failure.
pub const EXIT_TIMED_OUT: i32 = 124;

//! Exit codes the CLI shares between its commands.
//!
//! Every command exits 1 when it fails (the server cannot be reached, the API refuses, …) and 2
//! for a command line it cannot parse. `exec` and `wait` exit with the command's own code;
//! `chat` with how its (last) turn ended: [`stop_status`].

/// What coreutils `timeout` exits with, so scripts can tell a timeout from a failure.
pub const EXIT_TIMED_OUT: i32 = 124;
/// What a shell reports for a program ended by Ctrl-C (SIGINT): `chat` after a cancelled turn,
/// or a second Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 128 + 2;
/// What a shell reports for a writer killed by SIGPIPE (`exec … | head`).
pub const EXIT_BROKEN_PIPE: i32 = 128 + 13;

/// `chat`'s exit code for a turn's stop reason: 0 only for `end_turn`.
///
/// | stop reason | code |
/// |---|---|
/// | `end_turn` | 0 |
/// | `error` (the harness failed, died or could not be started; a notice said why) | 3 |
/// | `refusal` | 4 |
/// | `max_tokens` | 5 |
/// | `max_turn_requests` | 6 |
/// | `cancelled` | 130 |
/// | anything else | 7 |
pub fn stop_status(stop_reason: &str) -> i32 {
    match stop_reason {
        "end_turn" => 0,
        "error" => 3,
        "refusal" => 4,
        "max_tokens" => 5,
        "max_turn_requests" => 6,
        "cancelled" => EXIT_INTERRUPTED,
        _ => 7,
    }
}

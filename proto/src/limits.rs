//! The lengths more than one module checks: of a header, of an exec's command line, of a frame
//! and of a path. Every length is checked before anything is allocated for it.

/// Largest header or reply accepted, in bytes (for `exec` headers see [`MAX_EXEC_HEADER_LEN`]).
pub const MAX_HEADER_LEN: usize = 64 * 1024;
/// Most bytes an exec's command and environment may take together, counted the way `execve`
/// counts them: every argument and every `KEY=VALUE`, each with its terminating NUL.
pub const MAX_EXEC_ARGS_LEN: usize = 1024 * 1024;
/// Longest single argument or `KEY=VALUE`, with its NUL: Linux's `MAX_ARG_STRLEN` (32 pages of
/// 4 KiB). `execve` refuses a longer one with `E2BIG` whatever the total, so it is refused up
/// front with a reason instead of failing as exit code 126.
pub const MAX_EXEC_ARG_LEN: usize = 128 * 1024;
/// Largest `exec` header, in bytes. JSON may spend 6 bytes on one (`\u0001`) and 3 to 8 on the
/// quotes and commas around each string, which the NUL each one is counted with covers 6 times
/// over; so any request [`crate::ExecRequest::check_size`] accepts fits, with [`MAX_HEADER_LEN`] to
/// spare for `cwd` (at most [`MAX_PATH_LEN`] bytes) and the other fields.
pub const MAX_EXEC_HEADER_LEN: usize = 6 * MAX_EXEC_ARGS_LEN + MAX_HEADER_LEN;
/// Largest frame payload accepted, in bytes.
pub const MAX_FRAME_LEN: usize = 1024 * 1024;
/// Longest path accepted, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;

// The terminal WebSocket's messages (protocol: the terminal route's description in
// /api/v1/openapi.json). The OpenAPI document describes them in prose only, so api.gen.ts has no
// schema for them: they are typed here, once. No DOM, no xterm: the state machine (termconn.ts)
// and its node tests use this.

// Close codes of the terminal route.
export const CLOSE_SHELL_EXITED = 1000;
export const CLOSE_BAD_OFFSET = 4400;
export const CLOSE_SESSION_GONE = 4404;
export const CLOSE_TOO_MANY_VIEWERS = 4409;
export const CLOSE_TOO_MANY_STREAMS = 4429;
/** Closes after which the session is still there: going away, no status, dropped, server error, restart, try again, too many channels. */
export const REATTACHABLE: ReadonlySet<number> = new Set([1001, 1005, 1006, 1011, 1012, 1013, 1014, CLOSE_TOO_MANY_STREAMS]);
/** sandboxd's viewer cap per session (close 4409 / HTTP 409). */
export const MAX_VIEWERS = 32;

/** A control message from the server (a text message). Unknown types are dropped by `parseControl`. */
export type ServerControl =
  /** The socket reached a session: bytes after this are its output, from `offset`. */
  | { type: 'session'; id: string; offset: number; cols: number | null; rows: number | null }
  /** The next binary message redraws the whole screen as it was at `offset` (not counted). */
  | { type: 'redraw'; offset: number }
  /** The session took this size (from any viewer, this one too). */
  | { type: 'resize'; cols: number; rows: number }
  /** The shell exited; a close 1000 follows. */
  | { type: 'exit'; code: number | null };

const num = (v: unknown): number | null => (typeof v === 'number' ? v : null);

/** A text message as control, or null (not JSON, not an object, or a type this client does not know). */
export function parseControl(text: string): ServerControl | null {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return null;
  }
  if (!raw || typeof raw !== 'object') return null;
  const m = raw as Record<string, unknown>;
  switch (m.type) {
    case 'session':
      return { type: 'session', id: String(m.id), offset: Number(m.offset) || 0, cols: num(m.cols), rows: num(m.rows) };
    case 'redraw':
      return { type: 'redraw', offset: Number(m.offset) || 0 };
    case 'resize':
      return { type: 'resize', cols: Number(m.cols), rows: Number(m.rows) };
    case 'exit':
      return { type: 'exit', code: num(m.code) };
    default:
      return null;
  }
}

/** The control message that resizes the session. */
export const encodeResize = (cols: number, rows: number): string => JSON.stringify({ type: 'resize', cols, rows });

/** A close's reason for people: the server's words, else what the code means. */
export const closeReason = (code: number, reason: string): string =>
  reason || (code === 1006 ? 'the connection was refused or dropped' : `code ${code}`);

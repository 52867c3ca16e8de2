// The `?next=` of the UI's address: where to go once signed in. A private preview's host sends a
// browser that is not signed in to `/api/v1/previews/{pid}/open`, which sends it here as
// `/?next=/api/v1/previews/{pid}/open?next=…`; once signed in, the UI goes back there. Only that
// route, on this origin, is ever followed: any other target would make the UI an open redirect.

/** The path of the hand-off route, as the browser normalizes it. */
const OPEN = /^\/api\/v1\/previews\/[^/]+\/open$/;
/** Back slashes (which browsers read as `/`) and control characters. */
const UNSAFE = /[\\\u0000-\u001f\u007f]/;

/**
 * The `next` of `search` (a `location.search`) when it is a preview's hand-off on `origin`,
 * normalized (`/api/v1/previews/{pid}/open?…`); otherwise null.
 */
export function nextTarget(search: string, origin: string): string | null {
  const raw = new URLSearchParams(search).get('next');
  if (!raw || !raw.startsWith('/api/v1/previews/') || UNSAFE.test(raw)) return null;
  let url: URL;
  try {
    url = new URL(raw, origin);
  } catch {
    return null;
  }
  if (url.origin !== origin || !OPEN.test(url.pathname) || url.hash) return null;
  return url.pathname + url.search;
}

/** What the UI keeps of its last hand-off (`sessionStorage`). */
export const NEXT_KEY = 'agenthold.next';

/**
 * True when `target` was followed from this tab less than `windowMs` ago: the hand-off came
 * straight back (the browser did not send the session cookie along), and following it again
 * would loop. Otherwise records this attempt and answers false.
 */
export function isRepeat(storage: Pick<Storage, 'getItem' | 'setItem'>, target: string, now: number, windowMs = 15_000): boolean {
  try {
    const last = JSON.parse(storage.getItem(NEXT_KEY) ?? 'null') as { target?: unknown; at?: unknown } | null;
    if (last && last.target === target && typeof last.at === 'number' && now - last.at >= 0 && now - last.at < windowMs) return true;
  } catch {
    /* an unreadable record is no record */
  }
  try {
    storage.setItem(NEXT_KEY, JSON.stringify({ target, at: now }));
  } catch {
    /* storage refused: no guard, but no loop either unless the cookie is refused too */
  }
  return false;
}

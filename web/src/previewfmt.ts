// How ports and previews read on the page: ports grouped by number, a preview's expiry, its URL
// with the token (shown once), and which URLs may become links.
import type { ListeningPort, Preview, PreviewAccess } from './api';

export const ACCESS: PreviewAccess[] = ['private', 'token', 'public'];

/** What each access means, for the choice and the list. */
export const ACCESS_HINT: Record<PreviewAccess, string> = {
  private: 'Signed-in people only',
  token: 'Anyone with the link and its token',
  public: 'Anyone who can reach the preview listener',
};

/** One port of the sandbox: the addresses it listens on there, and who listens. */
export interface PortRow {
  port: number;
  addresses: string[];
  process: string | null;
}

/** The listening sockets as one row per port (a server often listens on both `0.0.0.0` and `::`), by port. */
export function portRows(list: ListeningPort[]): PortRow[] {
  const m = new Map<number, PortRow>();
  for (const l of list) {
    let r = m.get(l.port);
    if (!r) {
      r = { port: l.port, addresses: [], process: null };
      m.set(l.port, r);
    }
    if (!r.addresses.includes(l.address)) r.addresses.push(l.address);
    r.process ??= l.process ?? null;
  }
  return [...m.values()].sort((a, b) => a.port - b.port);
}

/** The preview's URL with its token, the one link that opens a `token` preview for anyone. */
export function tokenUrl(url: string, token: string): string {
  const u = new URL(url);
  u.searchParams.set('token', token);
  return u.toString();
}

/** `url` if it is an http(s) URL, else null (it is then shown as text, never as a link). */
export function webUrl(url: string): string | null {
  try {
    const u = new URL(url);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.toString() : null;
  } catch {
    return null;
  }
}

/** "never", "expired", "in 12 min", "in 3 h", "in 2 d". */
export function expiryText(expiresAt: string | null | undefined, now = Date.now()): string {
  if (!expiresAt) return 'never';
  const ms = new Date(expiresAt).getTime() - now;
  if (Number.isNaN(ms)) return expiresAt;
  if (ms <= 0) return 'expired';
  if (ms <= 60_000) return 'in under a minute';
  const min = Math.round(ms / 60_000);
  if (min < 60) return `in ${min} min`;
  const hours = Math.round(min / 60);
  if (hours < 48) return `in ${hours} h`;
  return `in ${Math.round(hours / 24)} d`;
}

/** The preview of `port` among `previews`, if any. */
export const previewOf = (previews: Iterable<Preview>, port: number): Preview | undefined => {
  for (const p of previews) if (p.port === port) return p;
  return undefined;
};

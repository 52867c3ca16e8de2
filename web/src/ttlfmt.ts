// How an agent's lifetime reads: the time left before its TTL destroys it ("destroyed in 4 min"),
// to the second in its last minutes, and when it counts as expiring (the server's `expiring`
// event comes a minute before; the page also says so by the clock).

/** The time left until `expiresAt`, for the agent's header and list: null without a TTL. */
export function ttlText(expiresAt: string | null | undefined, now = Date.now()): string | null {
  if (!expiresAt) return null;
  const ms = new Date(expiresAt).getTime() - now;
  if (Number.isNaN(ms)) return null;
  if (ms <= 0) return 'destroyed any moment now';
  return `destroyed in ${leftText(ms)}`;
}

/** "42 s", "3 min 05 s" (under ten minutes, so it visibly ticks), "4 min", "2 h 5 min", "3 d 4 h". */
export function leftText(ms: number): string {
  const s = Math.ceil(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  const min = Math.ceil(s / 60);
  if (min < 60) return `${min} min`;
  const h = Math.floor(min / 60);
  if (h < 48) return min % 60 ? `${h} h ${min % 60} min` : `${h} h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}

/** Whether the page should warn: the server said `expiring`, or under a minute is left by the clock. */
export function isExpiring(expiresAt: string | null | undefined, told: boolean, now = Date.now()): boolean {
  if (!expiresAt) return false;
  const ms = new Date(expiresAt).getTime() - now;
  return told || (!Number.isNaN(ms) && ms <= 60_000);
}

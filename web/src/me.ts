// Who is signed in (`GET /api/v1/me`), loaded once per sign-in: the header names the user and
// offers the pages their role opens (Users for admins). The server decides every request by
// itself; this only spares people links that would answer 403.
import { api, type Me, type Scope } from './api';

let current: Me | null = null;

export const me = {
  /** Loads who is signed in; a failure leaves nobody known (the pages then show every link). */
  async load(): Promise<void> {
    try {
      current = await api.me();
    } catch {
      current = null;
    }
  },
  clear(): void {
    current = null;
  },
  get(): Me | null {
    return current;
  },
  /** Whether the signed-in user has `scope`; true while unknown, so nothing is hidden by mistake. */
  can(scope: Scope): boolean {
    return current === null || current.scopes.includes(scope);
  },
};

// Live agent state: one list fetch, then the SSE stream `GET /api/v1/events`. No polling.
import { api, errorMessage, BASE, type Agent, type EgressEvent, type EgressLogEntry, type ProcessEvent, type PullProgress } from './api';

/** Refusals (and secret uses) kept per agent for its page (newest first): the server's egress log, then the event stream. */
const BLOCKED_KEPT = 20;

type Listener = () => void;
type ProcessListener = (e: ProcessEvent) => void;
/** Events of the stream that the store passes on without keeping them (see `on`). */
export type PassedEvent = 'session' | 'session_deleted' | 'approval';
type EventListener = (data: unknown) => void;

export type StreamStatus = 'connecting' | 'live' | 'reconnecting';

const sameDestination = (a: EgressEvent, b: EgressEvent) => a.host === b.host && a.port === b.port;
const sameUse = (a: EgressEvent, b: EgressEvent) => sameDestination(a, b) && a.secret === b.secret;

class AgentStore {
  readonly agents = new Map<string, Agent>();
  /** The `expiresAt` each agent's `expiring` event told of (a keep-alive moves the deadline past it). */
  readonly expiring = new Map<string, string>();
  /** Ids deleted while this page was open (so an agent page can say so). */
  readonly deleted = new Set<string>();
  loaded = false;
  status: StreamStatus = 'connecting';
  loadError: string | null = null;
  /** Each agent's recent refusals by the egress proxy, newest first, one per destination. */
  readonly blocked = new Map<string, EgressEvent[]>();
  /** Each agent's recent uses of its secrets (swapped in by the proxy), newest first, one per secret and destination. */
  readonly secretUses = new Map<string, EgressEvent[]>();
  private listeners = new Set<Listener>();
  private processListeners = new Set<ProcessListener>();
  private eventListeners = new Map<PassedEvent, Set<EventListener>>();
  private source: EventSource | null = null;
  private pending: Array<(m: Map<string, Agent>) => void> | null = null;
  private generation = 0;

  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /**
   * `process` events (a background process started or ended), as they come: the store keeps
   * no processes, since listing them wakes a sleeping agent; a page that lists them merges these.
   */
  subscribeProcesses(fn: ProcessListener): () => void {
    this.processListeners.add(fn);
    return () => this.processListeners.delete(fn);
  }

  /**
   * `session`, `session_deleted` and `approval` events (parsed JSON), as they come: the pages
   * that show sessions and approvals keep them. After a drop the stream does not repeat what it
   * missed: such a page loads its list again when `status` goes back to `live`.
   */
  on(name: PassedEvent, fn: EventListener): () => void {
    const set = this.eventListeners.get(name) ?? new Set<EventListener>();
    this.eventListeners.set(name, set);
    set.add(fn);
    return () => set.delete(fn);
  }

  private emit(): void {
    for (const fn of [...this.listeners]) fn();
  }

  /** Newest first by creation time, then by name. */
  sorted(): Agent[] {
    return [...this.agents.values()].sort(
      (a, b) => (b.createdAt ?? '').localeCompare(a.createdAt ?? '') || a.name.localeCompare(b.name),
    );
  }

  /** Apply an Agent object we got from any answer (API call or event). */
  put(agent: Agent): void {
    if (this.deleted.has(agent.id)) return;
    this.agents.set(agent.id, agent);
    this.emit();
  }

  /**
   * Apply an Agent from an API answer (create, start, stop…). While the event stream is live it
   * already carries every state change, possibly ahead of this answer: then an answer for a
   * known agent is older news and is dropped, so a late answer cannot undo a newer state.
   */
  putAnswer(agent: Agent): void {
    if (this.status === 'live' && this.agents.has(agent.id)) return;
    this.put(agent);
  }

  private onAgent(agent: Agent): void {
    if (this.pending) this.pending.push((m) => m.set(agent.id, agent));
    this.put(agent);
  }

  /** A pull event: the agent shows the pull while it runs, and none once it has ended. */
  private onPull(id: string, progress: PullProgress): void {
    const pull = progress.status === 'pulling' ? progress : null;
    const apply = (m: Map<string, Agent>) => {
      const a = m.get(id);
      if (a) m.set(id, { ...a, pull });
    };
    if (this.pending) this.pending.push(apply);
    if (this.deleted.has(id) || !this.agents.has(id)) return;
    apply(this.agents);
    this.emit();
  }

  /**
   * Adds the refusals and secret uses of agent `id`'s egress log (oldest first), as the server
   * kept them, under those the stream brought since (which are newer): the lists survive a reload.
   */
  seedBlocked(id: string, log: EgressLogEntry[]): void {
    const blocked = [...(this.blocked.get(id) ?? [])];
    const uses = [...(this.secretUses.get(id) ?? [])];
    for (const e of [...log].reverse()) {
      const event: EgressEvent = { id, host: e.host, port: e.port, allowed: e.allowed, rule: e.rule, reason: e.reason, secret: e.secret, closed: true, bytesUp: 0, bytesDown: 0 };
      if (!e.allowed && !blocked.some((b) => sameDestination(b, event))) blocked.push(event);
      if (e.allowed && e.secret && !uses.some((u) => sameUse(u, event))) uses.push(event);
    }
    this.blocked.set(id, blocked.slice(0, BLOCKED_KEPT));
    this.secretUses.set(id, uses.slice(0, BLOCKED_KEPT));
    this.emit();
  }

  private onEgress(e: EgressEvent): void {
    if (e.allowed) {
      if (!e.secret) return;
      const uses = (this.secretUses.get(e.id) ?? []).filter((u) => !sameUse(u, e));
      uses.unshift(e);
      this.secretUses.set(e.id, uses.slice(0, BLOCKED_KEPT));
    } else {
      const list = (this.blocked.get(e.id) ?? []).filter((b) => !sameDestination(b, e));
      list.unshift(e);
      this.blocked.set(e.id, list.slice(0, BLOCKED_KEPT));
    }
    this.emit();
  }

  /** An `expiring` event: the agent is destroyed in a minute or less unless kept alive. */
  private onExpiring(id: string, expiresAt: string): void {
    this.expiring.set(id, expiresAt);
    const a = this.agents.get(id);
    if (a && !this.deleted.has(id) && a.expiresAt !== expiresAt) this.agents.set(id, { ...a, expiresAt });
    this.emit();
  }

  /** Whether the agent's current deadline is the one its `expiring` event told of. */
  toldExpiring(a: Agent): boolean {
    return !!a.expiresAt && this.expiring.get(a.id) === a.expiresAt;
  }

  private onDeleted(id: string): void {
    if (this.pending) this.pending.push((m) => m.delete(id));
    this.deleted.add(id);
    this.agents.delete(id);
    this.emit();
  }

  /** Load the whole list; events that arrive meanwhile are replayed on top of it. */
  private reload(gen: number): void {
    const pending: Array<(m: Map<string, Agent>) => void> = [];
    this.pending = pending;
    api
      .agents()
      .then((list) => {
        // Only the newest load of the newest connection counts.
        if (gen !== this.generation || this.pending !== pending) return;
        const m = new Map<string, Agent>();
        for (const a of list) if (!this.deleted.has(a.id)) m.set(a.id, a);
        for (const f of pending) f(m);
        this.pending = null;
        this.agents.clear();
        for (const [k, v] of m) this.agents.set(k, v);
        this.loaded = true;
        this.loadError = null;
        this.emit();
      })
      .catch((e: unknown) => {
        if (gen !== this.generation || this.pending !== pending) return;
        this.pending = null;
        this.loadError = errorMessage(e);
        this.emit();
      });
  }

  start(): void {
    if (this.source) return;
    const gen = ++this.generation;
    this.status = this.loaded ? 'reconnecting' : 'connecting';
    const es = new EventSource(`${BASE}/events`, { withCredentials: true });
    this.source = es;
    // Show the list at once, and load it again whenever the stream (re)opens so that nothing
    // that changed while it was not connected is missed.
    if (!this.loaded) this.reload(gen);
    es.addEventListener('open', () => {
      if (gen !== this.generation) return;
      this.status = 'live';
      this.reload(gen);
      this.emit();
    });
    es.addEventListener('agent', (ev) => {
      try {
        this.onAgent(JSON.parse((ev as MessageEvent<string>).data) as Agent);
      } catch {
        /* ignore a malformed event */
      }
    });
    es.addEventListener('pull', (ev) => {
      try {
        const { id, ...progress } = JSON.parse((ev as MessageEvent<string>).data) as PullProgress & { id: string };
        if (id) this.onPull(id, progress);
      } catch {
        /* ignore a malformed event */
      }
    });
    es.addEventListener('egress', (ev) => {
      try {
        const e = JSON.parse((ev as MessageEvent<string>).data) as EgressEvent;
        if (e.id) this.onEgress(e);
      } catch {
        /* ignore a malformed event */
      }
    });
    es.addEventListener('process', (ev) => {
      let e: ProcessEvent;
      try {
        e = JSON.parse((ev as MessageEvent<string>).data) as ProcessEvent;
      } catch {
        return; /* ignore a malformed event */
      }
      if (!e.id || !e.process?.id) return;
      for (const fn of [...this.processListeners]) fn(e);
    });
    for (const name of ['session', 'session_deleted', 'approval'] as const) {
      es.addEventListener(name, (ev) => {
        let data: unknown;
        try {
          data = JSON.parse((ev as MessageEvent<string>).data);
        } catch {
          return; /* ignore a malformed event */
        }
        for (const fn of [...(this.eventListeners.get(name) ?? [])]) fn(data);
      });
    }
    es.addEventListener('expiring', (ev) => {
      try {
        const { id, expiresAt } = JSON.parse((ev as MessageEvent<string>).data) as { id: string; expiresAt: string };
        if (id && expiresAt) this.onExpiring(id, expiresAt);
      } catch {
        /* ignore a malformed event */
      }
    });
    es.addEventListener('deleted', (ev) => {
      try {
        const { id } = JSON.parse((ev as MessageEvent<string>).data) as { id: string };
        if (id) this.onDeleted(id);
      } catch {
        /* ignore */
      }
    });
    es.addEventListener('error', () => {
      if (gen !== this.generation) return;
      this.status = 'reconnecting';
      this.emit();
      // EventSource retries by itself, except after an HTTP error answer (e.g. 401).
      if (es.readyState === EventSource.CLOSED) {
        this.source = null;
        api
          .session()
          .then((ok) => {
            if (gen !== this.generation) return;
            if (ok) setTimeout(() => gen === this.generation && this.start(), 2000);
            else this.onSignedOut?.();
          })
          .catch(() => setTimeout(() => gen === this.generation && this.start(), 3000));
      }
    });
  }

  stop(): void {
    this.generation++;
    this.source?.close();
    this.source = null;
    this.agents.clear();
    this.deleted.clear();
    this.loaded = false;
  }

  onSignedOut: (() => void) | null = null;
}

export const store = new AgentStore();

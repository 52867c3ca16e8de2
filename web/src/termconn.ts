// The terminal's connection state machine: which session this view shows, the offset of its
// output, reattaching after a drop (with backoff), and what each close code means. No DOM and no
// xterm: the socket, the storage, the timers and the screen are ports, so node tests drive it
// (web/test/termconn.test.mjs). The xterm view is terminal.ts.
import {
  CLOSE_BAD_OFFSET,
  CLOSE_SESSION_GONE,
  CLOSE_SHELL_EXITED,
  CLOSE_TOO_MANY_STREAMS,
  CLOSE_TOO_MANY_VIEWERS,
  MAX_VIEWERS,
  REATTACHABLE,
  closeReason,
  encodeResize,
  parseControl,
  type ServerControl,
} from './termwire';

export type TermStatus = 'idle' | 'connecting' | 'connected' | 'reconnecting' | 'ended' | 'disconnected';

const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5000;
/** Keystrokes kept while (re)connecting, sent once the session is back. */
const MAX_QUEUED_BYTES = 64 * 1024;
/** How long a `resize` naming a size we sent is taken for the echo of our own. */
const ECHO_WINDOW_MS = 3000;
/** How long offset changes wait before they are stored (every change is stored on a state change). */
const SAVE_DELAY_MS = 1000;

/** This tab's session of an agent, as stored (a reload reattaches). */
export interface StoredSession {
  id: string;
  offset: number;
}

/** One WebSocket, as the machine uses it. */
export interface TermSocket {
  /** True while the socket is open (sending is possible). */
  readonly isOpen: boolean;
  send(data: string | Uint8Array): void;
  close(code: number): void;
}

/** What a socket reports; `open` is the upgrade. */
export interface TermSocketEvents {
  open(): void;
  text(data: string): void;
  binary(bytes: Uint8Array): void;
  close(code: number, reason: string): void;
}

/** A session as the session list reports it. */
export interface ListedSession {
  id: string;
  viewers: number;
  offset: number;
}

/** What the machine needs from the world; the view gives the real ones, tests give fakes. */
export interface TermPorts {
  /** Opens a socket: a new session (`session` null), or an attach from `offset` (null: send a redraw). */
  openSocket(cols: number, rows: number, session: string | null, offset: number | null, events: TermSocketEvents): TermSocket;
  /** The agent's sessions; 'no-agent' when the agent is gone, null when the list could not be had. */
  listSessions(): Promise<ListedSession[] | 'no-agent' | null>;
  loadSession(): StoredSession | null;
  storeSession(v: StoredSession | null): void;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  /** A monotonic clock in milliseconds. */
  now(): number;
  isOnline(): boolean;
  agentName(): string;

  /** The status changed (`detail` says why, for a tooltip). */
  status(s: TermStatus, text: string, detail: string): void;
  /** Make the screen ready to be sized (called before each socket opens). */
  prepare(): void;
  /** The screen's size. */
  size(): { cols: number; rows: number };
  /** Output for the screen (session output, or the server's status text before `session`). */
  output(bytes: Uint8Array): void;
  /** The whole screen anew: reset it, then show these bytes. */
  redraw(bytes: Uint8Array): void;
  /** A line of our own between the output (dim). */
  notice(text: string): void;
  /** Another viewer sized the session: show that size without sending it back. */
  remoteResize(cols: number, rows: number): void;
  /** A new session starts on a screen that may show an old one. */
  freshSession(): void;
}

/** The connection of one terminal view: see the README's "Terminal sessions" for the behaviour. */
export class TermConnection {
  private state: TermStatus = 'idle';
  private detail = '';
  private ws: TermSocket | null = null;
  // The session this view shows, and how much of its output the screen holds (`offset` is the
  // offset of the next session byte). `inSync` is false until the screen has the session's
  // screen: a fresh page attaches without an offset and gets a redraw.
  private sid: string | null;
  private offset = 0;
  private inSync = false;
  /** The current socket has had its `session` message (bytes after it are session output). */
  private live = false;
  /** Some socket of this view reached a session (so a vanished session was one the user saw). */
  private attachedOnce = false;
  private exitCode: number | null = null;
  /** Bumped whenever the socket is replaced, so stale timers and answers do nothing. */
  private gen = 0;
  private retryTimer: unknown = null;
  private retryDelay = 0;
  private wentOffline = false;
  private queued: Uint8Array[] = [];
  private queuedBytes = 0;
  private saveTimer: unknown = null;
  // Sizes we sent lately: every viewer (we too) hears of each resize, and while a window is
  // dragged those echoes trail behind; applying them would make the screen flicker through old sizes.
  private readonly sentSizes = new Map<string, number>();

  constructor(private readonly ports: TermPorts) {
    this.sid = ports.loadSession()?.id ?? null;
  }

  get status(): TermStatus {
    return this.state;
  }
  /** The session shown (or to be reattached), if any. */
  get session(): string | null {
    return this.sid;
  }
  /** The offset of the next byte of the session's output. */
  get outputOffset(): number {
    return this.offset;
  }

  /** Open the terminal: reattach to the stored session, or start one (no-op while one is open or opening). */
  connect(): void {
    if (this.state === 'connecting' || this.state === 'connected' || this.state === 'reconnecting') return;
    if (this.state === 'idle') this.open();
    else this.startNew();
  }

  /** Leave the session shown (it lives on) and start a new one. */
  startNew(): void {
    this.detach();
    this.ports.freshSession();
    this.sid = null;
    this.inSync = false;
    this.save();
    this.retryDelay = 0;
    this.open();
  }

  /** Reattach to the session now (the "Reconnect" button, or back online). */
  reattachNow(): void {
    if (!this.sid) return;
    this.detach();
    this.retryDelay = 0;
    this.setStatus('reconnecting', 'Reconnecting…');
    this.open();
  }

  /** Show another session of the agent (its screen comes as a redraw: reset the screen first). */
  attach(id: string): void {
    this.detach();
    this.sid = id;
    this.inSync = false;
    this.save();
    this.open();
  }

  /** Keys typed: sent, or kept while (re)connecting. */
  sendKeys(bytes: Uint8Array): void {
    if (this.ws && this.live && this.ws.isOpen) this.ws.send(bytes);
    else if ((this.state === 'connecting' || this.state === 'reconnecting') && this.queuedBytes + bytes.length <= MAX_QUEUED_BYTES) {
      this.queued.push(bytes);
      this.queuedBytes += bytes.length;
    }
  }

  /** The screen took this size here: the session takes it too. */
  sendSize(cols: number, rows: number): void {
    if (!(this.ws && this.live)) return;
    const now = this.ports.now();
    for (const [k, t] of this.sentSizes) if (now - t > ECHO_WINDOW_MS) this.sentSizes.delete(k);
    this.sentSizes.set(`${cols}x${rows}`, now);
    this.sendControl(encodeResize(cols, rows));
  }

  // A network change can leave a socket that looks open but is dead (Chromium even keeps it open
  // through its offline emulation): once back online, reattach from our offset. It is exact, so
  // a socket that was fine all along costs only a round trip.
  offline(): void {
    if (this.ws && this.live) this.wentOffline = true;
    else if (this.state === 'reconnecting') this.setStatus('reconnecting', 'Offline — reconnecting…', this.detail);
  }
  online(): void {
    const was = this.wentOffline;
    this.wentOffline = false;
    if (this.state === 'reconnecting' || (was && this.ws && this.live)) this.reattachNow();
  }

  /** Store the session and offset now. */
  save(): void {
    this.ports.clearTimeout(this.saveTimer);
    this.saveTimer = null;
    this.ports.storeSession(this.sid ? { id: this.sid, offset: this.offset } : null);
  }

  /** Store, and drop the socket (the session lives on in the sandbox). */
  dispose(): void {
    this.save();
    this.detach();
    this.ports.clearTimeout(this.saveTimer);
  }

  private saveSoon(): void {
    if (this.saveTimer === null) this.saveTimer = this.ports.setTimeout(() => this.save(), SAVE_DELAY_MS);
  }

  private setStatus(s: TermStatus, text: string, detail = ''): void {
    this.state = s;
    this.detail = detail;
    this.ports.status(s, text, detail);
  }

  private sendControl(msg: string): void {
    if (this.ws && this.live && this.ws.isOpen) this.ws.send(msg);
  }

  private isOwnEcho(cols: number, rows: number): boolean {
    const t = this.sentSizes.get(`${cols}x${rows}`);
    return t !== undefined && this.ports.now() - t < ECHO_WINDOW_MS;
  }

  private clearQueue(): void {
    this.queued = [];
    this.queuedBytes = 0;
  }

  private onControl(msg: ServerControl, sock: { redrawAt: number | null }): void {
    switch (msg.type) {
      case 'session': {
        this.sid = msg.id;
        this.offset = msg.offset;
        this.live = true;
        this.inSync = true;
        this.attachedOnce = true;
        this.retryDelay = 0;
        this.exitCode = null;
        this.save();
        this.setStatus('connected', 'Connected');
        // The attach asked for our size; the box may have changed while the socket opened.
        const { cols, rows } = this.ports.size();
        if (msg.cols !== cols || msg.rows !== rows) this.sendSize(cols, rows);
        const keys = this.queued;
        this.clearQueue();
        for (const k of keys) this.sendKeys(k);
        break;
      }
      case 'redraw':
        sock.redrawAt = msg.offset;
        break;
      case 'resize':
        if (!this.isOwnEcho(msg.cols, msg.rows)) this.ports.remoteResize(msg.cols, msg.rows);
        break;
      case 'exit':
        this.exitCode = msg.code;
        break;
    }
  }

  /** The session is over: forget it and offer a new one. */
  private ended(line: string, status: string): void {
    this.sid = null;
    this.inSync = false;
    this.clearQueue();
    this.save();
    this.ports.notice(`${line} Press “New session” to start another.`);
    this.setStatus('ended', status);
  }
  private slept(): void {
    this.ended('The session ended because the agent slept or was restarted.', 'Session ended');
  }

  /** A final failure that reattaching will not cure by itself. */
  private disconnected(line: string, status: string, detail = ''): void {
    this.clearQueue();
    this.ports.notice(line);
    this.setStatus('disconnected', status, detail);
  }
  private tooManyViewers(): void {
    this.disconnected(
      `This session has too many viewers (${MAX_VIEWERS}). Close one and press “Reconnect”, or start a new session.`,
      'Too many viewers',
    );
  }

  private reconnectLater(detail: string): void {
    this.retryDelay = this.retryDelay ? Math.min(this.retryDelay * 2, RETRY_MAX_MS) : RETRY_FIRST_MS;
    this.setStatus('reconnecting', this.ports.isOnline() ? 'Reconnecting…' : 'Offline — reconnecting…', detail);
    this.ports.clearTimeout(this.retryTimer);
    const g = this.gen;
    this.retryTimer = this.ports.setTimeout(() => {
      if (g === this.gen) this.open();
    }, this.retryDelay);
  }

  /** This tab's session from before a reload is gone: forget it and start a new one. */
  private replaceStale(): void {
    this.sid = null;
    this.save();
    this.open();
  }

  /**
   * An attach failed before the upgrade (the browser hides the HTTP status: 404 gone, 409 too
   * many viewers, 400 offset, or no network). The session list (which wakes nothing) tells which.
   */
  private async diagnose(detail: string): Promise<void> {
    const g = this.gen;
    const sid = this.sid;
    const list = await this.ports.listSessions();
    let verdict: 'retry' | 'gone' | 'busy' | 'ahead' | 'no-agent' = 'retry';
    if (list === 'no-agent') verdict = 'no-agent';
    else if (list) {
      const found = list.find((t) => t.id === sid);
      verdict = !found ? 'gone' : found.viewers >= MAX_VIEWERS ? 'busy' : this.inSync && this.offset > found.offset ? 'ahead' : 'retry';
    }
    if (g !== this.gen || sid !== this.sid) return;
    if (verdict === 'gone') return this.attachedOnce ? this.slept() : this.replaceStale();
    if (verdict === 'busy') return this.tooManyViewers();
    if (verdict === 'no-agent') return this.ended(`${this.ports.agentName()} no longer exists.`, 'Agent gone');
    if (verdict === 'ahead') this.inSync = false;
    this.reconnectLater(detail);
  }

  private onClose(code: number, reason: string, upgraded: boolean): void {
    this.live = false;
    const why = closeReason(code, reason);
    if (code === CLOSE_SHELL_EXITED) {
      const exit = this.exitCode !== null ? ` (exit code ${this.exitCode})` : '';
      return this.ended(`The shell ended${exit}.`, 'Shell ended');
    }
    if (code === CLOSE_SESSION_GONE) return this.attachedOnce ? this.slept() : this.replaceStale();
    if (code === CLOSE_TOO_MANY_VIEWERS) return this.tooManyViewers();
    // The agent had too many channels open (a flood): no session was harmed, so try again
    // later with backoff, a new session as well as an attach.
    if (code === CLOSE_TOO_MANY_STREAMS) return this.reconnectLater(why);
    if (code === CLOSE_BAD_OFFSET && this.sid && this.inSync) {
      // Our offset is past the session's output (it cannot be replayed): take a redraw instead.
      this.inSync = false;
      return this.open();
    }
    if (this.sid && REATTACHABLE.has(code)) {
      if (!upgraded) return void this.diagnose(why);
      return this.reconnectLater(why);
    }
    this.disconnected(`Disconnected from ${this.ports.agentName()}: ${why}`, 'Disconnected', why);
  }

  /** Opens a socket: attaches to the session (from `offset` when the screen holds its output), or starts one. */
  private open(): void {
    this.gen++;
    this.ports.clearTimeout(this.retryTimer);
    this.ports.prepare();
    if (this.state !== 'reconnecting') this.setStatus('connecting', 'Connecting…');
    const { cols, rows } = this.ports.size();
    let upgraded = false;
    const msgState = { redrawAt: null as number | null };
    const current = () => this.ws === sock;
    const sock: TermSocket = this.ports.openSocket(cols, rows, this.sid, this.inSync ? this.offset : null, {
      open: () => {
        if (current()) upgraded = true;
      },
      // Text is always control JSON, never terminal output.
      text: (data) => {
        if (!current()) return;
        const msg = parseControl(data);
        if (msg) this.onControl(msg, msgState);
      },
      binary: (bytes) => {
        if (!current()) return;
        if (msgState.redrawAt !== null) {
          // The screen as of redrawAt: start from a clean screen; these bytes are not counted.
          this.ports.redraw(bytes);
          this.offset = msgState.redrawAt;
          msgState.redrawAt = null;
          this.save();
          return;
        }
        this.ports.output(bytes);
        // Before the `session` message, binary is the server's status text ("Starting the sandbox…").
        if (this.live) {
          this.offset += bytes.length;
          this.saveSoon();
        }
      },
      close: (code, reason) => {
        if (!current()) return;
        this.ws = null;
        this.onClose(code, reason, upgraded);
      },
    });
    this.ws = sock;
    this.live = false;
  }

  /** Drops the current socket (the session lives on in the sandbox) and ignores what it still says. */
  private detach(): void {
    this.gen++;
    this.ports.clearTimeout(this.retryTimer);
    const s = this.ws;
    this.ws = null;
    this.live = false;
    s?.close(1000);
  }
}

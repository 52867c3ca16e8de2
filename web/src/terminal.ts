// The browser terminal: xterm.js over the `/terminal` WebSocket (binary = bytes, text = JSON control).
import { Terminal, type ITheme } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { WebLinksAddon } from '@xterm/addon-web-links';
import '@xterm/xterm/css/xterm.css';
import { api, ApiError, type TerminalSession } from './api';
import { formatTime, h, replace, setText, toast } from './dom';

declare global {
  interface Window {
    /** The live xterm Terminal, for the browser tests. */
    __agentholdTerm?: Terminal;
    /** The terminal's current WebSocket, for the browser tests. */
    __agentholdTermSocket?: WebSocket;
  }
}

const DARK: ITheme = {
  background: '#11151c',
  foreground: '#d8dee9',
  cursor: '#f0f4fa',
  cursorAccent: '#11151c',
  selectionBackground: '#3b5b8c',
  black: '#1b2029',
  brightBlack: '#5c6677',
};
const LIGHT: ITheme = {
  background: '#fbfcfd',
  foreground: '#1f2430',
  cursor: '#1f2430',
  cursorAccent: '#fbfcfd',
  selectionBackground: '#b9d3f7',
  black: '#1f2430',
  brightBlack: '#6b7280',
  white: '#a0a6b0',
  brightWhite: '#c5cad3',
  yellow: '#8a6d00',
  brightYellow: '#9b7b00',
};

export type TermStatus = 'idle' | 'connecting' | 'connected' | 'reconnecting' | 'ended' | 'disconnected';

export interface TerminalView {
  el: HTMLElement;
  /** Open the terminal: reattach to this tab's session, or start one (no-op while one is open or opening). */
  connect(): void;
  status(): TermStatus;
  /** Tell the view the panel became visible (refit). */
  shown(): void;
  focus(): void;
  setWaiting(message: string | null): void;
  dispose(): void;
}

// Close codes of the terminal route (see its description in /api/v1/openapi.json).
const CLOSE_SHELL_EXITED = 1000;
const CLOSE_BAD_OFFSET = 4400;
const CLOSE_SESSION_GONE = 4404;
const CLOSE_TOO_MANY_VIEWERS = 4409;
const CLOSE_TOO_MANY_STREAMS = 4429;
/** Closes after which the session is still there: going away, no status, dropped, server error, restart, try again, too many channels. */
const REATTACHABLE = new Set([1001, 1005, 1006, 1011, 1012, 1013, 1014, CLOSE_TOO_MANY_STREAMS]);
/** sandboxd's viewer cap per session (close 4409 / HTTP 409). */
const MAX_VIEWERS = 32;
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5000;
/** Keystrokes kept while (re)connecting, sent once the session is back. */
const MAX_QUEUED_BYTES = 64 * 1024;
/** How long a `resize` naming a size we sent is taken for the echo of our own. */
const ECHO_WINDOW_MS = 3000;
/** CAN (abandon any half-received escape sequence) then RIS: xterm's in-band `reset()`. A plain
 * `term.reset()` would run before output still queued in xterm's write buffer. */
const IN_BAND_RESET = '\x18\x1bc';

/** This tab's session of an agent (sessionStorage: a reload reattaches; a closed tab forgets). */
interface StoredSession {
  id: string;
  offset: number;
}
const storageKey = (agentId: string) => `agenthold.terminal.${agentId}`;
function loadSession(agentId: string): StoredSession | null {
  try {
    const v = JSON.parse(sessionStorage.getItem(storageKey(agentId)) ?? 'null') as StoredSession | null;
    if (v && typeof v.id === 'string' && v.id && typeof v.offset === 'number') return v;
  } catch {
    /* storage unavailable or garbled */
  }
  return null;
}
function storeSession(agentId: string, v: StoredSession | null): void {
  try {
    if (v) sessionStorage.setItem(storageKey(agentId), JSON.stringify(v));
    else sessionStorage.removeItem(storageKey(agentId));
  } catch {
    /* storage unavailable: a reload then starts a new session */
  }
}

interface ControlMessage {
  type?: string;
  id?: unknown;
  offset?: unknown;
  cols?: unknown;
  rows?: unknown;
  code?: unknown;
}

export function terminalView(agentId: string, agentName: () => string): TerminalView {
  const dark = window.matchMedia('(prefers-color-scheme: dark)');
  const term = new Terminal({
    cursorBlink: true,
    fontFamily: 'ui-monospace, "SFMono-Regular", "JetBrains Mono", "DejaVu Sans Mono", Menlo, Consolas, monospace',
    fontSize: 14,
    lineHeight: 1.15,
    scrollback: 5000,
    allowProposedApi: false,
    theme: dark.matches ? DARK : LIGHT,
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.loadAddon(
    new WebLinksAddon((event, uri) => {
      event.preventDefault();
      const w = window.open(uri, '_blank', 'noopener,noreferrer');
      if (w) w.opener = null;
    }),
  );
  window.__agentholdTerm = term;
  const onScheme = () => (term.options.theme = dark.matches ? DARK : LIGHT);
  dark.addEventListener('change', onScheme);

  const screen = h('div', { class: 'term-screen', 'data-testid': 'terminal' });
  const statusText = h('span', { class: 'term-status', 'data-testid': 'terminal-status', role: 'status' });
  const sizeText = h('span', { class: 'term-size muted mono', 'aria-hidden': 'true' });
  const reconnectBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'reconnect', hidden: true }, 'Reconnect');
  const newSession = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'data-testid': 'new-session', hidden: true }, 'New session');
  const sessionsBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false', 'data-testid': 'sessions', title: 'This agent’s terminal sessions' }, 'Sessions');
  const sessionsList = h('div', { class: 'term-sessions card', hidden: true, 'data-testid': 'sessions-list' });
  const copyBtn = h('button', { type: 'button', class: 'btn btn-small', disabled: true, title: 'Copy the selection (Ctrl+Shift+C)' }, 'Copy');
  const pasteBtn = h('button', { type: 'button', class: 'btn btn-small', title: 'Paste (Ctrl+Shift+V)' }, 'Paste');
  const waiting = h('div', { class: 'term-waiting', hidden: true, role: 'status' });
  const el = h(
    'div',
    { class: 'term' },
    h(
      'div',
      { class: 'term-toolbar' },
      statusText,
      sizeText,
      h('span', { class: 'spacer' }),
      reconnectBtn,
      newSession,
      sessionsBtn,
      copyBtn,
      pasteBtn,
    ),
    sessionsList,
    h('div', { class: 'term-box' }, screen, waiting),
  );

  let ws: WebSocket | null = null;
  let state: TermStatus = 'idle';
  const encoder = new TextEncoder();
  let opened = false;

  // The session this view shows, and how much of its output xterm holds (`offset` is the offset
  // of the next session byte). `inSync` is false until this xterm has the session's screen: a
  // fresh page attaches without an offset and gets a redraw.
  let session: string | null = loadSession(agentId)?.id ?? null;
  let offset = 0;
  let inSync = false;
  /** The current socket has had its `session` message (bytes after it are session output). */
  let live = false;
  /** Some socket of this view reached a session (so a vanished session was one the user saw). */
  let attachedOnce = false;
  let exitCode: number | null = null;
  /** Bumped whenever the socket is replaced, so stale timers and answers do nothing. */
  let gen = 0;
  let retryTimer = 0;
  let retryDelay = 0;
  let wentOffline = false;
  let queued: Uint8Array[] = [];
  let queuedBytes = 0;
  let applyingRemoteSize = false;
  /** xterm has another viewer's size; the next keystroke here takes the session back to ours. */
  let remoteSized = false;
  let saveTimer = 0;

  const save = () => {
    clearTimeout(saveTimer);
    saveTimer = 0;
    storeSession(agentId, session ? { id: session, offset } : null);
  };
  const saveSoon = () => {
    if (!saveTimer) saveTimer = window.setTimeout(save, 1000);
  };

  const setStatus = (s: TermStatus, text: string, detail = '') => {
    state = s;
    el.dataset.status = s;
    statusText.className = `term-status term-${s}`;
    setText(statusText, text);
    statusText.title = detail;
    newSession.hidden = !(s === 'ended' || s === 'disconnected');
    reconnectBtn.hidden = !((s === 'disconnected' && session !== null) || s === 'reconnecting');
    setText(reconnectBtn, s === 'reconnecting' ? 'Reconnect now' : 'Reconnect');
  };
  setStatus('idle', 'Not connected');

  const sendControl = (msg: object) => {
    if (ws && live && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
  };
  // Sizes we sent lately: every viewer (we too) hears of each resize, and while a window is
  // dragged those echoes trail behind; applying them would make xterm flicker through old sizes.
  const sentSizes = new Map<string, number>();
  const sendSize = (cols: number, rows: number) => {
    if (!(ws && live)) return;
    const now = performance.now();
    for (const [k, t] of sentSizes) if (now - t > ECHO_WINDOW_MS) sentSizes.delete(k);
    sentSizes.set(`${cols}x${rows}`, now);
    sendControl({ type: 'resize', cols, rows });
  };
  const isOwnEcho = (cols: number, rows: number) => {
    const t = sentSizes.get(`${cols}x${rows}`);
    return t !== undefined && performance.now() - t < ECHO_WINDOW_MS;
  };
  const sendKeys = (bytes: Uint8Array) => {
    if (ws && live && ws.readyState === WebSocket.OPEN) ws.send(bytes);
    else if ((state === 'connecting' || state === 'reconnecting') && queuedBytes + bytes.length <= MAX_QUEUED_BYTES) {
      queued.push(bytes);
      queuedBytes += bytes.length;
    }
  };

  term.onData((d) => {
    // Whoever types decides the size (as tmux does): refit, which sends our size first.
    if (remoteSized) {
      remoteSized = false;
      doFit();
    }
    sendKeys(encoder.encode(d));
  });
  term.onBinary((d) => {
    const bytes = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) bytes[i] = d.charCodeAt(i) & 0xff;
    sendKeys(bytes);
  });
  term.onResize(({ cols, rows }) => {
    setText(sizeText, `${cols}×${rows}`);
    sizeText.title = applyingRemoteSize ? 'Size set by another viewer of this session' : '';
    // A size another viewer set is the session's already: echoing it would start a tug of war.
    if (!applyingRemoteSize) {
      remoteSized = false;
      sendSize(cols, rows);
    }
  });
  term.onSelectionChange(() => (copyBtn.disabled = !term.hasSelection()));

  const copy = async () => {
    const text = term.getSelection();
    if (!text) return;
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      toast('The browser did not allow copying. Use the context menu, or select and press Ctrl+Shift+C.');
    }
  };
  copyBtn.addEventListener('click', () => void copy().then(() => term.focus()));
  pasteBtn.addEventListener('click', async () => {
    try {
      const text = await navigator.clipboard.readText();
      if (text) term.paste(text);
    } catch {
      toast('The browser did not allow reading the clipboard. Press Ctrl+Shift+V (or Ctrl+V) in the terminal.');
    }
    term.focus();
  });
  term.attachCustomKeyEventHandler((e) => {
    if (e.type !== 'keydown') return true;
    const key = e.key.toLowerCase();
    if (e.ctrlKey && e.shiftKey && key === 'c') {
      void copy();
      e.preventDefault();
      return false;
    }
    // Ctrl+Shift+V: let the browser fire its paste event, which xterm turns into input.
    if (e.ctrlKey && e.shiftKey && key === 'v') return false;
    return true;
  });

  const doFit = () => {
    if (!opened || !screen.isConnected || screen.clientWidth === 0 || screen.clientHeight === 0) return;
    try {
      fit.fit();
    } catch {
      /* not measurable yet */
    }
  };
  let raf = 0;
  const ro = new ResizeObserver(() => {
    cancelAnimationFrame(raf);
    raf = requestAnimationFrame(doFit);
  });
  ro.observe(screen);

  const ensureOpen = () => {
    if (opened || !screen.isConnected) return;
    term.open(screen);
    opened = true;
    doFit();
    setText(sizeText, `${term.cols}×${term.rows}`);
  };

  const dimLine = (text: string) => term.write(`\r\n\x1b[2m[${text}]\x1b[0m\r\n`);

  /** A size the session took from another viewer: show it, without sending it back. */
  const applyRemoteSize = (cols: number, rows: number) => {
    if (!(cols > 0 && rows > 0) || (cols === term.cols && rows === term.rows)) return;
    applyingRemoteSize = true;
    remoteSized = true;
    try {
      term.resize(cols, rows);
    } finally {
      applyingRemoteSize = false;
    }
  };

  const onControl = (msg: ControlMessage, sock: { redrawAt: number | null }) => {
    switch (msg.type) {
      case 'session': {
        session = String(msg.id);
        offset = Number(msg.offset) || 0;
        live = true;
        inSync = true;
        attachedOnce = true;
        retryDelay = 0;
        exitCode = null;
        save();
        setStatus('connected', 'Connected');
        // The attach asked for our size; the box may have changed while the socket opened.
        if (msg.cols !== term.cols || msg.rows !== term.rows) sendSize(term.cols, term.rows);
        const keys = queued;
        queued = [];
        queuedBytes = 0;
        for (const k of keys) sendKeys(k);
        break;
      }
      case 'redraw':
        sock.redrawAt = Number(msg.offset) || 0;
        break;
      case 'resize':
        if (!isOwnEcho(Number(msg.cols), Number(msg.rows))) applyRemoteSize(Number(msg.cols), Number(msg.rows));
        break;
      case 'exit':
        exitCode = typeof msg.code === 'number' ? msg.code : null;
        break;
      default:
      // Unknown control messages are ignored (and never shown).
    }
  };

  /** The session is over: forget it and offer a new one. */
  const ended = (line: string, status: string) => {
    session = null;
    inSync = false;
    queued = [];
    queuedBytes = 0;
    save();
    dimLine(`${line} Press “New session” to start another.`);
    setStatus('ended', status);
    newSession.focus({ preventScroll: true });
  };
  const slept = () => ended('The session ended because the agent slept or was restarted.', 'Session ended');

  /** A final failure that reattaching will not cure by itself. */
  const disconnected = (line: string, status: string, detail = '') => {
    queued = [];
    queuedBytes = 0;
    dimLine(line);
    setStatus('disconnected', status, detail);
    (session ? reconnectBtn : newSession).focus({ preventScroll: true });
  };

  const reconnectLater = (detail: string) => {
    retryDelay = retryDelay ? Math.min(retryDelay * 2, RETRY_MAX_MS) : RETRY_FIRST_MS;
    setStatus('reconnecting', navigator.onLine ? 'Reconnecting…' : 'Offline — reconnecting…', detail);
    clearTimeout(retryTimer);
    const g = gen;
    retryTimer = window.setTimeout(() => g === gen && open(), retryDelay);
  };

  /**
   * An attach failed before the upgrade (the browser hides the HTTP status: 404 gone, 409 too
   * many viewers, 400 offset, or no network). The session list (which wakes nothing) tells which.
   */
  const diagnose = async (detail: string) => {
    const g = gen;
    const sid = session;
    let verdict: 'retry' | 'gone' | 'busy' | 'ahead' | 'no-agent' = 'retry';
    try {
      const found = (await api.terminals(agentId)).find((t) => t.id === sid);
      verdict = !found ? 'gone' : found.viewers >= MAX_VIEWERS ? 'busy' : inSync && offset > found.offset ? 'ahead' : 'retry';
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) verdict = 'no-agent';
    }
    if (g !== gen || sid !== session) return;
    if (verdict === 'gone') {
      if (attachedOnce) return slept();
      session = null;
      save();
      return open();
    }
    if (verdict === 'busy') return tooManyViewers();
    if (verdict === 'no-agent') return ended(`${agentName()} no longer exists.`, 'Agent gone');
    if (verdict === 'ahead') inSync = false;
    reconnectLater(detail);
  };

  const tooManyViewers = () =>
    disconnected(
      `This session has too many viewers (${MAX_VIEWERS}). Close one and press “Reconnect”, or start a new session.`,
      'Too many viewers',
    );

  const onClose = (ev: CloseEvent, upgraded: boolean) => {
    live = false;
    const why = ev.reason || (ev.code === 1006 ? 'the connection was refused or dropped' : `code ${ev.code}`);
    if (ev.code === CLOSE_SHELL_EXITED) {
      return ended(`The shell ended${exitCode !== null ? ` (exit code ${exitCode})` : ''}.`, 'Shell ended');
    }
    if (ev.code === CLOSE_SESSION_GONE) {
      if (attachedOnce) return slept();
      // This tab's session from before a reload is gone: just start a new one.
      session = null;
      save();
      return open();
    }
    if (ev.code === CLOSE_TOO_MANY_VIEWERS) return tooManyViewers();
    // The agent had too many channels open (a flood): no session was harmed, so try again
    // later with backoff, a new session as well as an attach.
    if (ev.code === CLOSE_TOO_MANY_STREAMS) return reconnectLater(why);
    if (ev.code === CLOSE_BAD_OFFSET && session && inSync) {
      // Our offset is past the session's output (it cannot be replayed): take a redraw instead.
      inSync = false;
      return open();
    }
    if (session && REATTACHABLE.has(ev.code)) {
      if (!upgraded) return void diagnose(why);
      return reconnectLater(why);
    }
    disconnected(`Disconnected from ${agentName()}: ${why}`, 'Disconnected', why);
  };

  /** Opens a socket: attaches to `session` (from `offset` when xterm holds its output), or starts one. */
  const open = () => {
    gen++;
    clearTimeout(retryTimer);
    ensureOpen();
    doFit();
    if (state !== 'reconnecting') setStatus('connecting', 'Connecting…');
    const sock = new WebSocket(api.terminalUrl(agentId, term.cols, term.rows, session, inSync ? offset : null));
    sock.binaryType = 'arraybuffer';
    ws = sock;
    live = false;
    window.__agentholdTermSocket = sock;
    let upgraded = false;
    const msgState = { redrawAt: null as number | null };
    sock.addEventListener('open', () => {
      if (ws === sock) upgraded = true;
    });
    sock.addEventListener('message', (ev) => {
      if (ws !== sock) return;
      if (typeof ev.data === 'string') {
        // Text is always control JSON, never terminal output.
        let msg: ControlMessage | null = null;
        try {
          msg = JSON.parse(ev.data) as ControlMessage;
        } catch {
          return;
        }
        if (msg && typeof msg === 'object') onControl(msg, msgState);
        return;
      }
      const bytes = new Uint8Array(ev.data as ArrayBuffer);
      if (msgState.redrawAt !== null) {
        // The screen as of redrawAt: start from a clean terminal; these bytes are not counted.
        term.write(IN_BAND_RESET);
        term.write(bytes);
        offset = msgState.redrawAt;
        msgState.redrawAt = null;
        save();
        return;
      }
      term.write(bytes);
      // Before the `session` message, binary is the server's status text ("Starting the sandbox…").
      if (live) {
        offset += bytes.length;
        saveSoon();
      }
    });
    sock.addEventListener('close', (ev) => {
      if (ws !== sock) return;
      ws = null;
      onClose(ev, upgraded);
    });
  };

  /** Drops the current socket (the session lives on in the sandbox) and ignores what it still says. */
  const detach = () => {
    gen++;
    clearTimeout(retryTimer);
    const s = ws;
    ws = null;
    live = false;
    s?.close(1000);
  };

  const reattachNow = () => {
    if (!session) return;
    detach();
    retryDelay = 0;
    setStatus('reconnecting', 'Reconnecting…');
    open();
  };

  const startNew = () => {
    detach();
    if (opened && state !== 'idle') term.write('\r\n');
    session = null;
    inSync = false;
    save();
    retryDelay = 0;
    open();
  };

  const connect = () => {
    if (state === 'connecting' || state === 'connected' || state === 'reconnecting') return;
    if (state === 'idle') open();
    else startNew();
  };
  newSession.addEventListener('click', startNew);
  reconnectBtn.addEventListener('click', reattachNow);

  // A network change can leave a socket that looks open but is dead (Chromium even keeps it open
  // through its offline emulation): once back online, reattach from our offset. It is exact, so
  // a socket that was fine all along costs only a round trip.
  const onOffline = () => {
    if (ws && live) wentOffline = true;
    else if (state === 'reconnecting') setStatus('reconnecting', 'Offline — reconnecting…', statusText.title);
  };
  const onOnline = () => {
    const was = wentOffline;
    wentOffline = false;
    if (state === 'reconnecting' || (was && ws && live)) reattachNow();
  };
  window.addEventListener('offline', onOffline);
  window.addEventListener('online', onOnline);
  window.addEventListener('pagehide', save);

  // The session picker: this agent's sessions, to switch to or end.
  const showSessions = async () => {
    replace(sessionsList, h('span', { class: 'muted' }, 'Loading…'));
    let list: TerminalSession[];
    try {
      list = await api.terminals(agentId);
    } catch (e) {
      replace(sessionsList, h('span', null, e instanceof ApiError ? e.message : String(e)));
      return;
    }
    if (sessionsList.hidden) return;
    if (!list.length) {
      replace(sessionsList, h('span', { class: 'muted' }, 'No sessions (a sleeping agent has none).'));
      return;
    }
    replace(
      sessionsList,
      h(
        'ul',
        { class: 'term-session-list' },
        list.map((t) => {
          const current = t.id === session;
          const attach = h('button', { type: 'button', class: 'btn btn-small', disabled: current }, current ? 'Shown' : 'Attach');
          const kill = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost' }, 'End');
          attach.addEventListener('click', () => {
            closeSessions();
            if (current) return;
            detach();
            session = t.id;
            inSync = false;
            save();
            term.reset();
            open();
          });
          kill.addEventListener('click', async () => {
            kill.disabled = true;
            try {
              await api.killTerminal(agentId, t.id);
            } catch (e) {
              toast(e instanceof ApiError ? e.message : String(e));
            }
            if (!sessionsList.hidden) void showSessions();
          });
          const viewers = `${t.viewers} viewer${t.viewers === 1 ? '' : 's'}`;
          return h(
            'li',
            { 'data-session': t.id },
            h('span', { class: 'mono' }, t.id),
            h('span', { class: 'muted term-session-cmd', title: t.command }, t.command),
            h('span', { class: 'muted' }, `${viewers} · since ${formatTime(t.createdAt)}${t.exitCode != null ? ` · exited ${t.exitCode}` : ''}`),
            h('span', { class: 'spacer' }),
            attach,
            kill,
          );
        }),
      ),
    );
  };
  const closeSessions = () => {
    sessionsList.hidden = true;
    sessionsBtn.setAttribute('aria-expanded', 'false');
  };
  sessionsBtn.addEventListener('click', () => {
    if (!sessionsList.hidden) return closeSessions();
    sessionsList.hidden = false;
    sessionsBtn.setAttribute('aria-expanded', 'true');
    void showSessions();
  });

  return {
    el,
    connect,
    status: () => state,
    shown() {
      ensureOpen();
      doFit();
    },
    focus: () => term.focus(),
    setWaiting(message) {
      waiting.hidden = message === null;
      setText(waiting, message ?? '');
    },
    dispose() {
      save();
      detach();
      ro.disconnect();
      clearTimeout(saveTimer);
      dark.removeEventListener('change', onScheme);
      window.removeEventListener('offline', onOffline);
      window.removeEventListener('online', onOnline);
      window.removeEventListener('pagehide', save);
      term.dispose();
      if (window.__agentholdTerm === term) delete window.__agentholdTerm;
      if (window.__agentholdTermSocket && window.__agentholdTermSocket.readyState >= WebSocket.CLOSING) delete window.__agentholdTermSocket;
    },
  };
}

// The browser terminal's view: xterm.js, its toolbar, copy and paste, fitting and sizes. What the
// socket means (sessions, offsets, reattaching, close codes) is termconn.ts; the messages are
// termwire.ts; the session list is termsessions.ts.
import { Terminal, type ITheme } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { WebLinksAddon } from '@xterm/addon-web-links';
import '@xterm/xterm/css/xterm.css';
import { api, ApiError } from './api';
import { h, setText, toast } from './dom';
import { TermConnection, type StoredSession, type TermSocket, type TermSocketEvents, type TermStatus } from './termconn';
import { sessionPicker } from './termsessions';

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

export type { TermStatus } from './termconn';

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

/** CAN (abandon any half-received escape sequence) then RIS: xterm's in-band `reset()`. A plain
 * `term.reset()` would run before output still queued in xterm's write buffer. */
const IN_BAND_RESET = '\x18\x1bc';

// This tab's session of an agent (sessionStorage: a reload reattaches; a closed tab forgets).
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

/** A browser WebSocket as the connection's socket port. */
function openSocket(url: string, events: TermSocketEvents): TermSocket {
  const sock = new WebSocket(url);
  sock.binaryType = 'arraybuffer';
  window.__agentholdTermSocket = sock;
  sock.addEventListener('open', () => events.open());
  sock.addEventListener('message', (ev) => {
    if (typeof ev.data === 'string') events.text(ev.data);
    else events.binary(new Uint8Array(ev.data as ArrayBuffer));
  });
  sock.addEventListener('close', (ev) => events.close(ev.code, ev.reason));
  return {
    get isOpen() {
      return sock.readyState === WebSocket.OPEN;
    },
    send: (data: string | Uint8Array) => sock.send(data),
    close: (code: number) => sock.close(code),
  };
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
  const picker = sessionPicker(agentId, () => conn.session, (id) => {
    term.reset();
    conn.attach(id);
  });
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
      picker.button,
      copyBtn,
      pasteBtn,
    ),
    picker.list,
    h('div', { class: 'term-box' }, screen, waiting),
  );

  const encoder = new TextEncoder();
  let opened = false;
  let applyingRemoteSize = false;
  /** xterm has another viewer's size; the next keystroke here takes the session back to ours. */
  let remoteSized = false;

  const doFit = () => {
    if (!opened || !screen.isConnected || screen.clientWidth === 0 || screen.clientHeight === 0) return;
    try {
      fit.fit();
    } catch {
      /* not measurable yet */
    }
  };
  const ensureOpen = () => {
    if (opened || !screen.isConnected) return;
    term.open(screen);
    opened = true;
    doFit();
    setText(sizeText, `${term.cols}×${term.rows}`);
  };

  const showStatus = (s: TermStatus, text: string, detail: string) => {
    el.dataset.status = s;
    statusText.className = `term-status term-${s}`;
    setText(statusText, text);
    statusText.title = detail;
    const hasSession = conn.session !== null;
    newSession.hidden = !(s === 'ended' || s === 'disconnected');
    reconnectBtn.hidden = !((s === 'disconnected' && hasSession) || s === 'reconnecting');
    setText(reconnectBtn, s === 'reconnecting' ? 'Reconnect now' : 'Reconnect');
    if (s === 'ended') newSession.focus({ preventScroll: true });
    else if (s === 'disconnected') (hasSession ? reconnectBtn : newSession).focus({ preventScroll: true });
  };
  const conn: TermConnection = new TermConnection({
    openSocket: (cols, rows, session, offset, events) => openSocket(api.terminalUrl(agentId, cols, rows, session, offset), events),
    listSessions: async () => {
      try {
        return await api.terminals(agentId);
      } catch (e) {
        return e instanceof ApiError && e.status === 404 ? 'no-agent' : null;
      }
    },
    loadSession: () => loadSession(agentId),
    storeSession: (v) => storeSession(agentId, v),
    setTimeout: (fn, ms) => window.setTimeout(fn, ms),
    clearTimeout: (handle) => window.clearTimeout(handle as number | undefined),
    now: () => performance.now(),
    isOnline: () => navigator.onLine,
    agentName,
    status: showStatus,
    prepare: () => {
      ensureOpen();
      doFit();
    },
    size: () => ({ cols: term.cols, rows: term.rows }),
    output: (bytes) => term.write(bytes),
    redraw: (bytes) => {
      term.write(IN_BAND_RESET);
      term.write(bytes);
    },
    notice: (text) => term.write(`\r\n\x1b[2m[${text}]\x1b[0m\r\n`),
    remoteResize: (cols, rows) => {
      // A size the session took from another viewer: show it, without sending it back.
      if (!(cols > 0 && rows > 0) || (cols === term.cols && rows === term.rows)) return;
      applyingRemoteSize = true;
      remoteSized = true;
      try {
        term.resize(cols, rows);
      } finally {
        applyingRemoteSize = false;
      }
    },
    freshSession: () => {
      if (opened && conn.status !== 'idle') term.write('\r\n');
    },
  });

  showStatus('idle', 'Not connected', '');

  term.onData((d) => {
    // Whoever types decides the size (as tmux does): refit, which sends our size first.
    if (remoteSized) {
      remoteSized = false;
      doFit();
    }
    conn.sendKeys(encoder.encode(d));
  });
  term.onBinary((d) => {
    const bytes = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) bytes[i] = d.charCodeAt(i) & 0xff;
    conn.sendKeys(bytes);
  });
  term.onResize(({ cols, rows }) => {
    setText(sizeText, `${cols}×${rows}`);
    sizeText.title = applyingRemoteSize ? 'Size set by another viewer of this session' : '';
    // A size another viewer set is the session's already: echoing it would start a tug of war.
    if (!applyingRemoteSize) {
      remoteSized = false;
      conn.sendSize(cols, rows);
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

  let raf = 0;
  const ro = new ResizeObserver(() => {
    cancelAnimationFrame(raf);
    raf = requestAnimationFrame(doFit);
  });
  ro.observe(screen);

  newSession.addEventListener('click', () => conn.startNew());
  reconnectBtn.addEventListener('click', () => conn.reattachNow());
  const onOffline = () => conn.offline();
  const onOnline = () => conn.online();
  const onPageHide = () => conn.save();
  window.addEventListener('offline', onOffline);
  window.addEventListener('online', onOnline);
  window.addEventListener('pagehide', onPageHide);

  return {
    el,
    connect: () => conn.connect(),
    status: () => conn.status,
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
      conn.dispose();
      ro.disconnect();
      dark.removeEventListener('change', onScheme);
      window.removeEventListener('offline', onOffline);
      window.removeEventListener('online', onOnline);
      window.removeEventListener('pagehide', onPageHide);
      term.dispose();
      if (window.__agentholdTerm === term) delete window.__agentholdTerm;
      if (window.__agentholdTermSocket && window.__agentholdTermSocket.readyState >= WebSocket.CLOSING) delete window.__agentholdTermSocket;
    },
  };
}

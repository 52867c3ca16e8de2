// The browser terminal: xterm.js over the `/terminal` WebSocket (binary = bytes, text = JSON control).
import { Terminal, type ITheme } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { WebLinksAddon } from '@xterm/addon-web-links';
import '@xterm/xterm/css/xterm.css';
import { api } from './api';
import { h, setText, toast } from './dom';

declare global {
  interface Window {
    /** The live xterm Terminal, for the browser tests. */
    __agentholdTerm?: Terminal;
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

export type TermStatus = 'idle' | 'connecting' | 'connected' | 'ended' | 'disconnected';

export interface TerminalView {
  el: HTMLElement;
  /** Open a new session (no-op while one is open or opening). */
  connect(): void;
  status(): TermStatus;
  /** Tell the view the panel became visible (refit). */
  shown(): void;
  focus(): void;
  setWaiting(message: string | null): void;
  dispose(): void;
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
  const newSession = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'data-testid': 'new-session', hidden: true }, 'New session');
  const copyBtn = h('button', { type: 'button', class: 'btn btn-small', disabled: true, title: 'Copy the selection (Ctrl+Shift+C)' }, 'Copy');
  const pasteBtn = h('button', { type: 'button', class: 'btn btn-small', title: 'Paste (Ctrl+Shift+V)' }, 'Paste');
  const waiting = h('div', { class: 'term-waiting', hidden: true, role: 'status' });
  const el = h(
    'div',
    { class: 'term' },
    h('div', { class: 'term-toolbar' }, statusText, sizeText, h('span', { class: 'spacer' }), newSession, copyBtn, pasteBtn),
    h('div', { class: 'term-box' }, screen, waiting),
  );

  let ws: WebSocket | null = null;
  let state: TermStatus = 'idle';
  const encoder = new TextEncoder();
  let opened = false;

  const setStatus = (s: TermStatus, text: string) => {
    state = s;
    el.dataset.status = s;
    statusText.className = `term-status term-${s}`;
    setText(statusText, text);
    newSession.hidden = !(s === 'ended' || s === 'disconnected');
    setText(newSession, s === 'disconnected' ? 'Reconnect' : 'New session');
  };
  setStatus('idle', 'Not connected');

  const send = (data: string | Uint8Array) => {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(data);
  };

  term.onData((d) => send(encoder.encode(d)));
  term.onBinary((d) => {
    const bytes = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) bytes[i] = d.charCodeAt(i) & 0xff;
    send(bytes);
  });
  term.onResize(({ cols, rows }) => {
    setText(sizeText, `${cols}×${rows}`);
    send(JSON.stringify({ type: 'resize', cols, rows }));
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

  const connect = () => {
    if (state === 'connecting' || state === 'connected') return;
    ensureOpen();
    doFit();
    if (state === 'ended' || state === 'disconnected') term.write('\r\n');
    setStatus('connecting', 'Connecting…');
    const sock = new WebSocket(api.terminalUrl(agentId, term.cols, term.rows));
    sock.binaryType = 'arraybuffer';
    ws = sock;
    sock.addEventListener('open', () => {
      if (ws !== sock) return;
      setStatus('connected', 'Connected');
      // The box may have changed size while the socket was opening.
      send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
      term.focus();
    });
    sock.addEventListener('message', (ev) => {
      if (ws !== sock) return;
      if (typeof ev.data === 'string') term.write(ev.data);
      else term.write(new Uint8Array(ev.data as ArrayBuffer));
    });
    sock.addEventListener('close', (ev) => {
      if (ws !== sock) return;
      ws = null;
      if (ev.code === 1000) {
        const why = ev.reason ? ` (${ev.reason})` : '';
        term.write(`\r\n\x1b[2m[The shell ended${why}. Press “New session” to start another.]\x1b[0m\r\n`);
        setStatus('ended', 'Shell ended');
      } else {
        const why = ev.reason ? `: ${ev.reason}` : ev.code === 1006 ? ' (the connection was refused or dropped)' : ` (code ${ev.code})`;
        term.write(`\r\n\x1b[2m[Disconnected from ${agentName()}${why}]\x1b[0m\r\n`);
        setStatus('disconnected', `Disconnected${ev.reason ? ` — ${ev.reason}` : ''}`);
      }
      newSession.focus({ preventScroll: true });
    });
  };
  newSession.addEventListener('click', connect);

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
      ro.disconnect();
      dark.removeEventListener('change', onScheme);
      const s = ws;
      ws = null;
      s?.close(1000);
      term.dispose();
      if (window.__agentholdTerm === term) delete window.__agentholdTerm;
    },
  };
}

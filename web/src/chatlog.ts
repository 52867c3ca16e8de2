// One agent session's conversation: its transcript streamed from the start
// (`GET …/sessions/{sid}/events`, Server-Sent Events; a dropped stream resumes with
// `Last-Event-ID`, a new one with `after=`), folded by chatmodel.ts and shown by chatitems.ts;
// the prompt box (Enter sends, Shift+Enter is a new line) and, while a turn runs, a Cancel button.
import { api, ApiError, errorMessage, type ChatSession } from './api';
import { h, replace, setText, toast } from './dom';
import { applyEvent, newChat, type ChatModel } from './chatmodel';
import { renderItem, rerender } from './chatitems';

/** The transcript's event names (docs/api.md); the SSE `id:` is each one's sequence number. */
const EVENTS = ['prompt', 'update', 'turn', 'notice', 'permission', 'permission_resolved'];
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 5000;
/** Within this many pixels of the bottom, the view follows new items down. */
const STICKY_PX = 48;

type StreamState = 'idle' | 'connecting' | 'live' | 'reconnecting' | 'gone';

export interface ChatLog {
  el: HTMLElement;
  /** The session changed (a rename, a turn that started or ended): its header shows it. */
  update(s: ChatSession): void;
  /** Follow the transcript (again, from where it stopped). */
  resume(): void;
  /** Stop following for now (the tab was left). */
  pause(): void;
  dispose(): void;
  /** The session's first prompt was sent (for a title). */
  onPrompted?: (text: string) => void;
}

export function chatLog(agentId: string, first: ChatSession, head: HTMLElement): ChatLog {
  let session = first;
  const model: ChatModel = newChat();
  const rendered = new Map<string, { el: HTMLElement; rev: number }>();
  let es: EventSource | null = null;
  let state: StreamState = 'idle';
  let retryTimer: ReturnType<typeof setTimeout> | null = null;
  let retryDelay = RETRY_FIRST_MS;
  let renderQueued = false;
  let lastRenderMs = 0;
  let disposed = false;
  let stick = true;
  /** Sending a prompt; then the turn it started, until the transcript says it ended. */
  let sending = false;
  let expectTurn: number | null = null;

  const status = h('span', { class: 'chat-stream muted', role: 'status', 'data-testid': 'chat-stream' });
  const empty = h('p', { class: 'chat-empty muted' }, 'No messages yet. Send a prompt: the harness starts with the first one (that wakes a sleeping agent).');
  const items = h('div', { class: 'chat-items' });
  const log = h('div', { class: 'chat-log', role: 'log', 'aria-live': 'polite', 'aria-label': 'Conversation', tabindex: '0', 'data-testid': 'chat-log' }, empty, items);
  const runningText = h('span', { class: 'chat-running-text' }, 'The agent is working…');
  const cancelBtn = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', 'data-testid': 'chat-cancel' }, 'Cancel');
  const running = h(
    'div',
    { class: 'chat-running', hidden: true, 'data-testid': 'chat-running' },
    h('span', { class: 'progress-indeterminate chat-spinner', 'aria-hidden': 'true' }),
    runningText,
    h('span', { class: 'spacer' }),
    cancelBtn,
  );
  const input = h('textarea', {
    class: 'chat-input',
    rows: '3',
    placeholder: 'Message the agent — Enter sends, Shift+Enter for a new line',
    'aria-label': 'Prompt',
    'data-testid': 'chat-input',
  });
  const sendBtn = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'chat-send' }, 'Send');
  const formError = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'chat-error' });
  const form = h('form', { class: 'chat-compose', 'aria-label': 'Send a prompt' }, h('div', { class: 'chat-compose-row' }, input, sendBtn), formError);
  const el = h('div', { class: 'chat-conversation', 'data-session-id': first.id, 'data-stream': 'idle', 'data-running': 'false' }, head, status, log, running, form);

  const turnBusy = () => model.running || (expectTurn !== null && (model.endedTurn ?? 0) < expectTurn);

  const controls = () => {
    const busy = turnBusy();
    running.hidden = !busy;
    el.dataset.running = String(busy);
    setText(runningText, sending && !model.running ? 'Sending…' : 'The agent is working…');
    const blocked = busy || sending || state === 'gone';
    input.disabled = blocked;
    sendBtn.disabled = blocked;
    if (!blocked && document.activeElement === document.body && !el.hidden) input.focus();
  };

  const setState = (s: StreamState, message: string) => {
    state = s;
    el.dataset.stream = s;
    status.className = `chat-stream${s === 'gone' ? ' chat-stream-error' : ' muted'}`;
    setText(status, message);
    controls();
  };

  log.addEventListener('scroll', () => {
    stick = log.scrollHeight - log.scrollTop - log.clientHeight < STICKY_PX;
  });

  const render = () => {
    renderQueued = false;
    if (disposed) return;
    const t0 = performance.now();
    for (const item of model.items) {
      const r = rendered.get(item.key);
      if (!r) {
        const e = renderItem(item);
        e.dataset.seq = String(item.seq);
        items.appendChild(e);
        rendered.set(item.key, { el: e, rev: item.rev });
      } else if (r.rev !== item.rev) {
        r.el = rerender(r.el, item);
        r.el.dataset.seq = String(item.seq);
        r.rev = item.rev;
      }
    }
    empty.hidden = model.items.length > 0 || state !== 'live';
    controls();
    if (stick) log.scrollTop = log.scrollHeight;
    lastRenderMs = performance.now() - t0;
  };

  /** Once a frame; when rendering gets slow (a long message re-parsed), less often. */
  const queueRender = () => {
    if (renderQueued || disposed) return;
    renderQueued = true;
    if (lastRenderMs > 30) setTimeout(() => requestAnimationFrame(render), Math.min(1000, lastRenderMs * 4));
    else requestAnimationFrame(render);
  };

  const onEvent = (name: string, ev: MessageEvent<string>) => {
    const seq = Number(ev.lastEventId);
    let data: unknown;
    try {
      data = JSON.parse(ev.data);
    } catch {
      data = ev.data;
    }
    retryDelay = RETRY_FIRST_MS;
    if (applyEvent(model, { seq: Number.isFinite(seq) && seq > 0 ? seq : model.lastSeq + 1, event: name, data })) queueRender();
  };

  const stop = () => {
    es?.close();
    es = null;
    if (retryTimer) clearTimeout(retryTimer);
    retryTimer = null;
  };

  const connect = () => {
    stop();
    if (disposed) return;
    const src = new EventSource(api.sessionEventsUrl(agentId, session.id, model.lastSeq), { withCredentials: true });
    es = src;
    setState(model.lastSeq ? 'reconnecting' : 'connecting', model.lastSeq ? 'Reconnecting…' : 'Loading the conversation…');
    src.addEventListener('open', () => {
      if (es === src) {
        setState('live', '');
        queueRender();
      }
    });
    for (const name of EVENTS) src.addEventListener(name, (ev) => es === src && onEvent(name, ev as MessageEvent<string>));
    src.addEventListener('error', () => {
      if (es !== src) return;
      if (src.readyState !== EventSource.CLOSED) {
        // The browser reconnects by itself, sending Last-Event-ID: exactly what was missed comes.
        setState('reconnecting', 'Reconnecting…');
        return;
      }
      // An HTTP error answer: the session may be gone, or the server away.
      es = null;
      setState('reconnecting', 'Reconnecting…');
      api
        .chatSession(agentId, session.id)
        .then(() => schedule())
        .catch((e: unknown) => {
          if (disposed || es) return;
          if (e instanceof ApiError && e.status === 404) setState('gone', 'This session no longer exists.');
          else schedule();
        });
    });
  };

  const schedule = () => {
    if (disposed || es || retryTimer) return;
    retryTimer = setTimeout(() => {
      retryTimer = null;
      connect();
    }, retryDelay);
    retryDelay = Math.min(retryDelay * 2, RETRY_MAX_MS);
  };

  const send = async () => {
    const text = input.value;
    if (!text.trim() || turnBusy() || sending || state === 'gone') return;
    sending = true;
    setText(formError, '');
    controls();
    const firstPrompt = session.turns === 0 && model.turn === null;
    try {
      const { turn } = await api.prompt(agentId, session.id, text);
      expectTurn = turn;
      input.value = '';
      if (firstPrompt) chat.onPrompted?.(text);
    } catch (e) {
      setText(formError, errorMessage(e));
    } finally {
      sending = false;
      controls();
      if (!turnBusy()) input.focus();
    }
  };

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    void send();
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      void send();
    }
  });
  cancelBtn.addEventListener('click', async () => {
    cancelBtn.disabled = true;
    try {
      await api.cancelTurn(agentId, session.id);
    } catch (e) {
      // No turn runs (it ended meanwhile, or never started): nothing to wait for.
      if (e instanceof ApiError && e.status === 409) {
        expectTurn = null;
        controls();
      } else toast(`Cancel: ${errorMessage(e)}`);
    } finally {
      cancelBtn.disabled = false;
    }
  });

  const chat: ChatLog = {
    el,
    update(s) {
      session = s;
    },
    resume() {
      if (disposed || state === 'gone' || es) return;
      connect();
    },
    pause() {
      stop();
      if (state !== 'gone') setState('idle', 'Paused');
    },
    dispose() {
      disposed = true;
      stop();
      replace(items);
    },
  };
  controls();
  return chat;
}

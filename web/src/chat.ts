// The agent page's Chat tab: the agent's sessions (conversations with a harness: listed when the
// tab opens, kept current by `session` events; new, with a choice of harness when the server
// names more than one; rename; delete) and the selected one's conversation (chatlog.ts). The
// selected session is in the address (`#chat/SID`), so a reload shows the same conversation.
import { api, errorMessage, type ChatSession, type Harness } from './api';
import { confirmDialog, h, replace, setText, toast } from './dom';
import { chatLog, type ChatLog } from './chatlog';
import { store } from './store';

export interface ChatView {
  el: HTMLElement;
  shown(): void;
  hidden(): void;
  dispose(): void;
}

const DEFAULT_TITLE = 'New session';
/** The title a first prompt gives a session that has the default one. */
const titleFrom = (text: string) => {
  const line = text.trim().split('\n')[0].trim();
  return line.length > 60 ? `${line.slice(0, 59)}…` : line;
};

/** The session id in the address (`#chat/SID`), if any. */
export const sessionFromHash = (): string | null => {
  const m = /^#chat\/(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
};

export function chatView(agentId: string): ChatView {
  let sessions = new Map<string, ChatSession>();
  let selected: string | null = sessionFromHash();
  let current: { sid: string; log: ChatLog; title: HTMLElement; meta: HTMLElement } | null = null;
  let visible = false;
  let loaded = false;
  let loadSeq = 0;
  let disposed = false;
  let harnesses: Harness[] = [];

  const harnessSelect = h('select', { class: 'chat-harness', 'aria-label': 'Harness', hidden: true, 'data-testid': 'chat-harness' });
  const newBtn = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'data-testid': 'chat-new' }, 'New session');
  const list = h('ul', { class: 'chat-sessions-list', 'aria-label': 'Sessions' });
  const listMessage = h('p', { class: 'chat-sessions-message muted', role: 'status' });
  const side = h(
    'aside',
    { class: 'chat-sessions', 'data-testid': 'chat-sessions' },
    h('div', { class: 'chat-sessions-head' }, h('h2', null, 'Sessions'), h('span', { class: 'spacer' }), harnessSelect, newBtn),
    listMessage,
    list,
  );
  const mainEmpty = h('div', { class: 'chat-none muted' }, 'Start a session to talk to an agent harness (Claude Code, Codex, …) running in this sandbox.');
  const main = h('section', { class: 'chat-main' }, mainEmpty);
  const el = h('div', { class: 'chat', 'data-testid': 'chat', 'data-state': 'idle' }, side, main);

  const setHash = () => {
    if (!visible) return;
    history.replaceState(null, '', `${location.pathname}#chat${selected ? `/${encodeURIComponent(selected)}` : ''}`);
  };

  const sorted = () => [...sessions.values()].sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));

  const renderList = () => {
    replace(
      list,
      sorted().map((s) => {
        const b = h(
          'button',
          { type: 'button', class: 'chat-session', 'data-session-id': s.id, 'data-state': s.state, 'aria-current': s.id === selected ? 'true' : null },
          h('span', { class: 'chat-session-title' }, s.title),
          h(
            'span',
            { class: 'chat-session-meta muted' },
            s.state === 'running' ? h('span', { class: 'chat-session-running', title: 'A turn runs' }, '● ') : null,
            `${s.harness} · ${s.turns} turn${s.turns === 1 ? '' : 's'}`,
          ),
        );
        b.addEventListener('click', () => select(s.id));
        return h('li', null, b);
      }),
    );
    if (loaded) setText(listMessage, sessions.size ? '' : 'No sessions yet.');
  };

  const describe = (s: ChatSession) =>
    [
      s.harness,
      s.cwd,
      s.restore === 'new' ? 'the harness could not restore the conversation: its context was reset' : s.restore ? `restored by session/${s.restore}` : null,
    ]
      .filter(Boolean)
      .join(' · ');

  const rename = (s: ChatSession) => {
    if (!current) return;
    const field = h('input', { type: 'text', class: 'chat-title-input', value: s.title, maxlength: '200', 'aria-label': 'Session title', 'data-testid': 'chat-title-input' });
    const title = current.title;
    title.replaceWith(field);
    field.focus();
    field.select();
    let done = false;
    const finish = async (save: boolean) => {
      if (done) return;
      done = true;
      field.replaceWith(title);
      const next = field.value.trim();
      if (!save || !next || next === s.title) return;
      try {
        put(await api.renameSession(agentId, s.id, next));
      } catch (e) {
        toast(`Rename: ${errorMessage(e)}`);
      }
    };
    field.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        void finish(true);
      } else if (e.key === 'Escape') void finish(false);
    });
    field.addEventListener('blur', () => void finish(true));
  };

  const remove = async (s: ChatSession) => {
    const ok = await confirmDialog({
      title: `Delete “${s.title}”?`,
      body: ['The session ', h('strong', null, s.title), ' and its conversation will be deleted; a running turn is cancelled.'],
      confirmLabel: 'Delete',
      danger: true,
    });
    if (!ok) return;
    try {
      await api.deleteSession(agentId, s.id);
      drop(s.id);
    } catch (e) {
      toast(`Delete ${s.title}: ${errorMessage(e)}`);
    }
  };

  /** Show the selected session's conversation (a new log when the session changed). */
  const showSelected = () => {
    const s = selected ? sessions.get(selected) : undefined;
    if (current && current.sid !== s?.id) {
      current.log.dispose();
      current = null;
    }
    if (!s) {
      replace(main, mainEmpty);
      return;
    }
    if (!current) {
      const title = h('h2', { class: 'chat-title', 'data-testid': 'chat-title' });
      const meta = h('span', { class: 'chat-meta muted mono' });
      const renameBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-label': 'Rename the session', 'data-testid': 'chat-rename' }, 'Rename');
      const deleteBtn = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', 'aria-label': 'Delete the session', 'data-testid': 'chat-delete' }, 'Delete');
      const head = h('div', { class: 'chat-head' }, h('div', { class: 'chat-head-text' }, title, meta), h('span', { class: 'spacer' }), renameBtn, deleteBtn);
      const log = chatLog(agentId, s, head);
      const sid = s.id;
      renameBtn.addEventListener('click', () => {
        const now = sessions.get(sid);
        if (now) rename(now);
      });
      deleteBtn.addEventListener('click', () => {
        const now = sessions.get(sid);
        if (now) void remove(now);
      });
      log.onPrompted = (text) => {
        const now = sessions.get(sid);
        const t = titleFrom(text);
        if (now && now.title === DEFAULT_TITLE && t) api.renameSession(agentId, sid, t).then(put, () => {});
      };
      current = { sid, log, title, meta };
      replace(main, log.el);
      if (visible) log.resume();
    }
    current.log.update(s);
    setText(current.title, s.title);
    setText(current.meta, describe(s));
    current.meta.title = s.processId ? `harness process ${s.processId}` : '';
  };

  const select = (sid: string | null) => {
    selected = sid;
    setHash();
    renderList();
    showSelected();
  };

  /** A session from an answer or an event: an older report never undoes a newer one. */
  const put = (s: ChatSession) => {
    const old = sessions.get(s.id);
    if (old && old.updatedAt > s.updatedAt) return;
    sessions.set(s.id, s);
    renderList();
    if (s.id === selected) showSelected();
  };

  const drop = (sid: string) => {
    if (!sessions.delete(sid)) return;
    if (selected === sid) {
      const rest = sorted();
      select(rest.length ? rest[rest.length - 1].id : null);
    } else renderList();
  };

  const load = async () => {
    const seq = ++loadSeq;
    el.dataset.state = 'loading';
    if (!loaded) setText(listMessage, 'Loading…');
    try {
      const all = await api.sessions(agentId);
      if (seq !== loadSeq || disposed) return;
      const m = new Map<string, ChatSession>();
      for (const s of all) m.set(s.id, s);
      sessions = m;
      loaded = true;
      el.dataset.state = 'ready';
      // The address names a session, else the newest one is shown.
      if (!selected || !sessions.has(selected)) {
        const rest = sorted();
        selected = rest.length ? rest[rest.length - 1].id : null;
        setHash();
      }
      renderList();
      showSelected();
    } catch (e) {
      if (seq !== loadSeq || disposed) return;
      el.dataset.state = 'error';
      setText(listMessage, `Cannot list the sessions: ${errorMessage(e)}`);
    }
  };

  const loadHarnesses = async () => {
    try {
      const { harnesses: list, defaultHarness } = await api.harnesses();
      harnesses = list;
      if (disposed) return;
      replace(
        harnessSelect,
        harnesses.map((x) => h('option', { value: x.name, title: x.description ?? null, selected: x.name === defaultHarness ? true : null }, x.name)),
      );
      harnessSelect.hidden = harnesses.length < 2;
    } catch {
      /* no list: the server's default harness */
    }
  };

  newBtn.addEventListener('click', async () => {
    newBtn.disabled = true;
    try {
      const s = await api.createSession(agentId, harnessSelect.hidden || !harnessSelect.value ? {} : { harness: harnessSelect.value });
      put(s);
      select(s.id);
      current?.log.el.querySelector<HTMLTextAreaElement>('textarea')?.focus();
    } catch (e) {
      toast(`New session: ${errorMessage(e)}`);
    } finally {
      newBtn.disabled = false;
    }
  });

  const unsubs = [
    store.on('session', (data) => {
      const s = data as ChatSession;
      if (!s || s.agentId !== agentId || typeof s.id !== 'string' || !loaded) return;
      put(s);
    }),
    store.on('session_deleted', (data) => {
      const d = data as { id?: string; agentId?: string };
      if (d?.agentId === agentId && typeof d.id === 'string') drop(d.id);
    }),
  ];
  // The event stream came back after a drop: what changed meanwhile was not told.
  let streamStatus = store.status;
  unsubs.push(
    store.subscribe(() => {
      const was = streamStatus;
      streamStatus = store.status;
      if (was === 'reconnecting' && streamStatus === 'live' && visible && loaded) void load();
    }),
  );

  return {
    el,
    shown() {
      if (visible) return;
      visible = true;
      setHash();
      if (!loaded) {
        void load();
        void loadHarnesses();
      }
      current?.log.resume();
    },
    hidden() {
      if (!visible) return;
      visible = false;
      current?.log.pause();
    },
    dispose() {
      disposed = true;
      loadSeq++;
      for (const u of unsubs) u();
      current?.log.dispose();
    },
  };
}

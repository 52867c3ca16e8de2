// The agents page: every agent with its live state, and the create form.
import { api, ApiError, type Agent, type NewAgent } from './api';
import { actions, badge, resources, statusLine } from './agentui';
import { h, replace, setText } from './dom';
import { linkHandler, type Page } from './nav';
import { store } from './store';

interface Row {
  el: HTMLElement;
  update: (a: Agent) => void;
}

function agentRow(agent: Agent): Row {
  const href = `/agents/${encodeURIComponent(agent.id)}`;
  const name = h('a', { class: 'agent-name', href, onclick: linkHandler(href) });
  const id = h('span', { class: 'agent-id mono' });
  const b = badge();
  const meta = h('div', { class: 'agent-meta' });
  const image = h('span', { class: 'mono agent-image' });
  const res = h('span', { class: 'agent-res' });
  meta.append(image, h('span', { class: 'sep', 'aria-hidden': 'true' }, '·'), res);
  const status = statusLine();
  const acts = actions();
  const open = h('a', { class: 'btn btn-small btn-primary', href, onclick: linkHandler(href) }, 'Open');
  const el = h(
    'li',
    { class: 'agent-row card', 'data-testid': 'agent-row' },
    h('div', { class: 'agent-line1' }, h('div', { class: 'agent-title' }, name, id), b.el, h('div', { class: 'row-actions' }, open, acts.el)),
    h('div', { class: 'agent-line2' }, meta, status.el),
  );
  const update = (a: Agent) => {
    el.dataset.agentId = a.id;
    el.dataset.agentName = a.name;
    el.dataset.state = a.state;
    setText(name, a.name);
    setText(id, a.id);
    b.update(a.state);
    setText(image, a.image);
    image.title = a.image;
    setText(res, resources(a));
    status.update(a);
    acts.update(a);
    open.setAttribute('aria-label', `Open ${a.name}`);
  };
  update(agent);
  return { el, update };
}

interface Field {
  key: keyof NewAgent;
  label: string;
  input: HTMLInputElement;
  error: HTMLElement;
  wrap: HTMLElement;
}

function createForm(): HTMLElement {
  const mk = (key: keyof NewAgent, label: string, attrs: Record<string, unknown>, hint?: string): Field => {
    const id = `new-${key}`;
    const input = h('input', { id, name: key, 'aria-describedby': `${id}-error`, ...attrs });
    const error = h('p', { id: `${id}-error`, class: 'field-error', 'data-field-error': key, 'aria-live': 'polite' });
    const wrap = h(
      'div',
      { class: `field field-${key}` },
      h('label', { for: id }, label, hint ? h('span', { class: 'hint' }, hint) : null),
      input,
      error,
    );
    // Typing clears that field's message.
    input.addEventListener('input', () => {
      error.textContent = '';
      input.removeAttribute('aria-invalid');
    });
    return { key, label, input, error, wrap };
  };
  const fields: Field[] = [
    mk('name', 'Name', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. builder' }),
    mk('image', 'Image', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'server default' }),
    mk('cpus', 'CPUs', { type: 'number', min: '0', step: 'any', inputmode: 'decimal', placeholder: 'default' }),
    mk('memoryMb', 'Memory', { type: 'number', min: '1', step: '1', inputmode: 'numeric', placeholder: 'default' }, 'MiB'),
    mk('diskMb', 'Disk', { type: 'number', min: '64', step: '1', inputmode: 'numeric', placeholder: 'default' }, 'MiB'),
    mk('idleMinutes', 'Sleep after', { type: 'number', min: '1', step: '1', inputmode: 'numeric', placeholder: 'default' }, 'idle min'),
  ];
  // Show the server's defaults and maxima when it tells them.
  void api.limits().then((l) => {
    if (!l) return;
    const set = (key: keyof NewAgent, placeholder: string, max?: number, hint?: string) => {
      const f = fields.find((x) => x.key === key)!;
      f.input.placeholder = `${placeholder} (default)`;
      if (max !== undefined) f.input.max = String(max);
      if (hint) f.input.title = hint;
    };
    set('image', l.defaultImage, undefined, `Default: ${l.defaultImage}`);
    set('cpus', String(l.defaultCpus), l.maxCpus, `Default ${l.defaultCpus}, at most ${l.maxCpus}`);
    set('memoryMb', String(l.defaultMemoryMb), l.maxMemoryMb, `Default ${l.defaultMemoryMb} MiB, at most ${l.maxMemoryMb} MiB`);
    if (l.maxDiskMb == null) {
      fields.find((x) => x.key === 'diskMb')?.wrap.remove();
    } else {
      const d = l.defaultDiskMb == null ? 'no limit' : String(l.defaultDiskMb);
      set('diskMb', d, l.maxDiskMb, `Size of the home: default ${d === 'no limit' ? 'no limit' : `${d} MiB`}, at most ${l.maxDiskMb} MiB`);
    }
    set('idleMinutes', String(l.defaultIdleMinutes), l.maxIdleMinutes, `Default ${l.defaultIdleMinutes} minutes`);
  });
  const formError = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'create-error' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Create agent');
  const form = h(
    'form',
    { class: 'create card', 'data-testid': 'create-form', novalidate: true, 'aria-labelledby': 'create-title' },
    h('h2', { id: 'create-title' }, 'New agent'),
    h('div', { class: 'create-fields' }, fields.map((f) => f.wrap), h('div', { class: 'field field-submit' }, submit)),
    formError,
  );
  const clearErrors = () => {
    for (const f of fields) {
      f.error.textContent = '';
      f.input.removeAttribute('aria-invalid');
    }
    formError.textContent = '';
  };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearErrors();
    const body: NewAgent = { name: '' };
    for (const f of fields) {
      const v = f.input.value.trim();
      if (f.key === 'name') {
        body.name = v;
        continue;
      }
      if (v === '') continue;
      if (f.key === 'image') body.image = v;
      else {
        const n = Number(v);
        if (!Number.isFinite(n)) {
          f.error.textContent = `${f.label} must be a number.`;
          f.input.setAttribute('aria-invalid', 'true');
          f.input.focus();
          return;
        }
        (body as unknown as Record<string, number>)[f.key] = n;
      }
    }
    if (!body.name) {
      const f = fields[0];
      f.error.textContent = 'Give the agent a name.';
      f.input.setAttribute('aria-invalid', 'true');
      f.input.focus();
      return;
    }
    submit.disabled = true;
    submit.textContent = 'Creating…';
    try {
      const agent = await api.create(body);
      store.putAnswer(agent);
      form.reset();
      fields[0].input.focus();
    } catch (err) {
      const msg = err instanceof ApiError ? err.message : String(err);
      const f = err instanceof ApiError && err.field ? fields.find((x) => x.key === err.field) : undefined;
      if (f) {
        f.error.textContent = msg;
        f.input.setAttribute('aria-invalid', 'true');
        f.input.focus();
      } else {
        formError.textContent = msg;
      }
    } finally {
      submit.disabled = false;
      submit.textContent = 'Create agent';
    }
  });
  return form;
}

export function agentsPage(): Page {
  const rows = new Map<string, Row>();
  const list = h('ul', { class: 'agent-list', 'data-testid': 'agent-list', 'aria-label': 'Agents' });
  const empty = h('p', { class: 'empty muted' });
  const live = h('span', { class: 'live-indicator', 'data-testid': 'live' });
  const section = h(
    'section',
    { class: 'agents', 'aria-labelledby': 'agents-title' },
    h('div', { class: 'section-head' }, h('h1', { id: 'agents-title' }, 'Agents'), live),
    list,
    empty,
  );

  const sync = () => {
    live.className = `live-indicator live-${store.status}`;
    setText(live, store.status === 'live' ? 'Live' : store.status === 'connecting' ? 'Connecting…' : 'Reconnecting…');
    const agents = store.sorted();
    const seen = new Set<string>();
    let prev: Element | null = null;
    for (const a of agents) {
      seen.add(a.id);
      let row = rows.get(a.id);
      if (!row) {
        row = agentRow(a);
        rows.set(a.id, row);
      } else row.update(a);
      // Keep DOM order equal to the sorted order without re-creating rows (focus stays where it is).
      const next: Element | null = prev ? prev.nextElementSibling : list.firstElementChild;
      if (next !== row.el) list.insertBefore(row.el, next);
      prev = row.el;
    }
    for (const [id, row] of rows) {
      if (!seen.has(id)) {
        row.el.remove();
        rows.delete(id);
      }
    }
    if (store.loadError) setText(empty, `Could not load the agents: ${store.loadError}`);
    else if (!store.loaded) setText(empty, 'Loading agents…');
    else if (agents.length === 0) setText(empty, 'No agents yet. Create one with the form above.');
    else setText(empty, '');
    empty.hidden = empty.textContent === '';
  };
  const unsub = store.subscribe(sync);
  // "Sleeps in N min" counts down on the client clock; nothing is fetched.
  const tick = setInterval(() => {
    for (const a of store.agents.values()) rows.get(a.id)?.update(a);
  }, 20_000);
  sync();
  const el = h('div', { class: 'page agents-page' }, createForm(), section);
  return {
    el,
    unmount() {
      unsub();
      clearInterval(tick);
      replace(list);
    },
  };
}

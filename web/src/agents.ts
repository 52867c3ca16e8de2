// The agents page: every agent with its live state, and the create form.
import { api, ApiError, errorMessage, type Agent, type Limits, type NewAgent, type Preset } from './api';
import { actions, badge, resources, statusLine } from './agentui';
import { formatMb, h, replace, setText } from './dom';
import { envEditor } from './env';
import { linkHandler, type Page } from './nav';
import { store } from './store';
import { isExpiring, ttlText } from './ttlfmt';

interface Row {
  el: HTMLElement;
  update: (a: Agent) => void;
  tickTtl: (a: Agent) => void;
}

function agentRow(agent: Agent): Row {
  const href = `/agents/${encodeURIComponent(agent.id)}`;
  const name = h('a', { class: 'agent-name', href, onclick: linkHandler(href) });
  const id = h('span', { class: 'agent-id mono' });
  const b = badge();
  const meta = h('div', { class: 'agent-meta' });
  const image = h('span', { class: 'mono agent-image' });
  const res = h('span', { class: 'agent-res' });
  const preset = h('span', { class: 'agent-preset', hidden: true, title: 'Preset' });
  const presetSep = h('span', { class: 'sep', 'aria-hidden': 'true', hidden: true }, '·');
  const ttl = h('span', { class: 'agent-ttl', 'data-testid': 'agent-ttl', hidden: true });
  const ttlSep = h('span', { class: 'sep', 'aria-hidden': 'true', hidden: true }, '·');
  meta.append(preset, presetSep, image, h('span', { class: 'sep', 'aria-hidden': 'true' }, '·'), res, ttlSep, ttl);
  /** The lifetime's countdown, ticked by the second from the page. */
  const tickTtl = (a: Agent) => {
    const words = a.state === 'destroying' ? null : ttlText(a.expiresAt);
    ttl.hidden = ttlSep.hidden = words === null;
    setText(ttl, words ?? '');
    ttl.classList.toggle('ttl-expiring', words !== null && isExpiring(a.expiresAt, store.toldExpiring(a)));
  };
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
    setText(preset, a.preset ? `preset ${a.preset}` : '');
    preset.hidden = presetSep.hidden = !a.preset;
    setText(image, a.image);
    image.title = a.image;
    setText(res, resources(a));
    tickTtl(a);
    status.update(a);
    acts.update(a);
    open.setAttribute('aria-label', `Open ${a.name}`);
  };
  update(agent);
  return { el, update, tickTtl };
}

interface Field {
  key: keyof NewAgent;
  label: string;
  input: HTMLInputElement;
  error: HTMLElement;
  wrap: HTMLElement;
}

/** `python:3.12 · 2 CPUs · 4 GiB · 10 GiB disk · sleeps after 15 min idle · runtime runsc · env A, B · setup script`. */
export function presetSummary(p: Preset): string {
  const parts: string[] = [];
  parts.push(p.image, `${p.cpus} CPU${p.cpus === 1 ? '' : 's'}`, formatMb(p.memoryMb));
  if (p.diskMb != null) parts.push(`${formatMb(p.diskMb)} disk`);
  parts.push(p.idleMinutes === 0 ? 'never sleeps' : `sleeps after ${p.idleMinutes} min idle`);
  if (p.runtime) parts.push(`runtime ${p.runtime}`);
  if (p.allowRoot) parts.push('sudo');
  const env = Object.keys(p.env);
  if (env.length) parts.push(`env ${env.join(', ')}`);
  if (p.egress) parts.push('own internet rules');
  if (p.setup) parts.push(p.setupOnRebuild ? 'setup script (again after a rebuild)' : 'setup script');
  return parts.join(' · ');
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
  // Preset and runtime choices, and env: shown only when the server offers them.
  const presetSelect = h('select', { id: 'new-preset', name: 'preset', 'aria-describedby': 'new-preset-detail new-preset-error', 'data-testid': 'preset-select' });
  const presetDetail = h('p', { id: 'new-preset-detail', class: 'preset-detail muted', 'data-testid': 'preset-detail' });
  const presetError = h('p', { id: 'new-preset-error', class: 'field-error', 'data-field-error': 'preset', 'aria-live': 'polite' });
  const presetWrap = h(
    'div',
    { class: 'field field-preset', hidden: true },
    h('label', { for: 'new-preset' }, 'Preset', h('span', { class: 'hint' }, 'empty fields take its values')),
    presetSelect,
    presetDetail,
    presetError,
  );
  const runtimeSelect = h('select', { id: 'new-runtime', name: 'runtime', 'aria-describedby': 'new-runtime-error', 'data-testid': 'runtime-select' });
  // Root in the sandbox (sudo): ticked as the chosen preset says; sent only when it differs.
  const rootBox = h('input', { type: 'checkbox', id: 'new-allow-root', name: 'allowRoot', 'data-testid': 'allow-root' }) as HTMLInputElement;
  const rootWrap = h(
    'div',
    { class: 'field field-allow-root' },
    h('label', { for: 'new-allow-root' }, rootBox, ' Allow root (sudo)', h('span', { class: 'hint' }, 'root inside the sandbox only')),
  );
  const runtimeError = h('p', { id: 'new-runtime-error', class: 'field-error', 'data-field-error': 'runtime', 'aria-live': 'polite' });
  const runtimeWrap = h(
    'div',
    { class: 'field field-runtime', hidden: true },
    h('label', { for: 'new-runtime' }, 'Runtime', h('span', { class: 'hint' }, 'runsc: gVisor, stronger isolation')),
    runtimeSelect,
    runtimeError,
  );
  const env = envEditor('new');
  const envError = h('p', { class: 'field-error', 'data-field-error': 'env', 'aria-live': 'polite' });
  const envWrap = h('div', { class: 'create-env' }, env.el, envError);

  let limits: Limits | null = null;
  let presets: Preset[] = [];
  const chosenPreset = (): Preset | undefined => (presetWrap.hidden ? undefined : presets.find((p) => p.name === presetSelect.value));

  /** Placeholders say what an empty field becomes: the chosen preset's value, else the server's default. */
  const applyPlaceholders = () => {
    const p = chosenPreset();
    const set = (key: keyof NewAgent, fromPreset: string | null, fallback: string | null, max?: number, hint?: string) => {
      const f = fields.find((x) => x.key === key);
      if (!f) return;
      if (fromPreset !== null) f.input.placeholder = `${fromPreset} (preset)`;
      else if (fallback !== null) f.input.placeholder = `${fallback} (default)`;
      if (max !== undefined) f.input.max = String(max);
      if (hint) f.input.title = hint;
    };
    const str = (v: number | string | null | undefined) => (v == null || v === '' ? null : String(v));
    const l = limits;
    set('image', str(p?.image), l ? l.defaultImage : null, undefined, l ? `Default: ${l.defaultImage}` : undefined);
    set('cpus', str(p?.cpus), l ? String(l.defaultCpus) : null, l?.maxCpus, l ? `Default ${l.defaultCpus}, at most ${l.maxCpus}` : undefined);
    set('memoryMb', str(p?.memoryMb), l ? String(l.defaultMemoryMb) : null, l?.maxMemoryMb, l ? `Default ${l.defaultMemoryMb} MiB, at most ${l.maxMemoryMb} MiB` : undefined);
    if (l && l.maxDiskMb == null) {
      fields.find((x) => x.key === 'diskMb')?.wrap.remove();
    } else if (l) {
      const d = l.defaultDiskMb == null ? 'no limit' : String(l.defaultDiskMb);
      set('diskMb', str(p?.diskMb), d, l.maxDiskMb ?? undefined, `Size of the home: default ${d === 'no limit' ? 'no limit' : `${d} MiB`}, at most ${l.maxDiskMb} MiB`);
    }
    set('idleMinutes', str(p?.idleMinutes), l ? String(l.defaultIdleMinutes) : null, l?.maxIdleMinutes, l ? `Default ${l.defaultIdleMinutes} minutes` : undefined);
    setText(presetDetail, p ? [p.description, presetSummary(p)].filter(Boolean).join(' — ') : presetWrap.hidden ? '' : 'The server’s defaults.');
    rootBox.checked = p?.allowRoot ?? false;
    const first = runtimeSelect.options[0];
    if (first) first.textContent = p?.runtime ? `the preset’s (${p.runtime})` : 'server default';
  };

  // Show the server's defaults and maxima when it tells them.
  void api.limits().then((l) => {
    if (!l) return;
    limits = l;
    if (l.runtimes.length > 1) {
      replace(runtimeSelect, h('option', { value: '' }, 'server default'), l.runtimes.map((r) => h('option', { value: r }, r)));
      runtimeWrap.hidden = false;
    }
    applyPlaceholders();
  });
  // Without the list (a failed request) the form still creates agents, with the server's
  // default preset; the next form asks again.
  // A preset whose warm pool has a ready sandbox is "instant": a create from it (asking for
  // nothing the pool cannot change) is answered running at once. Without the pool's answer the
  // list is shown all the same.
  void Promise.all([api.presets(), api.pool().catch(() => [])]).then(([list, pools]) => {
    presets = list;
    if (list.length === 0) return;
    const instant = new Set(pools.filter((p) => p.ready > 0).map((p) => p.preset));
    const hasDefault = list.some((p) => p.default);
    replace(
      presetSelect,
      hasDefault ? null : h('option', { value: '' }, 'none (server defaults)'),
      list.map((p) =>
        h(
          'option',
          { value: p.name, selected: p.default, 'data-instant': instant.has(p.name) ? 'true' : null },
          `${p.name}${p.default ? ' (default)' : ''}${instant.has(p.name) ? ' · instant' : ''}${p.description ? ` — ${p.description}` : ''}`,
        ),
      ),
    );
    const def = list.find((p) => p.default);
    presetSelect.value = def ? def.name : '';
    presetWrap.hidden = false;
    applyPlaceholders();
  }, () => {});
  presetSelect.addEventListener('change', () => {
    presetError.textContent = '';
    applyPlaceholders();
  });
  runtimeSelect.addEventListener('change', () => (runtimeError.textContent = ''));
  const formError = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'create-error' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Create agent');
  const form = h(
    'form',
    { class: 'create card', 'data-testid': 'create-form', novalidate: true, 'aria-labelledby': 'create-title' },
    h('h2', { id: 'create-title' }, 'New agent'),
    h('div', { class: 'create-choices' }, presetWrap, runtimeWrap, rootWrap),
    h('div', { class: 'create-fields' }, fields.map((f) => f.wrap), h('div', { class: 'field field-submit' }, submit)),
    envWrap,
    formError,
  );
  const clearErrors = () => {
    for (const f of fields) {
      f.error.textContent = '';
      f.input.removeAttribute('aria-invalid');
    }
    for (const e of [presetError, runtimeError, envError]) e.textContent = '';
    formError.textContent = '';
  };
  /** Where the server's error about `field` goes, outside the plain inputs. */
  const extraField: Record<string, { error: HTMLElement; input: HTMLElement }> = {
    preset: { error: presetError, input: presetSelect },
    runtime: { error: runtimeError, input: runtimeSelect },
    env: { error: envError, input: env.el },
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
    if (!presetWrap.hidden && presetSelect.value) body.preset = presetSelect.value;
    if (!runtimeWrap.hidden && runtimeSelect.value) body.runtime = runtimeSelect.value;
    if (rootBox.checked !== (chosenPreset()?.allowRoot ?? false)) body.allowRoot = rootBox.checked;
    if (!env.empty()) {
      const r = env.read();
      if ('error' in r) {
        envError.textContent = r.error;
        return;
      }
      body.env = r.env;
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
      env.set({});
      const def = presets.find((p) => p.default);
      if (!presetWrap.hidden) presetSelect.value = def ? def.name : '';
      applyPlaceholders();
      fields[0].input.focus();
    } catch (err) {
      const msg = errorMessage(err);
      const f = err instanceof ApiError && err.field ? fields.find((x) => x.key === err.field) : undefined;
      const x = err instanceof ApiError && err.field ? (extraField[err.field] ?? (err.field.startsWith('env') ? extraField.env : undefined)) : undefined;
      if (f) {
        f.error.textContent = msg;
        f.input.setAttribute('aria-invalid', 'true');
        f.input.focus();
      } else if (x && !x.input.closest('[hidden]')) {
        x.error.textContent = msg;
        x.input.setAttribute('aria-invalid', 'true');
        x.input.focus();
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
  const ttlTick = setInterval(() => {
    for (const a of store.agents.values()) if (a.expiresAt) rows.get(a.id)?.tickTtl(a);
  }, 1000);
  sync();
  const el = h('div', { class: 'page agents-page' }, createForm(), section);
  return {
    el,
    unmount() {
      unsub();
      clearInterval(tick);
      clearInterval(ttlTick);
      replace(list);
    },
  };
}

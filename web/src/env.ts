// A key/value editor for an agent's `env` (not secrets: every shell, exec and terminal sees them).
// Used by the create form and the agent page. Names are checked here as the server checks them,
// so a typo shows at its row before anything is sent; the server's answer still has the last word.
import { api, ApiError, errorMessage, type Agent } from './api';
import { h, replace, toast } from './dom';
import { store } from './store';

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_NAMES = 128;
const MAX_VALUE_BYTES = 4096;

export interface EnvEditor {
  el: HTMLElement;
  /** Replace the rows with `env`'s pairs (sorted by name). */
  set(env: Record<string, string> | null | undefined): void;
  /** The pairs, or a message naming the first bad row (which is marked and focused). */
  read(): { env: Record<string, string> } | { error: string };
  /** True when no row has a name or a value. */
  empty(): boolean;
}

interface EnvRow {
  el: HTMLElement;
  key: HTMLInputElement;
  value: HTMLInputElement;
}

export function envEditor(idPrefix: string, label = 'Environment'): EnvEditor {
  const rows: EnvRow[] = [];
  const list = h('div', { class: 'env-rows', 'data-testid': `${idPrefix}-env-rows` });
  const add = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': `${idPrefix}-env-add` }, 'Add variable');
  const el = h(
    'fieldset',
    { class: 'env-editor', 'data-testid': `${idPrefix}-env-editor` },
    h('legend', null, label, h('span', { class: 'hint' }, 'NAME = value, for every shell and process; not for secrets')),
    list,
    add,
  );

  const render = () => {
    replace(
      list,
      rows.map((r) => r.el),
    );
  };
  const addRow = (k = '', v = '') => {
    const n = rows.length;
    const key = h('input', { type: 'text', class: 'env-key mono', value: k, spellcheck: 'false', autocomplete: 'off', placeholder: 'NAME', 'aria-label': `Variable ${n + 1} name` });
    const value = h('input', { type: 'text', class: 'env-value mono', value: v, spellcheck: 'false', autocomplete: 'off', placeholder: 'value', 'aria-label': `Variable ${n + 1} value` });
    const del = h('button', { type: 'button', class: 'btn btn-small btn-ghost', 'aria-label': `Remove variable ${n + 1}` }, '×');
    const row: EnvRow = { el: h('div', { class: 'env-row', 'data-testid': 'env-row' }, key, h('span', { class: 'env-eq', 'aria-hidden': 'true' }, '='), value, del), key, value };
    for (const input of [key, value]) input.addEventListener('input', () => input.removeAttribute('aria-invalid'));
    del.addEventListener('click', () => {
      rows.splice(rows.indexOf(row), 1);
      render();
      add.focus();
    });
    rows.push(row);
    render();
    return row;
  };
  add.addEventListener('click', () => addRow().key.focus());

  const bad = (input: HTMLInputElement, error: string) => {
    input.setAttribute('aria-invalid', 'true');
    input.focus();
    return { error };
  };

  return {
    el,
    set(env) {
      rows.length = 0;
      render();
      for (const [k, v] of Object.entries(env ?? {}).sort(([a], [b]) => a.localeCompare(b))) addRow(k, v);
    },
    read() {
      const env: Record<string, string> = {};
      for (const r of rows) {
        const k = r.key.value.trim();
        const v = r.value.value;
        if (!k && !v) continue;
        if (!NAME.test(k)) return bad(r.key, `“${k}” is not a variable name: letters, digits and _, not starting with a digit.`);
        if (k in env) return bad(r.key, `${k} is there twice.`);
        if (new TextEncoder().encode(v).length > MAX_VALUE_BYTES) return bad(r.value, `${k}'s value is over ${MAX_VALUE_BYTES} bytes.`);
        if (v.includes('\0')) return bad(r.value, `${k}'s value has a NUL character.`);
        env[k] = v;
      }
      if (Object.keys(env).length > MAX_NAMES) return { error: `At most ${MAX_NAMES} variables.` };
      return { env };
    },
    empty: () => rows.every((r) => !r.key.value.trim() && !r.value.value),
  };
}

/** The agent page's env panel: edit and save (`PATCH {env}`, the whole map; new processes get it). */
export function envCard(
  getAgent: () => Agent | null,
  onDone: () => void,
): { el: HTMLElement; fill: (a: Agent) => void } {
  const editor = envEditor('agent', 'Environment');
  const error = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'env-error' });
  const save = h('button', { type: 'submit', class: 'btn btn-primary btn-small', 'data-testid': 'env-save' }, 'Save environment');
  const close = h('button', { type: 'button', class: 'btn btn-small' }, 'Close');
  const el = h(
    'form',
    { class: 'settings card env-card', novalidate: true, 'aria-label': 'Environment', 'data-testid': 'env-form' },
    editor.el,
    h('p', { class: 'muted settings-note' }, 'Applies to shells, terminals and processes started from now on; running ones keep what they had.'),
    h('div', { class: 'settings-buttons' }, save, ' ', close),
    error,
  );
  close.addEventListener('click', onDone);
  el.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') onDone();
  });
  el.addEventListener('submit', async (e) => {
    e.preventDefault();
    const a = getAgent();
    if (!a) return;
    error.textContent = '';
    const r = editor.read();
    if ('error' in r) {
      error.textContent = r.error;
      return;
    }
    save.disabled = true;
    try {
      store.put(await api.update(a.id, { env: r.env }));
      toast('Environment saved', 'info');
      onDone();
    } catch (err) {
      const msg = errorMessage(err);
      if (err instanceof ApiError && err.status === 0) toast(msg);
      else error.textContent = msg;
    } finally {
      save.disabled = false;
    }
  });
  const fill = (a: Agent) => {
    editor.set(a.env);
    error.textContent = '';
  };
  return { el, fill };
}

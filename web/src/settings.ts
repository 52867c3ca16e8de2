// Change an agent's image or resources (PATCH). The server then marks it `needsRebuild`.
import { api, ApiError, type Agent, type AgentUpdate } from './api';
import { h, toast } from './dom';
import { store } from './store';

type Key = 'image' | 'cpus' | 'memoryMb' | 'diskMb' | 'idleMinutes';

export function settingsForm(getAgent: () => Agent | null, onDone: () => void): {
  el: HTMLElement;
  fill: (a: Agent) => void;
} {
  const defs: Array<[Key, string, Record<string, unknown>]> = [
    ['image', 'Image', { type: 'text', spellcheck: 'false', autocomplete: 'off' }],
    ['cpus', 'CPUs', { type: 'number', min: '0', step: 'any' }],
    ['memoryMb', 'Memory (MiB)', { type: 'number', min: '1', step: '1' }],
    ['diskMb', 'Disk (MiB, grows only)', { type: 'number', min: '64', step: '1' }],
    ['idleMinutes', 'Sleep after (idle min)', { type: 'number', min: '1', step: '1' }],
  ];
  const inputs = {} as Record<Key, HTMLInputElement>;
  const errors = {} as Record<Key, HTMLElement>;
  const fields = defs.map(([key, label, attrs]) => {
    const id = `edit-${key}`;
    inputs[key] = h('input', { id, name: key, 'aria-describedby': `${id}-error`, ...attrs });
    errors[key] = h('p', { id: `${id}-error`, class: 'field-error', 'data-field-error': key });
    inputs[key].addEventListener('input', () => {
      errors[key].textContent = '';
      inputs[key].removeAttribute('aria-invalid');
    });
    return h('div', { class: 'field' }, h('label', { for: id }, label), inputs[key], errors[key]);
  });
  const formError = h('p', { class: 'form-error', role: 'alert' });
  const save = h('button', { type: 'submit', class: 'btn btn-primary btn-small' }, 'Save settings');
  const cancel = h('button', { type: 'button', class: 'btn btn-small' }, 'Cancel');
  const el = h(
    'form',
    { class: 'settings card', novalidate: true, 'aria-label': 'Agent settings', 'data-testid': 'settings-form' },
    h('div', { class: 'settings-fields' }, fields, h('div', { class: 'field field-submit settings-buttons' }, h('div', null, save, ' ', cancel))),
    h('p', { class: 'muted settings-note' }, 'A new image, CPUs or memory take effect after a rebuild, a larger disk at the next start; the home folder is kept.'),
    formError,
  );
  cancel.addEventListener('click', onDone);
  el.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') onDone();
  });
  const fill = (a: Agent) => {
    inputs.image.value = a.image;
    inputs.cpus.value = String(a.cpus);
    inputs.memoryMb.value = String(a.memoryMb);
    // A home without a limit keeps it that way: nothing to edit.
    inputs.diskMb.value = a.diskMb == null ? '' : String(a.diskMb);
    inputs.diskMb.disabled = a.diskMb == null;
    inputs.diskMb.placeholder = a.diskMb == null ? 'no limit' : '';
    inputs.idleMinutes.value = String(a.idleMinutes);
    for (const k of Object.keys(errors) as Key[]) errors[k].textContent = '';
    formError.textContent = '';
  };
  el.addEventListener('submit', async (e) => {
    e.preventDefault();
    const a = getAgent();
    if (!a) return;
    for (const k of Object.keys(errors) as Key[]) {
      errors[k].textContent = '';
      inputs[k].removeAttribute('aria-invalid');
    }
    formError.textContent = '';
    const body: AgentUpdate = {};
    const image = inputs.image.value.trim();
    if (image && image !== a.image) body.image = image;
    for (const k of ['cpus', 'memoryMb', 'diskMb', 'idleMinutes'] as const) {
      const v = inputs[k].value.trim();
      if (v === '') continue;
      const n = Number(v);
      if (!Number.isFinite(n)) {
        errors[k].textContent = 'Enter a number.';
        inputs[k].setAttribute('aria-invalid', 'true');
        return;
      }
      if (n !== a[k]) body[k] = n;
    }
    if (Object.keys(body).length === 0) return onDone();
    save.disabled = true;
    try {
      store.put(await api.update(a.id, body));
      onDone();
    } catch (err) {
      const msg = err instanceof ApiError ? err.message : String(err);
      const field = err instanceof ApiError ? (err.field as Key | undefined) : undefined;
      if (field && inputs[field]) {
        errors[field].textContent = msg;
        inputs[field].setAttribute('aria-invalid', 'true');
        inputs[field].focus();
      } else if (err instanceof ApiError && err.status === 0) toast(msg);
      else formError.textContent = msg;
    } finally {
      save.disabled = false;
    }
  });
  return { el, fill };
}

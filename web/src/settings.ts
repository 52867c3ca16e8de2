// Change an agent's image or resources (PATCH). The server then marks it `needsRebuild`.
import { api, ApiError, errorMessage, type Agent, type AgentUpdate } from './api';
import { h, replace, toast } from './dom';
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
  // The runtime: only when the server allows more than one.
  const runtime = h('select', { id: 'edit-runtime', name: 'runtime', 'aria-describedby': 'edit-runtime-error', 'data-testid': 'edit-runtime' });
  const runtimeError = h('p', { id: 'edit-runtime-error', class: 'field-error', 'data-field-error': 'runtime' });
  const runtimeField = h('div', { class: 'field', hidden: true }, h('label', { for: 'edit-runtime' }, 'Runtime (after a rebuild)'), runtime, runtimeError);
  let runtimes: string[] = [];
  void api.limits().then((l) => {
    runtimes = l?.runtimes ?? [];
    const a = getAgent();
    if (a) fillRuntime(a);
  });
  const fillRuntime = (a: Agent) => {
    const show = runtimes.length > 1;
    runtimeField.hidden = !show;
    if (!show) return;
    const names = runtimes.includes(a.runtime) ? runtimes : [a.runtime, ...runtimes];
    replace(
      runtime,
      names.map((r) => h('option', { value: r }, r)),
    );
    runtime.value = a.runtime;
    runtimeError.textContent = '';
  };
  runtime.addEventListener('change', () => (runtimeError.textContent = ''));
  const formError = h('p', { class: 'form-error', role: 'alert' });
  const save = h('button', { type: 'submit', class: 'btn btn-primary btn-small' }, 'Save settings');
  const cancel = h('button', { type: 'button', class: 'btn btn-small' }, 'Cancel');
  const el = h(
    'form',
    { class: 'settings card', novalidate: true, 'aria-label': 'Agent settings', 'data-testid': 'settings-form' },
    h('div', { class: 'settings-fields' }, fields, runtimeField, h('div', { class: 'field field-submit settings-buttons' }, h('div', null, save, ' ', cancel))),
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
    fillRuntime(a);
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
    if (!runtimeField.hidden && runtime.value && runtime.value !== a.runtime) body.runtime = runtime.value;
    if (Object.keys(body).length === 0) return onDone();
    save.disabled = true;
    try {
      store.put(await api.update(a.id, body));
      onDone();
    } catch (err) {
      const msg = errorMessage(err);
      const field = err instanceof ApiError ? (err.field as Key | undefined) : undefined;
      if ((field as string | undefined) === 'runtime' && !runtimeField.hidden) {
        runtimeError.textContent = msg;
        runtime.focus();
      } else if (field && inputs[field]) {
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

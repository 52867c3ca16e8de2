// An agent's internet access: its egress rules (editable; they apply at once, no restart) and the
// destinations its sandbox was refused lately, each with a button that allows it, and the secrets
// the proxy swapped into its requests lately (by name: a value never reaches the browser).
import { api, ApiError, errorMessage, type Agent, type EgressRules } from './api';
import { h, replace, toast } from './dom';
import { store } from './store';

const lines = (text: string): string[] =>
  text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');

export function egressCard(getAgent: () => Agent | null, onDone: () => void): {
  el: HTMLElement;
  fill: (a: Agent) => void;
  update: (a: Agent) => void;
} {
  const allow = h('textarea', { id: 'egress-allow', name: 'allow', rows: 4, spellcheck: 'false', 'data-testid': 'egress-allow' });
  const deny = h('textarea', { id: 'egress-deny', name: 'deny', rows: 2, spellcheck: 'false', 'data-testid': 'egress-deny' });
  const error = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'egress-error' });
  const save = h('button', { type: 'submit', class: 'btn btn-primary btn-small' }, 'Save rules');
  const close = h('button', { type: 'button', class: 'btn btn-small' }, 'Close');
  const blocked = h('ul', { class: 'egress-blocked', 'data-testid': 'egress-blocked' });
  const secretUses = h('ul', { class: 'egress-blocked', 'data-testid': 'egress-secret-uses' });
  const el = h(
    'form',
    { class: 'settings card egress', novalidate: true, 'aria-label': 'Internet access', 'data-testid': 'egress-form' },
    h('p', { class: 'muted settings-note' }, 'One rule per line: pypi.org, *.pythonhosted.org (names below it), 203.0.113.0/24, or * (any public destination); add :PORT to match one port. Deny wins. No rule: nothing is reachable. Changes apply at once.'),
    h(
      'div',
      { class: 'settings-fields' },
      h('div', { class: 'field' }, h('label', { for: 'egress-allow' }, 'Allow'), allow),
      h('div', { class: 'field' }, h('label', { for: 'egress-deny' }, 'Deny'), deny),
      h('div', { class: 'field field-submit settings-buttons' }, h('div', null, save, ' ', close)),
    ),
    error,
    h('h3', { class: 'egress-blocked-title' }, 'Blocked lately'),
    blocked,
    h('h3', { class: 'egress-blocked-title' }, 'Secrets used lately'),
    secretUses,
  );
  close.addEventListener('click', onDone);
  el.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') onDone();
  });

  const patch = async (rules: EgressRules): Promise<boolean> => {
    const a = getAgent();
    if (!a) return false;
    error.textContent = '';
    save.disabled = true;
    try {
      store.put(await api.update(a.id, { egress: rules }));
      return true;
    } catch (err) {
      const msg = errorMessage(err);
      if (err instanceof ApiError && err.status === 0) toast(msg);
      else error.textContent = msg;
      return false;
    } finally {
      save.disabled = false;
    }
  };

  el.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (await patch({ allow: lines(allow.value), deny: lines(deny.value) })) toast('Egress rules saved');
  });

  // The server's log first (so the list survives a reload), once per agent; then live events.
  let logLoaded: string | null = null;
  const loadLog = (id: string) => {
    if (logLoaded === id) return;
    logLoaded = id;
    api.egressLog(id).then(
      (log) => store.seedBlocked(id, log),
      () => {
        logLoaded = null;
      },
    );
  };

  const fill = (a: Agent) => {
    loadLog(a.id);
    allow.value = (a.egress?.allow ?? []).join('\n');
    deny.value = (a.egress?.deny ?? []).join('\n');
    error.textContent = '';
    update(a);
  };

  const update = (a: Agent) => {
    const uses = store.secretUses.get(a.id) ?? [];
    replace(
      secretUses,
      uses.length === 0
        ? h('li', { class: 'muted' }, 'No secret was sent lately.')
        : uses.map((u) =>
            h('li', { 'data-secret-use': `${u.secret}@${u.host}:${u.port}` }, h('span', { class: 'mono' }, u.secret ?? ''), ' → ', h('span', { class: 'mono' }, `${u.host}:${u.port}`)),
          ),
    );
    const recent = store.blocked.get(a.id) ?? [];
    if (recent.length === 0) {
      replace(blocked, h('li', { class: 'muted' }, 'Nothing was blocked lately.'));
      return;
    }
    replace(
      blocked,
      recent.map((b) => {
        // A refused secret is about where the secret may go, not the rules: allowing the host
        // would not let it through, so there is no button.
        const allowIt = b.secret ? null : h('button', { type: 'button', class: 'btn btn-small', 'data-allow': b.host }, 'Allow');
        allowIt?.addEventListener('click', async () => {
          const cur = getAgent()?.egress;
          const allowed = cur?.allow ?? [];
          if (allowed.includes(b.host)) return;
          if (await patch({ allow: [...allowed, b.host], deny: cur?.deny ?? [] })) {
            allow.value = [...allowed, b.host].join('\n');
            toast(`${b.host} allowed`);
          }
        });
        return h(
          'li',
          { 'data-blocked': `${b.host}:${b.port}`, 'data-secret': b.secret ?? null },
          h('span', { class: 'mono' }, `${b.host}:${b.port}`),
          ' ',
          b.secret ? h('span', { class: 'mono' }, `secret ${b.secret} `) : null,
          h('span', { class: 'muted' }, b.reason ?? ''),
          ' ',
          allowIt,
        );
      }),
    );
  };
  return { el, fill, update };
}

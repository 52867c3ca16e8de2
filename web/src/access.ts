// An agent's Access panel: its owner, who else may see and use it (private, protected with an
// access token, public), its members, and which commands wait for approval. Only what the
// server allows the caller takes effect; a refusal is its message here.
import { api, errorMessage, type Agent, type AgentAccess, type AgentMember, type CommandApprovals, type MemberRole } from './api';
import { h, replace, setText, toast } from './dom';
import { store } from './store';

const POLICIES: Array<[AgentAccess, string]> = [
  ['private', 'Private: only its owner, admins and members'],
  ['protected', 'Protected: also whoever presents its access token'],
  ['public', 'Public: anyone signed in may use it'],
];
const COMMANDS: Array<[CommandApprovals, string]> = [
  ['never', 'Never'],
  ['dangerous', 'Dangerous commands'],
  ['always', 'Every command'],
];

function select<T extends string>(id: string, options: Array<[T, string]>): HTMLSelectElement {
  return h('select', { id, name: id }, options.map(([v, label]) => h('option', { value: v }, label)));
}

export function accessCard(getAgent: () => Agent | null, onDone: () => void): {
  el: HTMLElement;
  fill: (a: Agent) => void;
} {
  const owner = h('span', { 'data-testid': 'access-owner' });
  const policy = select('access-policy', POLICIES);
  const commands = select('access-commands', COMMANDS);
  const save = h('button', { type: 'submit', class: 'btn btn-primary btn-small' }, 'Save');
  const close = h('button', { type: 'button', class: 'btn btn-small' }, 'Close');
  const error = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'access-error' });
  const newToken = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'access-new-token' }, 'New access token');
  const tokenOut = h('div', { class: 'token-result', 'data-testid': 'access-token-out' });
  const members = h('ul', { class: 'members', 'data-testid': 'access-members' });
  const memberUser = h('input', { id: 'member-user', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'user name' });
  const memberRole = select<MemberRole>('member-role', [
    ['user', 'user (use)'],
    ['operator', 'operator (also start, stop, settings)'],
  ]);
  const addMember = h('button', { type: 'button', class: 'btn btn-small' }, 'Add member');
  const el = h(
    'form',
    { class: 'settings card access', novalidate: true, 'aria-label': 'Access', 'data-testid': 'access-form' },
    h('p', { class: 'muted settings-note' }, 'Owner: ', owner, '. Only the owner and admins change who may use the agent and its members.'),
    h(
      'div',
      { class: 'team-fields' },
      h('div', { class: 'field' }, h('label', { for: 'access-policy' }, 'Who may use it'), policy),
      h('div', { class: 'field' }, h('label', { for: 'access-commands' }, 'Commands that wait for approval', h('span', { class: 'hint' }, 'others’ than the owner’s')), commands),
      h('div', { class: 'field field-submit' }, h('div', null, save, ' ', close)),
    ),
    error,
    h('div', { class: 'access-token-line' }, newToken, tokenOut),
    h('h3', null, 'Members'),
    members,
    h(
      'div',
      { class: 'team-fields' },
      h('div', { class: 'field' }, h('label', { for: 'member-user' }, 'User'), memberUser),
      h('div', { class: 'field' }, h('label', { for: 'member-role' }, 'Role'), memberRole),
      h('div', { class: 'field field-submit' }, addMember),
    ),
  );
  close.addEventListener('click', onDone);
  el.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') onDone();
  });

  const showMembers = (list: AgentMember[]) => {
    const a = getAgent();
    replace(
      members,
      list.length === 0
        ? h('li', { class: 'muted' }, 'No members.')
        : list.map((m) => {
            const remove = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', 'aria-label': `Remove ${m.userName}` }, 'Remove');
            remove.addEventListener('click', async () => {
              if (!a) return;
              try {
                await api.removeMember(a.id, m.userId);
                await loadMembers();
              } catch (err) {
                toast(errorMessage(err));
              }
            });
            return h('li', { class: 'member', 'data-member': m.userName }, h('span', null, m.userName), h('span', { class: 'muted' }, ` · ${m.role} `), remove);
          }),
    );
  };
  const loadMembers = async () => {
    const a = getAgent();
    if (!a) return;
    try {
      showMembers(await api.members(a.id));
    } catch (err) {
      replace(members, h('li', { class: 'muted' }, `Members: ${errorMessage(err)}`));
    }
  };

  el.addEventListener('submit', async (e) => {
    e.preventDefault();
    const a = getAgent();
    if (!a) return;
    setText(error, '');
    save.disabled = true;
    try {
      const body: { access?: AgentAccess; approvals?: { commands: CommandApprovals } } = {};
      if (policy.value !== a.access) body.access = policy.value as AgentAccess;
      if (commands.value !== (a.approvals?.commands ?? 'never')) body.approvals = { commands: commands.value as CommandApprovals };
      if (Object.keys(body).length) store.put(await api.update(a.id, body));
      newToken.hidden = policy.value !== 'protected';
    } catch (err) {
      setText(error, errorMessage(err));
    } finally {
      save.disabled = false;
    }
  });
  newToken.addEventListener('click', async () => {
    const a = getAgent();
    if (!a) return;
    try {
      const { accessToken } = await api.newAccessToken(a.id);
      const field = h('input', { type: 'text', readonly: true, value: accessToken, class: 'mono token-value', 'aria-label': 'The access token' });
      replace(tokenOut, h('div', { class: 'token-once', role: 'status' }, h('p', null, `Give it with the agent’s id (${a.id}) to whoever should join; it is not shown again.`), field));
    } catch (err) {
      setText(error, errorMessage(err));
    }
  });
  addMember.addEventListener('click', async () => {
    const a = getAgent();
    const user = memberUser.value.trim();
    if (!a || !user) return;
    try {
      await api.addMember(a.id, user, memberRole.value as MemberRole);
      memberUser.value = '';
      await loadMembers();
    } catch (err) {
      setText(error, errorMessage(err));
    }
  });

  const fill = (a: Agent) => {
    setText(owner, a.owner?.name ?? '—');
    policy.value = a.access ?? 'private';
    commands.value = a.approvals?.commands ?? 'never';
    newToken.hidden = policy.value !== 'protected';
    replace(tokenOut);
    setText(error, '');
    void loadMembers();
  };
  return { el, fill };
}

// How each item of a conversation (chatmodel.ts) looks. Every piece of the transcript becomes
// text nodes or attribute values; agent messages go through markdown.ts, which makes no HTML.
import { optionButtons } from './approvals';
import { h } from './dom';
import { renderMarkdown } from './markdown';
import { resolutionText, stopText, pretty, type ChatItem, type PermissionItem, type ToolItem } from './chatmodel';

const NOTICE_LABELS: Record<string, string> = {
  waking: 'Waking',
  context_reset: 'Context reset',
  harness_exited: 'Harness exited',
  gap: 'Gap',
  error: 'Error',
};

const TOOL_STATUS: Record<string, string> = {
  pending: 'pending',
  in_progress: 'running',
  completed: 'completed',
  failed: 'failed',
};

const attachmentList = (list: string[]) =>
  list.length ? h('ul', { class: 'chat-attachments' }, list.map((a) => h('li', { class: 'mono' }, a))) : null;

function tool(t: ToolItem): HTMLElement {
  const status = TOOL_STATUS[t.status] ?? t.status;
  const body: HTMLElement[] = [];
  if (t.locations.length) body.push(h('div', { class: 'chat-tool-locations mono' }, t.locations.join('  ')));
  for (const c of t.content) {
    if (c.type === 'text') body.push(h('pre', { class: 'chat-tool-text mono' }, c.text));
    else if (c.type === 'diff')
      body.push(
        h(
          'details',
          { class: 'chat-tool-diff' },
          h('summary', null, `Edit ${c.path}`),
          c.oldText !== null ? h('pre', { class: 'chat-diff-old mono' }, c.oldText) : null,
          h('pre', { class: 'chat-diff-new mono' }, c.newText),
        ),
      );
    else body.push(h('div', { class: 'chat-tool-other mono' }, c.label));
  }
  if (t.rawInput !== undefined) body.push(h('details', { class: 'chat-raw' }, h('summary', null, 'Input'), h('pre', { class: 'mono' }, pretty(t.rawInput))));
  if (t.rawOutput !== undefined) body.push(h('details', { class: 'chat-raw' }, h('summary', null, 'Output'), h('pre', { class: 'mono' }, pretty(t.rawOutput))));
  return h(
    'div',
    { class: `chat-item chat-tool chat-tool-${t.status}`, 'data-tool-call-id': t.toolCallId, 'data-status': t.status },
    h(
      'div',
      { class: 'chat-tool-head' },
      h('span', { class: 'chat-tool-icon', 'aria-hidden': 'true' }, '⚙'),
      h('span', { class: 'chat-tool-title' }, t.title),
      t.toolKind ? h('span', { class: 'chat-tool-kind muted' }, t.toolKind) : null,
      h('span', { class: `chat-tool-status status-${t.status}`, 'data-testid': 'tool-status' }, status),
    ),
    body,
  );
}

function permission(p: PermissionItem): HTMLElement {
  const a = p.approval;
  const title = (typeof a.toolCall?.title === 'string' && a.toolCall.title) || 'a tool call';
  return h(
    'div',
    {
      class: `chat-item chat-permission${p.resolved ? ' chat-permission-resolved' : ''}`,
      'data-approval-id': a.id,
      'data-state': p.resolved ? 'resolved' : 'pending',
      role: 'group',
      'aria-label': 'Permission request',
    },
    h('div', { class: 'chat-permission-head' }, h('strong', null, 'Permission: '), title),
    p.resolved
      ? h('div', { class: `chat-permission-outcome outcome-${p.resolved.outcome}`, 'data-testid': 'permission-outcome' }, resolutionText(p))
      : optionButtons(a),
  );
}

/** The element of one item (a new one each time the item changes). */
export function renderItem(item: ChatItem): HTMLElement {
  switch (item.kind) {
    case 'prompt':
      return h(
        'div',
        { class: `chat-item chat-prompt${item.replayed ? ' chat-replayed' : ''}`, 'data-turn': item.turn ?? '' },
        h('div', { class: 'chat-prompt-text' }, item.text),
        attachmentList(item.attachments),
      );
    case 'message': {
      return h('div', { class: 'chat-item chat-message' }, renderMarkdown(item.text), attachmentList(item.attachments));
    }
    case 'thought':
      return h(
        'details',
        { class: 'chat-item chat-thought' },
        h('summary', null, 'Thinking'),
        h('div', { class: 'chat-thought-text' }, item.text),
      );
    case 'tool':
      return tool(item);
    case 'plan':
      return h(
        'div',
        { class: 'chat-item chat-plan' },
        h('div', { class: 'chat-plan-head' }, 'Plan'),
        h(
          'ul',
          { class: 'chat-plan-list' },
          item.entries.map((e) =>
            h(
              'li',
              { class: `chat-plan-entry plan-${e.status}`, 'data-status': e.status },
              h('input', { type: 'checkbox', disabled: true, checked: e.status === 'completed', 'aria-label': e.status }),
              h('span', null, e.content),
              e.status === 'in_progress' ? h('span', { class: 'muted' }, ' (in progress)') : null,
            ),
          ),
        ),
      );
    case 'notice':
      return h(
        'div',
        { class: `chat-item chat-notice notice-${item.noticeKind}`, 'data-kind': item.noticeKind, role: item.noticeKind === 'error' ? 'alert' : null },
        h('span', { class: 'chat-notice-kind' }, NOTICE_LABELS[item.noticeKind] ?? item.noticeKind),
        ' ',
        item.text,
      );
    case 'stop':
      return h('div', { class: `chat-item chat-stop stop-${item.stopReason}`, 'data-stop-reason': item.stopReason }, stopText(item.stopReason));
    case 'permission':
      return permission(item);
    case 'raw':
      return h(
        'details',
        { class: 'chat-item chat-raw', 'data-label': item.label },
        h('summary', null, item.label),
        h('pre', { class: 'mono' }, item.json),
      );
  }
}

/** Replace `old` by the item's new element, keeping which of its foldings were open. */
export function rerender(old: HTMLElement, item: ChatItem): HTMLElement {
  const next = renderItem(item);
  const oldDetails = [old, ...old.querySelectorAll('details')].filter((d): d is HTMLDetailsElement => d instanceof HTMLDetailsElement);
  const newDetails = [next, ...next.querySelectorAll('details')].filter((d): d is HTMLDetailsElement => d instanceof HTMLDetailsElement);
  oldDetails.forEach((d, i) => {
    if (newDetails[i] && d.open) newDetails[i].open = true;
  });
  old.replaceWith(next);
  return next;
}

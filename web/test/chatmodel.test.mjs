// The Chat tab's reducer (src/chatmodel.ts): a session's transcript events folded into the items
// the conversation shows. No DOM, no server.
// Run by `npm run test:unit`, which bundles the module into test/.build first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyEvent, newChat, pendingPermissions, resolutionText, stopText, blockLabel } from './.build/chatmodel.mjs';

/** A model fed `events` ([event, data] pairs, numbered from 1). */
function fold(events, m = newChat()) {
  let seq = m.lastSeq;
  for (const [event, data] of events) applyEvent(m, { seq: ++seq, event, data });
  return m;
}
const text = (t) => ({ type: 'text', text: t });
const chunk = (t, kind = 'agent_message_chunk') => ['update', { sessionUpdate: kind, content: text(t) }];
/** Each item without its bookkeeping (key, rev). */
const plain = (m) => m.items.map(({ key, rev, ...rest }) => rest);

const APPROVAL = {
  id: 'ap1',
  agentId: 'ag',
  sessionId: 'se',
  kind: 'permission',
  toolCall: { toolCallId: 'call_1', title: 'Run the test tool' },
  options: [
    { optionId: 'b7', name: 'Reject always', kind: 'reject_always' },
    { optionId: 'a2', name: 'Allow once', kind: 'allow_once' },
    { optionId: 'c9', name: 'Reject once', kind: 'reject_once' },
    { optionId: 'd4', name: 'Allow always', kind: 'allow_always' },
  ],
  state: 'pending',
  createdAt: '2026-12-06T00:00:00Z',
  expiresAt: '2026-12-06T00:10:00Z',
  outcome: null,
  optionId: null,
  decidedBy: null,
};

test('a turn: the prompt, consecutive message chunks joined, running while it runs', () => {
  const m = fold([
    ['prompt', { turn: 1, prompt: [text('hello'), text(' there')] }],
    ['turn', { turn: 1, state: 'started', stopReason: null }],
    chunk('Hel'),
    chunk('lo '),
  ]);
  assert.equal(m.running, true);
  assert.equal(m.turn, 1);
  assert.equal(m.lastSeq, 4);
  fold([chunk('**world**'), ['turn', { turn: 1, state: 'ended', stopReason: 'end_turn' }]], m);
  assert.equal(m.running, false);
  assert.equal(m.endedTurn, 1);
  assert.equal(m.lastStop, 'end_turn');
  assert.deepEqual(plain(m), [
    { kind: 'prompt', seq: 1, turn: 1, text: 'hello there', attachments: [], replayed: false },
    { kind: 'message', seq: 3, turn: 1, text: 'Hello **world**', attachments: [] },
  ]);
  // The message changed in place: its rev counts the chunks joined after the first.
  assert.equal(m.items[1].rev, 2);
});

test('messages of different turns, or split by another item, are not joined; thoughts fold apart', () => {
  const m = fold([
    ['prompt', { turn: 1, prompt: [text('a')] }],
    chunk('one'),
    chunk('thinking…', 'agent_thought_chunk'),
    chunk(' more', 'agent_thought_chunk'),
    chunk('two'),
    ['turn', { turn: 1, state: 'ended', stopReason: 'end_turn' }],
    ['prompt', { turn: 2, prompt: [text('b')] }],
    chunk('three'),
  ]);
  assert.deepEqual(
    m.items.map((i) => [i.kind, i.text, i.turn]),
    [
      ['prompt', 'a', 1],
      ['message', 'one', 1],
      ['thought', 'thinking… more', 1],
      ['message', 'two', 1],
      ['prompt', 'b', 2],
      ['message', 'three', 2],
    ],
  );
});

test('tool_call and tool_call_update merge by toolCallId; the fields given win', () => {
  const m = fold([
    ['prompt', { turn: 1, prompt: [text('tool')] }],
    ['update', { sessionUpdate: 'tool_call', toolCallId: 'call_1', title: 'Run the test tool', kind: 'execute', status: 'pending', rawInput: { command: 'true' } }],
    ['update', { sessionUpdate: 'tool_call', toolCallId: 'call_2', title: 'Read', kind: 'read', status: 'in_progress', locations: [{ path: '/a', line: 3 }, { path: '/b' }] }],
    ['update', { sessionUpdate: 'tool_call_update', toolCallId: 'call_1', status: 'in_progress' }],
    chunk('between'),
    ['update', { sessionUpdate: 'tool_call_update', toolCallId: 'call_1', status: 'completed', content: [{ type: 'content', content: text('allowed (allow_once): the test tool ran') }] }],
    ['update', { sessionUpdate: 'tool_call_update', toolCallId: 'call_2', status: 'failed', content: [{ type: 'diff', path: '/a', oldText: null, newText: 'x' }, { type: 'terminal', terminalId: 't1' }] }],
    // An update for a call never announced still shows.
    ['update', { sessionUpdate: 'tool_call_update', toolCallId: 'call_9', title: 'Late', status: 'completed' }],
  ]);
  const tools = m.items.filter((i) => i.kind === 'tool');
  assert.equal(tools.length, 3);
  const [a, b, c] = tools;
  assert.equal(a.toolCallId, 'call_1');
  assert.equal(a.title, 'Run the test tool');
  assert.equal(a.toolKind, 'execute');
  assert.equal(a.status, 'completed');
  assert.deepEqual(a.content, [{ type: 'text', text: 'allowed (allow_once): the test tool ran' }]);
  assert.deepEqual(a.rawInput, { command: 'true' });
  assert.equal(a.rev, 2);
  assert.equal(b.status, 'failed');
  assert.deepEqual(b.locations, ['/a:3', '/b']);
  assert.deepEqual(b.content, [
    { type: 'diff', path: '/a', oldText: null, newText: 'x' },
    { type: 'other', label: '[terminal t1]' },
  ]);
  assert.equal(c.title, 'Late');
  // Tool updates do not split the message around them: the chunk after the first update is its own message.
  assert.deepEqual(m.items.map((i) => i.kind), ['prompt', 'tool', 'tool', 'message', 'tool']);
});

test('the plan is one checklist per turn, replaced by each plan update', () => {
  const entries = (...s) => s.map(([content, status]) => ({ content, status, priority: 'medium' }));
  const m = fold([
    ['prompt', { turn: 1, prompt: [text('plan')] }],
    ['update', { sessionUpdate: 'plan', entries: entries(['Make a plan', 'in_progress'], ['Do it', 'pending']) }],
    chunk('working'),
    ['update', { sessionUpdate: 'plan', entries: entries(['Make a plan', 'completed'], ['Do it', 'completed']) }],
    ['turn', { turn: 1, state: 'ended', stopReason: 'end_turn' }],
    ['prompt', { turn: 2, prompt: [text('plan')] }],
    ['update', { sessionUpdate: 'plan', entries: entries(['Again', 'pending']) }],
  ]);
  const plans = m.items.filter((i) => i.kind === 'plan');
  assert.equal(plans.length, 2);
  assert.deepEqual(plans[0].entries.map((e) => e.status), ['completed', 'completed']);
  assert.equal(plans[0].rev, 1);
  assert.deepEqual(plans[1].entries, [{ content: 'Again', status: 'pending', priority: 'medium' }]);
});

test('unknown update kinds, event names and malformed data are kept raw', () => {
  const m = fold([
    ['update', { sessionUpdate: 'available_commands_update', availableCommands: [{ name: 'web' }] }],
    ['update', { sessionUpdate: 'something_new', x: 1 }],
    ['update', { noKind: true }],
    ['update', 'not an object'],
    ['mystery', { y: 2 }],
    ['turn', 'nonsense'],
    ['permission', { id: 'x' }],
  ]);
  assert.deepEqual(
    m.items.map((i) => [i.kind, i.label]),
    [
      ['raw', 'available_commands_update'],
      ['raw', 'something_new'],
      ['raw', 'update'],
      ['raw', 'update'],
      ['raw', 'event: mystery'],
      ['raw', 'turn'],
      ['raw', 'permission'],
    ],
  );
  assert.equal(JSON.parse(m.items[1].json).x, 1);
  assert.equal(m.items[3].json, '"not an object"');
});

test('notices inline; a stop reason other than end_turn is shown', () => {
  const m = fold([
    ['prompt', { turn: 1, prompt: [text('wait')] }],
    ['notice', { kind: 'waking', text: 'Starting the sandbox…' }],
    ['notice', { kind: 'context_reset', text: 'The harness could not restore the conversation; the context was reset' }],
    ['turn', { turn: 1, state: 'started', stopReason: null }],
    chunk('waiting for session/cancel'),
    ['turn', { turn: 1, state: 'ended', stopReason: 'cancelled' }],
    ['notice', { kind: 'harness_exited', text: 'The harness exited with code 3' }],
    ['notice', { kind: 'gap', text: '10 events were dropped' }],
    ['turn', { turn: 2, state: 'started' }],
    ['turn', { turn: 2, state: 'ended', stopReason: 'error' }],
  ]);
  assert.deepEqual(
    m.items.map((i) => (i.kind === 'notice' ? `notice:${i.noticeKind}` : i.kind === 'stop' ? `stop:${i.stopReason}` : i.kind)),
    ['prompt', 'notice:waking', 'notice:context_reset', 'message', 'stop:cancelled', 'notice:harness_exited', 'notice:gap', 'stop:error'],
  );
  assert.equal(m.running, false);
  assert.equal(m.lastStop, 'error');
  assert.equal(m.endedTurn, 2);
  assert.match(stopText('cancelled'), /cancelled/);
  assert.match(stopText('weird_reason'), /weird_reason/);
});

test('a permission card waits for an answer, and shows how it was resolved', () => {
  const m = fold([
    ['prompt', { turn: 1, prompt: [text('tool')] }],
    ['update', { sessionUpdate: 'tool_call', toolCallId: 'call_1', title: 'Run the test tool', status: 'pending' }],
    ['permission', APPROVAL],
  ]);
  const [p] = pendingPermissions(m);
  assert.equal(p.approval.id, 'ap1');
  assert.deepEqual(p.approval.options.map((o) => o.name), ['Reject always', 'Allow once', 'Reject once', 'Allow always']);
  assert.equal(p.resolved, null);
  fold([['permission_resolved', { id: 'ap1', outcome: 'selected', optionId: 'a2', by: 'admin' }]], m);
  assert.deepEqual(pendingPermissions(m), []);
  assert.equal(p.rev, 1);
  assert.equal(resolutionText(p), 'Answered “Allow once” (by admin).');
  // A resolution for a question never seen (dropped in a gap) changes nothing.
  assert.equal(applyEvent(m, { seq: m.lastSeq + 1, event: 'permission_resolved', data: { id: 'zz', outcome: 'cancelled', by: 'cancel' } }), false);

  const e = fold([['permission', { ...APPROVAL, id: 'ap2' }], ['permission_resolved', { id: 'ap2', outcome: 'expired', optionId: 'c9', by: 'timeout' }]]);
  assert.equal(resolutionText(e.items[0]), 'Nobody answered in time: “Reject once” was chosen.');
  const c = fold([['permission', { ...APPROVAL, id: 'ap3' }], ['permission_resolved', { id: 'ap3', outcome: 'cancelled', optionId: null, by: 'cancel' }]]);
  assert.equal(resolutionText(c.items[0]), 'Cancelled with the turn.');
  // An approval that came resolved already.
  const r = fold([['permission', { ...APPROVAL, id: 'ap4', state: 'resolved', outcome: 'selected', optionId: 'd4', decidedBy: 'admin' }]]);
  assert.equal(r.items[0].resolved.optionId, 'd4');
});

test('events at or before lastSeq are ignored (a resumed stream that repeats them)', () => {
  const m = newChat();
  assert.equal(applyEvent(m, { seq: 1, event: 'prompt', data: { turn: 1, prompt: [text('x')] } }), true);
  assert.equal(applyEvent(m, { seq: 2, event: 'update', data: { sessionUpdate: 'agent_message_chunk', content: text('a') } }), true);
  assert.equal(applyEvent(m, { seq: 2, event: 'update', data: { sessionUpdate: 'agent_message_chunk', content: text('a') } }), false);
  assert.equal(applyEvent(m, { seq: 1, event: 'prompt', data: { turn: 1, prompt: [text('x')] } }), false);
  assert.equal(applyEvent(m, { seq: 5, event: 'update', data: { sessionUpdate: 'agent_message_chunk', content: text('b') } }), true);
  assert.equal(m.lastSeq, 5);
  assert.deepEqual(m.items.map((i) => i.text), ['x', 'ab']);
});

test('the same transcript folds the same whether it comes in one go or replayed after a reload', () => {
  const events = [
    ['prompt', { turn: 1, prompt: [text('tool')] }],
    ['turn', { turn: 1, state: 'started' }],
    ['update', { sessionUpdate: 'tool_call', toolCallId: 'call_1', title: 'T', status: 'pending' }],
    ['permission', APPROVAL],
    ['permission_resolved', { id: 'ap1', outcome: 'selected', optionId: 'a2', by: 'admin' }],
    ['update', { sessionUpdate: 'tool_call_update', toolCallId: 'call_1', status: 'completed' }],
    chunk('done'),
    ['turn', { turn: 1, state: 'ended', stopReason: 'end_turn' }],
  ];
  const whole = fold(events);
  const split = fold(events.slice(0, 4));
  fold(events.slice(4), split);
  assert.deepEqual(plain(split), plain(whole));
});

test('user_message_chunk (a harness replaying the conversation) reads as the user’s; content blocks that are not text are labelled', () => {
  const m = fold([
    ['update', { sessionUpdate: 'user_message_chunk', content: text('old ') }],
    ['update', { sessionUpdate: 'user_message_chunk', content: text('question') }],
    ['update', { sessionUpdate: 'agent_message_chunk', content: { type: 'image', mimeType: 'image/png', data: 'AAAA' } }],
    ['prompt', { turn: 1, prompt: [text('see'), { type: 'resource_link', uri: 'file:///home/agent/a.txt', name: 'a.txt' }] }],
  ]);
  assert.deepEqual(plain(m), [
    { kind: 'prompt', seq: 1, turn: null, text: 'old question', attachments: [], replayed: true },
    { kind: 'message', seq: 3, turn: null, text: '', attachments: ['[image image/png]'] },
    { kind: 'prompt', seq: 4, turn: 1, text: 'see', attachments: ['[link a.txt file:///home/agent/a.txt]'], replayed: false },
  ]);
  assert.equal(blockLabel({ type: 'resource', resource: { uri: 'file:///x', text: 'y' } }), '[resource file:///x]');
  assert.equal(blockLabel({ type: 'audio', mimeType: 'audio/wav' }), '[audio audio/wav]');
});

// The Chat tab (issue #30) against a real server whose harness is the repo's model-free ACP test
// agent (acp-test-agent/README.md): a session made from the tab, a prompt echoed back as an agent
// message, Markdown that cannot become HTML, a permission answered from its card and one from the
// header's approvals badge, a plan and a thought, a reload in the middle of a turn that still
// shows the conversation and keeps streaming, Cancel, a network drop the stream resumes from,
// a harness that crashes, rename and delete.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { REPO, browserSuite, screenshot, until } from './harness.mjs';

/** The test agent's static build (scripts/build-acp-test-agent.sh), built here when missing. */
const HARNESS =
  process.env.ACP_TEST_AGENT_BIN || path.join(process.env.CARGO_TARGET_DIR || path.join(REPO, 'target'), 'acp-test-agent', 'acp-test-agent');
if (!existsSync(HARNESS)) {
  const built = spawnSync('bash', [path.join(REPO, 'scripts', 'build-acp-test-agent.sh')], { cwd: REPO, stdio: 'inherit' });
  if (built.status !== 0 || !existsSync(HARNESS)) throw new Error(`no test harness at ${HARNESS}: scripts/build-acp-test-agent.sh failed`);
}

const ctx = browserSuite({
  agent: 'chatty',
  // The browser goes through a proxy that can cut its connections (a network drop).
  proxied: true,
  options: {
    // With the fake driver the harness runs on the host: an absolute host path works.
    sandboxConfig: ['  default_harness: test'],
    topConfig: ['harnesses:', '  test:', `    command: [${JSON.stringify(HARNESS)}]`, '    description: The model-free ACP test agent'],
  },
  open: async (page, agent) => {
    await page.goto(`/agents/${agent.id}#chat`);
    await page.locator('[data-testid="chat"][data-state="ready"]').waitFor();
  },
});

const conversation = (page) => page.locator('.chat-conversation');
const log = (page) => page.getByTestId('chat-log');
const input = (page) => page.getByRole('textbox', { name: 'Prompt' });
/** The conversation is idle: no turn runs, the prompt box takes text. */
const idle = (page) => page.locator('.chat-conversation[data-running="false"][data-stream="live"]').waitFor({ timeout: 30_000 });

/** Type a prompt and send it with Enter. */
async function send(page, text) {
  await idle(page);
  await input(page).fill(text);
  await input(page).press('Enter');
  await log(page).locator('.chat-prompt').filter({ hasText: text }).last().waitFor();
}

let sid;

test('a new session: a prompt sent with Enter is echoed as the agent message; the first prompt names the session', async () => {
  const { page } = ctx.b;
  await page.getByText('No sessions yet.').waitFor();
  await page.getByRole('button', { name: 'New session' }).click();
  const row = page.locator('.chat-session');
  await row.waitFor();
  sid = await row.getAttribute('data-session-id');
  assert.ok(sid);
  assert.equal(new URL(page.url()).hash, `#chat/${sid}`, 'the session is in the address');
  await page.locator('.chat-conversation[data-stream="live"]').waitFor();

  // Shift+Enter is a new line, Enter sends.
  await input(page).fill('hello');
  await input(page).press('Shift+Enter');
  await input(page).pressSequentially('there');
  assert.equal(await input(page).inputValue(), 'hello\nthere');
  await input(page).press('Enter');
  const message = log(page).locator('.chat-message').last();
  await message.filter({ hasText: 'hello' }).waitFor({ timeout: 60_000 });
  await idle(page);
  assert.equal(await log(page).locator('.chat-prompt').first().textContent(), 'hello\nthere');
  assert.match(await message.textContent(), /hello\s*there/);
  assert.equal(await input(page).inputValue(), '', 'the box is emptied');
  // Sessions named "New session" take their first prompt's first line.
  await page.getByTestId('chat-title').filter({ hasText: /^hello$/ }).waitFor();
  const [s] = await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/sessions`);
  assert.equal(s.id, sid);
  assert.equal(s.harness, 'test');
  assert.equal(s.turns, 1);
});

test('agent messages are Markdown without HTML: <script> and <img onerror> show as text', async () => {
  const { page } = ctx.b;
  await send(page, 'echo **bold** and `code` <script>window.__chatXss = 1</script> <img src=x onerror="window.__chatXss = 2">');
  const message = log(page).locator('.chat-message').last();
  await message.locator('strong').filter({ hasText: 'bold' }).waitFor();
  await idle(page);
  assert.equal(await message.locator('code').textContent(), 'code');
  assert.equal(await log(page).locator('script, img, iframe').count(), 0, 'no element from the message');
  assert.match(await message.textContent(), /<script>window\.__chatXss = 1<\/script> <img src=x onerror="window\.__chatXss = 2">/);
  assert.equal(await page.evaluate(() => window.__chatXss), undefined);
});

test('tool: the permission card offers each option by name; Allow once completes the tool call', async () => {
  const { page } = ctx.b;
  await send(page, 'tool');
  const card = log(page).locator('.chat-permission').last();
  await card.and(page.locator('[data-state="pending"]')).waitFor();
  assert.deepEqual(await card.getByRole('button').allTextContents(), ['Reject always', 'Allow once', 'Reject once', 'Allow always']);
  // The header's badge counts it, kept live by the event stream.
  await page.getByTestId('approvals-count').filter({ hasText: /^1$/ }).waitFor();
  const tool = log(page).locator('.chat-tool').last();
  assert.equal(await tool.locator('.chat-tool-title').textContent(), 'Run the test tool');
  assert.equal(await page.getByTestId('chat-running').isVisible(), true, 'the turn runs while it asks');
  await screenshot(page, 'chat-permission.png');

  await card.getByRole('button', { name: 'Allow once' }).click();
  await card.and(page.locator('[data-state="resolved"]')).waitFor();
  assert.match(await card.getByTestId('permission-outcome').textContent(), /Allow once/);
  await tool.and(page.locator('[data-status="completed"]')).waitFor();
  assert.match(await tool.textContent(), /allowed \(allow_once\): the test tool ran/);
  await idle(page);
  await page.getByTestId('approvals-badge').waitFor({ state: 'hidden' });
  const [resolved] = await ctx.server.apiJson('GET', `/approvals?state=resolved&agent=${ctx.agent.id}`);
  assert.equal(resolved.optionId, 'a2');
  assert.equal(resolved.decidedBy, 'admin');
});

test('the approvals badge lists the pending ones across agents, leads to the session and answers them', async () => {
  const { page } = ctx.b;
  await send(page, 'tool');
  const card = log(page).locator('.chat-permission').last();
  await card.and(page.locator('[data-state="pending"]')).waitFor();
  const badge = page.getByTestId('approvals-badge');
  const panel = page.getByTestId('approvals-panel');
  const item = panel.locator('.approval-item');

  // From the agents list, the badge's link opens the Chat tab on the session that asks.
  await page.getByRole('link', { name: '← Agents' }).click();
  await page.getByRole('heading', { name: 'Agents' }).waitFor();
  await badge.click();
  await panel.waitFor();
  assert.equal(await item.count(), 1);
  assert.match(await item.textContent(), /chatty.*Run the test tool/s);
  assert.deepEqual(await item.getByRole('button').allTextContents(), ['Reject always', 'Allow once', 'Reject once', 'Allow always']);
  await screenshot(page, 'chat-approvals.png');
  await item.getByRole('link', { name: 'Open the session' }).click();
  await panel.waitFor({ state: 'hidden' });
  await page.locator(`.chat-conversation[data-session-id="${sid}"][data-stream="live"]`).waitFor();
  assert.equal(new URL(page.url()).pathname, `/agents/${ctx.agent.id}`);
  assert.equal(new URL(page.url()).hash, `#chat/${sid}`);
  await card.and(page.locator('[data-state="pending"]')).waitFor();

  // Answered from the badge's list: the card in the conversation resolves too.
  await badge.click();
  await item.getByRole('button', { name: 'Reject once' }).click();
  await card.and(page.locator('[data-state="resolved"]')).waitFor();
  assert.match(await card.getByTestId('permission-outcome').textContent(), /Reject once/);
  await log(page).locator('.chat-tool').last().and(page.locator('[data-status="failed"]')).waitFor();
  assert.match(await log(page).locator('.chat-tool').last().textContent(), /rejected \(reject_once\): the test tool did not run/);
  await badge.waitFor({ state: 'hidden' });
  await idle(page);
});

test('the plan is a checklist; a thought is folded', async () => {
  const { page } = ctx.b;
  await send(page, 'plan');
  const plan = log(page).locator('.chat-plan').last();
  await plan.waitFor();
  assert.equal(await plan.locator('.chat-plan-entry').count(), 3);
  assert.equal(await plan.locator('input[type="checkbox"]').count(), 3);
  await idle(page);
  await send(page, 'think deep thoughts');
  const thought = log(page).locator('details.chat-thought').last();
  await thought.waitFor();
  assert.equal(await thought.getAttribute('open'), null, 'folded');
  assert.equal(await thought.locator('.chat-thought-text').isVisible(), false);
  await thought.locator('summary').click();
  await thought.locator('.chat-thought-text').filter({ hasText: 'deep thoughts' }).waitFor();
  await idle(page);
});

test('a reload in the middle of a turn shows the same conversation and keeps streaming; Cancel ends the turn', async () => {
  const { page } = ctx.b;
  await send(page, 'wait');
  await log(page).locator('.chat-message').filter({ hasText: 'waiting for session/cancel' }).waitFor();
  await page.getByTestId('chat-running').waitFor();
  assert.equal(await input(page).isDisabled(), true, 'no prompt while a turn runs');
  const before = await log(page).locator('.chat-item').count();

  await page.reload();
  await page.locator(`.chat-conversation[data-session-id="${sid}"][data-stream="live"]`).waitFor();
  await until('the whole conversation replayed', async () => (await log(page).locator('.chat-item').count()) === before, { timeout: 20_000 });
  assert.equal(await log(page).locator('.chat-prompt').first().textContent(), 'hello\nthere');
  await log(page).locator('.chat-message').filter({ hasText: 'waiting for session/cancel' }).waitFor();
  assert.equal(await log(page).locator('.chat-permission[data-state="resolved"]').count(), 2);
  const cancel = page.getByRole('button', { name: 'Cancel' });
  await cancel.waitFor();
  assert.equal(await input(page).isDisabled(), true);
  await screenshot(page, 'chat.png');

  await cancel.click();
  // The end of the turn arrives on the stream opened after the reload.
  await log(page).locator('.chat-stop[data-stop-reason="cancelled"]').waitFor();
  await idle(page);
  await cancel.waitFor({ state: 'hidden' });
  assert.equal(await input(page).isDisabled(), false);
  const s = await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/sessions/${sid}`);
  assert.equal(s.state, 'idle');
});

test('a network drop: the stream resumes with Last-Event-ID and shows what it missed, once', async () => {
  const { page } = ctx.b;
  await send(page, 'wait');
  await log(page).locator('.chat-message').last().filter({ hasText: 'waiting for session/cancel' }).waitFor();
  await page.getByTestId('chat-running').waitFor();
  const waiting = () => log(page).locator('.chat-message').filter({ hasText: 'waiting for session/cancel' }).count();
  const prompts = () => log(page).locator('.chat-prompt').count();
  const [waitingBefore, promptsBefore] = [await waiting(), await prompts()];
  const stops = await log(page).locator('.chat-stop').count();

  assert.ok(ctx.proxy.setDown(true) > 0, 'the proxy had connections to cut');
  try {
    // The turn ends while the page cannot hear it.
    await ctx.server.apiJson('POST', `/agents/${ctx.agent.id}/sessions/${sid}/cancel`);
    await until('the turn to end', async () => (await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/sessions/${sid}`)).state === 'idle', { timeout: 20_000 });
    await page.locator('.chat-conversation[data-stream="reconnecting"]').waitFor();
  } finally {
    ctx.proxy.setDown(false);
  }
  await log(page).locator('.chat-stop[data-stop-reason="cancelled"]').nth(stops).waitFor({ timeout: 30_000 });
  await idle(page);
  assert.equal(await log(page).locator('.chat-stop').count(), stops + 1);
  // What came before the drop is not shown again (the stream resumed after it, not from the start).
  assert.equal(await waiting(), waitingBefore, 'nothing shown twice');
  assert.equal(await prompts(), promptsBefore, 'nothing shown twice');
  await send(page, 'back again');
  await log(page).locator('.chat-message').last().filter({ hasText: 'back again' }).waitFor();
  await idle(page);
});

test('a harness that crashes mid-turn: a notice inline, the turn ends with an error; the next prompt starts it again', async () => {
  const { page } = ctx.b;
  await send(page, 'crash 7');
  await log(page).locator('.chat-stop[data-stop-reason="error"]').last().waitFor({ timeout: 30_000 });
  await log(page).locator('.chat-notice[data-kind="harness_exited"]').last().waitFor();
  assert.match(await log(page).locator('.chat-stop').last().textContent(), /error/);
  await idle(page);
  await send(page, 'after the crash');
  await log(page).locator('.chat-message').last().filter({ hasText: 'after the crash' }).waitFor({ timeout: 30_000 });
  await idle(page);
  // The test agent offers session/load by default: the conversation was reopened.
  await page.locator('.chat-meta').filter({ hasText: 'restored by session/load' }).waitFor();
  await screenshot(page, 'chat-notices.png');
});

test('rename and delete a session', async () => {
  const { page } = ctx.b;
  await page.getByRole('button', { name: 'Rename the session' }).click();
  const field = page.getByTestId('chat-title-input');
  await field.fill('Renamed <b>chat</b>');
  await field.press('Enter');
  await page.locator(`.chat-session[data-session-id="${sid}"] .chat-session-title`).filter({ hasText: 'Renamed <b>chat</b>' }).waitFor();
  assert.equal((await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/sessions/${sid}`)).title, 'Renamed <b>chat</b>');

  await page.getByRole('button', { name: 'Delete the session' }).click();
  await page.locator('dialog [data-confirm]').click();
  await page.locator('.chat-session').waitFor({ state: 'detached' });
  await page.getByText('No sessions yet.').waitFor();
  assert.equal((await ctx.server.api('GET', `/agents/${ctx.agent.id}/sessions/${sid}`)).status, 404);
});

// Background processes on the agent's page: started from the form, listed and kept current by
// `process` events, their output followed live (stderr told apart, the end noted), stopped with
// TERM from the list, and removed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, screenshot, until } from './harness.mjs';

const ctx = browserSuite({
  agent: 'procs',
  open: async (page, agent) => {
    await page.goto(`/agents/${agent.id}`);
    await page.getByRole('tab', { name: 'Processes' }).click();
    await page.locator('[data-testid="processes"][data-state="ready"]').waitFor();
  },
});

const row = (page, tag) => page.locator(`tr.proc-row[data-tag="${tag}"]`);

/** Start `line` from the form under `tag`. */
async function startFromForm(page, line, tag) {
  await page.getByTestId('process-command').fill(line);
  await page.getByTestId('process-tag').fill(tag);
  await page.getByRole('button', { name: 'Start', exact: true }).click();
  await row(page, tag).waitFor();
}

test('start from the form: listed, exits 0, its output followed with stderr told apart', async () => {
  const { page } = ctx.b;
  await page.getByTestId('processes-message').getByText('No processes yet').waitFor();
  assert.equal(page.url().endsWith('#processes'), true, 'the tab is in the address');

  await startFromForm(page, 'echo hello; echo oops >&2; sleep 0.3; echo done', 'greet');
  const r = row(page, 'greet');
  assert.match(await r.locator('.col-cmd').textContent(), /^sh -c 'echo hello; echo oops >&2; sleep 0\.3; echo done'$/);
  // The form's process is selected and followed at once; the `process` event ends it in the list.
  await r.and(page.locator('[data-state="exited"]')).waitFor({ timeout: 20_000 });
  assert.equal((await r.locator('.col-exit').textContent()).trim(), '0');
  assert.equal((await r.locator('.proc-state').textContent()).trim(), 'exited');
  assert.match(await r.locator('.col-dur').textContent(), /^\d+(\.\d)? (ms|s)$/);

  const log = page.getByTestId('process-log');
  await page.locator('[data-testid="process-log-panel"][data-state="ended"]').waitFor({ timeout: 20_000 });
  const text = await log.textContent();
  // stdout and stderr are two pipes: which of "hello" and "oops" the sandbox read first may vary.
  assert.match(text, /^(hello\noops|oops\nhello)\ndone\n\[exited with code 0 after [^\]]+\]\n$/, text);
  assert.equal((await log.locator('.plog-err').allTextContents()).join(''), 'oops\n', 'stderr is marked');
  assert.equal((await log.locator('.plog-out').allTextContents()).join(''), 'hello\ndone\n');
  assert.equal(await log.locator('.plog-note').count(), 1, 'one note: the end');
  assert.equal(await r.getAttribute('aria-selected'), 'true');

  const [p] = await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/processes`);
  assert.equal(p.tag, 'greet');
  assert.deepEqual(p.command, ['sh', '-c', 'echo hello; echo oops >&2; sleep 0.3; echo done']);
  assert.equal(p.state, 'exited');
  assert.equal(p.exitCode, 0);
});

test('a process started elsewhere appears by its event; a bad tag is refused at the form', async () => {
  const { page } = ctx.b;
  await ctx.server.apiJson('POST', `/agents/${ctx.agent.id}/processes`, { command: ['sh', '-c', 'sleep 0.2; exit 3'], tag: 'api' });
  await row(page, 'api').and(page.locator('[data-state="exited"]')).waitFor({ timeout: 20_000 });
  assert.equal((await row(page, 'api').locator('.col-exit').textContent()).trim(), '3');
  // Newest first.
  assert.deepEqual(await page.locator('tr.proc-row').evaluateAll((rows) => rows.map((r) => r.dataset.tag)), ['api', 'greet']);

  await page.getByTestId('process-command').fill('true');
  await page.getByTestId('process-tag').fill('no spaces please');
  await page.getByRole('button', { name: 'Start', exact: true }).click();
  await page.getByTestId('process-error').filter({ hasText: /\S/ }).waitFor();
  assert.equal(await page.getByTestId('process-tag').getAttribute('aria-invalid'), 'true');
  assert.equal(await page.locator('tr.proc-row').count(), 2, 'nothing started');
  await page.getByTestId('process-tag').fill('');
  await page.getByTestId('process-command').fill('');
});

test('Stop sends TERM: the row and the log say killed by TERM; Remove forgets it', async () => {
  const { page } = ctx.b;
  await startFromForm(page, 'sleep 1000', 'nap');
  const r = row(page, 'nap');
  await r.and(page.locator('[data-state="running"]')).waitFor();
  assert.equal(await page.getByTestId('process-error').textContent(), '', 'the earlier error is cleared');
  await page.locator('[data-testid="process-log-panel"][data-state="following"]').waitFor();
  // The running one's duration ticks without any fetch.
  const first = await r.locator('.col-dur').textContent();
  await until('the duration to tick', async () => (await r.locator('.col-dur').textContent()) !== first, { timeout: 20_000 });
  await screenshot(page, 'processes.png');

  await r.getByRole('button', { name: 'Stop nap' }).click();
  await r.and(page.locator('[data-state="killed"]')).waitFor({ timeout: 20_000 });
  assert.equal((await r.locator('.col-exit').textContent()).trim(), 'signal TERM');
  assert.equal(await r.locator('[data-act="stop"]').isDisabled(), true, 'no Stop for an ended process');
  await page.locator('[data-testid="process-log-panel"][data-state="ended"]').waitFor({ timeout: 20_000 });
  assert.match(await page.getByTestId('process-log').textContent(), /\[killed by signal TERM after [^\]]+\]/);
  const p = await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/processes/nap`);
  assert.equal(p.state, 'killed');
  assert.equal(p.signal, 'TERM');

  await r.getByRole('button', { name: 'Remove nap' }).click();
  await page.locator('dialog [data-confirm]').click();
  await r.waitFor({ state: 'detached' });
  assert.equal(await page.getByTestId('process-log-panel').isHidden(), true, 'its log closed with it');
  const gone = await ctx.server.api('GET', `/agents/${ctx.agent.id}/processes/${p.id}`);
  assert.equal(gone.status, 404);
});

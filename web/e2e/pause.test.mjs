// A paused agent (light sleep, issue #35) in the UI: the list and the agent page say Paused and
// when it sleeps fully, and its Start button reads Wake; Wake thaws it (the same start call)
// without a reload. The fake driver only pretends to freeze the sandbox, but the states are the
// server's own.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, screenshot, until } from './harness.mjs';

const ctx = browserSuite();

test('a paused agent reads Paused and “sleeps fully in 30 min”; Wake thaws it', async () => {
  const { page } = ctx.b;
  await page.evaluate(() => (window.__noReload = true));
  const a = await ctx.server.runningAgent('dozer', { deepSleepMinutes: 30 });
  const paused = await ctx.server.apiJson('POST', `/agents/${a.id}/pause`);
  assert.equal(paused.state, 'paused');
  // While paused, `sleepsAt` is when the sleeper stops it: deepSleepMinutes from the pause.
  const left = Date.parse(paused.sleepsAt) - Date.now();
  assert.ok(left > 29 * 60_000 && left <= 30 * 60_000, `sleepsAt ${paused.sleepsAt} is 30 min away`);

  // The list (where sign-in left the page) follows over the event stream.
  const row = page.locator('[data-testid="agent-row"][data-agent-name="dozer"]');
  await row.locator('[data-testid="state"][data-state="paused"]').waitFor();
  await row.getByRole('button', { name: 'Wake dozer' }).waitFor();
  assert.equal(await row.getByRole('button', { name: 'Start dozer' }).count(), 0);
  assert.equal(await page.evaluate(() => window.__noReload), true, 'no page reload happened');
  await screenshot(page, 'agents-paused.png');

  // The agent page, on its Files tab: the Terminal tab attaches at once, and an attach is a use,
  // which would thaw the agent before the page could show it paused.
  await page.goto(`/agents/${a.id}#files`);
  const head = page.locator('.agent-head');
  const badge = head.getByTestId('state');
  await head.locator('[data-testid="state"][data-state="paused"]').waitFor();
  assert.equal((await badge.textContent()).trim(), 'Paused');
  const status = head.getByTestId('status-line');
  assert.match(
    await status.textContent(),
    /^Paused \(processes and memory kept\)\. Sleeps fully in (29|30) min\. Wake or any use resumes it at once\.$/,
  );
  const wake = head.getByRole('button', { name: 'Wake dozer' });
  assert.equal((await wake.textContent()).trim(), 'Wake');
  assert.equal(await wake.isEnabled(), true);
  assert.equal(await head.getByRole('button', { name: 'Start dozer' }).count(), 0);
  await page.getByTestId('files').getByText('The agent is paused. Wake it (or open the terminal) to browse its files.').waitFor();
  // Nothing the page asked for thawed it.
  assert.equal((await ctx.server.apiJson('GET', `/agents/${a.id}`)).state, 'paused');
  await screenshot(page, 'agent-paused.png');

  await page.evaluate(() => (window.__noReload = true));
  await wake.click();
  await head.locator('[data-testid="state"][data-state="running"]').waitFor();
  assert.equal((await badge.textContent()).trim(), 'Running');
  await until('the API says running', async () => (await ctx.server.apiJson('GET', `/agents/${a.id}`)).state === 'running');
  // Running, the button is Start again, and disabled: there is nothing to start.
  const start = head.getByRole('button', { name: 'Start dozer' });
  await start.waitFor();
  assert.equal((await start.textContent()).trim(), 'Start');
  assert.equal(await start.isDisabled(), true);
  await status.filter({ hasText: /^Sleeps in .+ if idle$/ }).waitFor();
  assert.equal(await page.evaluate(() => window.__noReload), true, 'no page reload happened');
});

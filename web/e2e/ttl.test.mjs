// An agent's lifetime on the page: the agent page and the list count down to the TTL's deadline
// ("destroyed in 4 min 59 s", by the second), "Keep alive" restarts it, the server's `expiring`
// event is told, and the page says when the TTL destroyed the agent. A short `idle_minute` (the
// TTL's minute) of 3 s makes `ttlMinutes: 4` twelve seconds; agents do not fall asleep meanwhile.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, screenshot, until } from './harness.mjs';

const ctx = browserSuite({ options: { sandboxConfig: ['  idle_minute: 3s', '  default_idle_minutes: 3600'] } });

const ttlText = (page) => page.getByTestId('ttl-text').textContent();

test('the agent page and the list count down to the deadline, and Keep alive moves it', async () => {
  const { page } = ctx.b;
  const a = await ctx.server.runningAgent('lives', { ttlMinutes: 100 }); // 300 s
  assert.ok(a.expiresAt, 'the agent has a deadline');
  await page.goto(`/agents/${a.id}`);
  await page.getByTestId('ttl').waitFor();
  const first = await until('a countdown', async () => {
    const t = await ttlText(page);
    return /^Destroyed in [45] min \d\d s$/.test(t ?? '') && t;
  });
  await until('the countdown ticks', async () => (await ttlText(page)) !== first, { timeout: 5_000 });
  assert.equal(await page.getByTestId('ttl').getAttribute('data-expiring'), 'false');
  await screenshot(page, 'ttl-countdown.png');

  const before = Date.parse((await ctx.server.apiJson('GET', `/agents/${a.id}`)).expiresAt);
  // The deadline is to the second: a keep-alive a second later moves it.
  await until('a second passed since the deadline was set', async () => Date.now() >= before - 300_000 + 1_500);
  await page.getByTestId('keep-alive').click();
  await until('expiresAt moved', async () => Date.parse((await ctx.server.apiJson('GET', `/agents/${a.id}`)).expiresAt) > before);
  await page.locator('.toasts').getByText(/kept alive/).waitFor();

  // The list shows it too, without the agents of no TTL.
  const none = await ctx.server.runningAgent('forever');
  await page.goto('/');
  const row = (name) => page.locator(`[data-testid="agent-row"][data-agent-name="${name}"]`);
  await until('the list counts down', async () => /^destroyed in [45] min \d\d s$/.test((await row('lives').getByTestId('agent-ttl').textContent()) ?? ''));
  assert.equal(await row('forever').getByTestId('agent-ttl').isVisible(), false);
  await ctx.server.apiJson('DELETE', `/agents/${a.id}`);
  await ctx.server.apiJson('DELETE', `/agents/${none.id}`);
});

test('the expiring event is told, Keep alive answers it, and the page says when the TTL destroyed the agent', async () => {
  const { page } = ctx.b;
  const a = await ctx.server.runningAgent('short', { ttlMinutes: 4 }); // 12 s; `expiring` 3 s before
  await page.goto(`/agents/${a.id}`);
  await page.getByTestId('ttl').waitFor();
  const told = page.locator('.toasts').getByText('short is destroyed in under a minute unless kept alive');
  await told.first().waitFor({ timeout: 15_000 });
  assert.equal(await page.getByTestId('ttl').getAttribute('data-expiring'), 'true');
  assert.equal(await page.getByTestId('ttl').getAttribute('role'), 'alert');
  await screenshot(page, 'ttl-expiring.png');
  const before = Date.parse((await ctx.server.apiJson('GET', `/agents/${a.id}`)).expiresAt);
  await page.getByTestId('keep-alive').click();
  await until('expiresAt moved', async () => Date.parse((await ctx.server.apiJson('GET', `/agents/${a.id}`)).expiresAt) > before);
  // Then the new deadline passes, and the TTL destroys it under the open page.
  await page.getByText('This agent was destroyed.').waitFor({ timeout: 30_000 });
  assert.equal(await page.getByTestId('ttl').isVisible(), false);
});

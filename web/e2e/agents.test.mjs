// The agents page: create (with the server's validation at the field), live state over SSE,
// stop and start without a reload, destroy with a confirmation naming the agent.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, screenshot, until } from './harness.mjs';

const ctx = browserSuite();

const row = (page, name) => page.locator(`[data-testid="agent-row"][data-agent-name="${name}"]`);

test('the preset choice shows only when the server has presets; env rows always', async () => {
  const { page } = ctx.b;
  const presets = await ctx.server.apiJson('GET', '/presets');
  await page.locator('#new-name').waitFor();
  // The answer has come once the limits' placeholders are in; the presets are asked at once too.
  await until('form filled from /limits', async () => /\(default\)$/.test((await page.locator('#new-cpus').getAttribute('placeholder')) ?? ''));
  await until('preset choice matches the server', async () => (await page.getByTestId('preset-select').isVisible()) === !!presets?.length);
  await until('env rows shown', async () => await page.getByTestId('new-env-editor').isVisible());
});

test('the runtime choice shows only when /limits lists more than one, and creates on the chosen one', async () => {
  const { page } = ctx.b;
  const limits = await ctx.server.apiJson('GET', '/limits');
  const runtimes = Array.isArray(limits.runtimes) ? limits.runtimes : [];
  await until('form filled from /limits', async () => /\(default\)$/.test((await page.locator('#new-cpus').getAttribute('placeholder')) ?? ''));
  assert.equal(await page.getByTestId('runtime-select').isVisible(), runtimes.length > 1);
  if (runtimes.length < 2) return;
  const pick = runtimes[runtimes.length - 1];
  await page.locator('#new-name').fill('on-runtime');
  await page.getByTestId('runtime-select').selectOption(pick);
  await page.getByRole('button', { name: 'Create agent' }).click();
  await row(page, 'on-runtime').waitFor();
  const a = (await ctx.server.apiJson('GET', '/agents')).find((x) => x.name === 'on-runtime');
  assert.equal(a.runtime, pick);
  assert.equal(await page.getByTestId('runtime-select').inputValue(), '', 'back to the default for the next one');
  // Changed on the agent page's settings: it then needs a rebuild.
  await page.goto(`/agents/${a.id}`);
  await page.getByTestId('settings').click();
  const edit = page.getByTestId('edit-runtime');
  await until('runtime in settings', async () => (await edit.inputValue()) === pick);
  await edit.selectOption(runtimes[0]);
  await page.getByRole('button', { name: 'Save settings' }).click();
  await page.getByTestId('settings-form').waitFor({ state: 'hidden' });
  const changed = await ctx.server.apiJson('GET', `/agents/${a.id}`);
  assert.equal(changed.runtime, runtimes[0]);
  assert.equal(changed.needsRebuild, true);
  await page.goto('/');
  assert.equal((await ctx.server.api('DELETE', `/agents/${a.id}`)).status < 300, true);
});

test('the agent page shows env and setup only when the server has them', async () => {
  const { page } = ctx.b;
  const agent = await ctx.server.runningAgent('plain-page');
  await page.goto(`/agents/${agent.id}`);
  await page.locator('.agent-page [data-testid="state"][data-state="running"]').waitFor();
  assert.equal(await page.getByTestId('env').isVisible(), agent.env !== undefined);
  assert.equal(await page.getByTestId('setup').isVisible(), !!agent.setup);
  assert.equal(await page.getByTestId('agent-preset').count(), agent.preset ? 1 : 0);
  await page.goto('/');
  assert.equal((await ctx.server.api('DELETE', `/agents/${agent.id}`)).status < 300, true);
  await row(page, 'plain-page').waitFor({ state: 'detached', timeout: 60_000 });
});

test('the server’s validation message appears at the field', async () => {
  const { page } = ctx.b;
  // Ask the server what it says about too many CPUs, then expect the same words at the field.
  const res = await ctx.server.api('POST', '/agents', { name: 'too-big', cpus: 100000 });
  assert.equal(res.status, 400);
  const err = (await res.json()).error;
  await page.locator('#new-name').fill('too-big');
  await page.locator('#new-cpus').fill('100000');
  await page.getByRole('button', { name: 'Create agent' }).click();
  const where = err.field ? page.locator(`[data-field-error="${err.field}"]`) : page.getByTestId('create-error');
  await where.filter({ hasText: err.message }).waitFor();
  if (err.field) assert.equal(await page.locator(`#new-${err.field}`).getAttribute('aria-invalid'), 'true');
  assert.equal(await row(page, 'too-big').count(), 0);
  await page.locator('#new-cpus').fill('');
});

test('create an agent and watch it reach running, live', async () => {
  const { page } = ctx.b;
  await page.evaluate(() => (window.__noReload = true));
  await page.locator('#new-name').fill('builder');
  await page.locator('#new-cpus').fill('1');
  await page.locator('#new-memoryMb').fill('512');
  await page.locator('#new-idleMinutes').fill('30');
  await page.getByRole('button', { name: 'Create agent' }).click();
  const r = row(page, 'builder');
  await r.waitFor();
  await r.locator('[data-testid="state"][data-state="running"]').waitFor({ timeout: 60_000 });
  await r.getByText(/Sleeps in/).waitFor();
  assert.match(await r.textContent(), /1 CPU/);
  assert.match(await r.textContent(), /512 MiB/);
  assert.equal(await page.evaluate(() => window.__noReload), true, 'no page reload happened');
  // A duplicate name is refused; the message shows at the name field (or the form).
  await page.locator('#new-name').fill('builder');
  await page.getByRole('button', { name: 'Create agent' }).click();
  await until('duplicate name error', async () => {
    const t = (await page.locator('[data-field-error="name"]').textContent()) + (await page.getByTestId('create-error').textContent());
    return t.trim().length > 0;
  });
  await page.locator('#new-name').fill('');
  assert.equal(await page.locator('[data-field-error="name"]').textContent(), '', 'typing clears the message');
});

test('while the image is pulled the row says how far, then the agent runs', async () => {
  const { page } = ctx.b;
  // The fake driver pretends to pull images under pull.invalid/ (about a second, in steps).
  const a = await ctx.server.apiJson('POST', '/agents', { name: 'pulled', image: 'pull.invalid/web-e2e:1' });
  assert.equal(a.state, 'creating');
  const r = row(page, 'pulled');
  const status = r.getByTestId('status-line');
  await status.filter({ hasText: /Pulling image… [1-9]\d?%/ }).waitFor({ timeout: 30_000 });
  assert.match(await status.locator('.status-text').getAttribute('title'), /of 3 layers, pull\.invalid\/web-e2e:1\)$/);
  await r.locator('[data-testid="state"][data-state="running"]').waitFor({ timeout: 30_000 });
  assert.doesNotMatch(await status.textContent(), /Pulling/);
});

test('an agent changed through the API updates on the page without a reload', async () => {
  const { page } = ctx.b;
  const a = await ctx.server.runningAgent('from-api');
  const r = row(page, 'from-api');
  await r.locator('[data-state="running"]').first().waitFor();
  await ctx.server.apiJson('POST', `/agents/${a.id}/stop`);
  await r.locator('[data-testid="state"][data-state="sleeping"]').waitFor({ timeout: 30_000 });
  assert.equal(await page.evaluate(() => window.__noReload), true, 'no page reload happened');
  await screenshot(page, 'agents.png');
});

test('stop and start from the page: the badge follows without a reload', async () => {
  const { page } = ctx.b;
  const r = row(page, 'builder');
  await r.getByRole('button', { name: 'Stop builder' }).click();
  await r.locator('[data-testid="state"][data-state="sleeping"]').waitFor({ timeout: 30_000 });
  assert.match(await r.getByTestId('state').textContent(), /Sleeping/);
  await r.getByRole('button', { name: 'Start builder' }).click();
  await r.locator('[data-testid="state"][data-state="running"]').waitFor({ timeout: 60_000 });
  assert.equal(await page.evaluate(() => window.__noReload), true, 'no page reload happened');
});

test('change settings on the agent page: errors at the field, then “rebuild to apply”; Rebuild clears it', async () => {
  const { page } = ctx.b;
  const a = (await ctx.server.apiJson('GET', '/agents')).find((x) => x.name === 'builder');
  await row(page, 'builder').getByRole('link', { name: 'Open builder' }).click();
  await page.locator('.agent-page').waitFor();
  await page.getByTestId('settings').click();
  const probe = await ctx.server.api('PATCH', `/agents/${a.id}`, { memoryMb: 99999999 });
  assert.equal(probe.status, 400);
  const err = (await probe.json()).error;
  await page.locator('#edit-memoryMb').fill('99999999');
  await page.getByRole('button', { name: 'Save settings' }).click();
  const where = err.field ? page.locator(`[data-field-error="${err.field}"]`) : page.locator('.settings .form-error');
  await where.filter({ hasText: err.message }).waitFor();
  await page.locator('#edit-memoryMb').fill('768');
  await page.getByRole('button', { name: 'Save settings' }).click();
  await page.getByTestId('settings-form').waitFor({ state: 'hidden' });
  await page.locator('.agent-head').getByTestId('status-line').filter({ hasText: 'Rebuild to apply' }).waitFor();
  assert.equal((await ctx.server.apiJson('GET', `/agents/${a.id}`)).needsRebuild, true);
  await page.getByRole('link', { name: '← Agents' }).click();
  const r = row(page, 'builder');
  await r.getByTestId('status-line').filter({ hasText: 'Rebuild to apply' }).waitFor();
  assert.match(await r.textContent(), /768 MiB/);
  await r.getByRole('button', { name: 'Rebuild builder' }).click();
  await until('rebuilt', async () => {
    const now = await ctx.server.apiJson('GET', `/agents/${a.id}`);
    return now.state === 'running' && !now.needsRebuild;
  }, { timeout: 60_000 });
  await r.locator('[data-testid="state"][data-state="running"]').waitFor();
  await r.getByText(/Sleeps in/).waitFor();
  assert.doesNotMatch(await r.getByTestId('status-line').textContent(), /Rebuild to apply/);
  assert.equal(await page.evaluate(() => window.__noReload), true, 'no page reload happened');
});

test('destroy asks for confirmation naming the agent, then the row goes away', async () => {
  const { page } = ctx.b;
  const r = row(page, 'from-api');
  await r.getByRole('button', { name: 'Destroy from-api' }).click();
  const dialog = page.locator('dialog[open]');
  await dialog.waitFor();
  assert.match(await dialog.textContent(), /from-api/);
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await dialog.waitFor({ state: 'detached' });
  assert.equal(await r.count(), 1, 'cancel keeps the agent');
  await r.getByRole('button', { name: 'Destroy from-api' }).click();
  await page.locator('dialog[open]').getByRole('button', { name: 'Destroy from-api' }).click();
  await r.waitFor({ state: 'detached', timeout: 30_000 });
  const list = await ctx.server.apiJson('GET', '/agents');
  assert.ok(!list.some((a) => a.name === 'from-api'), 'gone from the API too');
  assert.equal(await page.evaluate(() => window.__noReload), true, 'no page reload happened');
});

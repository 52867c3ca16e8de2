// Presets, agent env and the setup script in the web UI (issues #16, #17): the create form's
// preset dropdown (description and limits, the default chosen, empty fields taking the preset's
// values), env rows, and the agent page's preset, env editor and live setup log.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, screenshot, until } from './harness.mjs';

const SETUP = ['echo hello-from-setup', 'echo setup-to-stderr >&2', 'echo "greeting is $GREETING"'];

const ctx = browserSuite({
  options: {
    sandboxConfig: ['  default_preset: dev'],
    topConfig: [
      'presets:',
      '  minimal:',
      '    description: Plain Debian, small',
      '    warm: 1',
      '    cpus: 1',
      '    memoryMb: 512',
      '  dev:',
      '    description: Tools and a setup script',
      '    cpus: 2',
      '    memoryMb: 1024',
      '    idleMinutes: 45',
      '    allowRoot: true',
      '    env:',
      '      GREETING: hello',
      '    setup: |',
      ...SETUP.map((l) => `      ${l}`),
    ],
  },
});

test('a preset whose warm pool has a sandbox ready is offered as instant', async () => {
  const { page } = ctx.b;
  await until('the minimal pool has a sandbox ready', async () =>
    (await ctx.server.apiJson('GET', '/pool')).some((p) => p.preset === 'minimal' && p.ready > 0),
  );
  await page.reload();
  const select = page.getByTestId('preset-select');
  await select.locator('option[value="minimal"][data-instant="true"]').waitFor({ state: 'attached' });
  assert.match(await select.locator('option[value="minimal"]').textContent(), /^minimal · instant — Plain Debian, small$/);
  assert.equal(await select.locator('option[value="dev"][data-instant]').count(), 0, 'dev keeps no pool');
});

const row = (page, name) => page.locator(`[data-testid="agent-row"][data-agent-name="${name}"]`);

test('the create form offers the presets: the default chosen, each with its description and limits', async () => {
  const { page } = ctx.b;
  const presets = await ctx.server.apiJson('GET', '/presets');
  assert.deepEqual(
    presets.map((p) => p.name),
    ['dev', 'minimal'],
  );
  const select = page.getByTestId('preset-select');
  await select.waitFor();
  assert.deepEqual(await select.locator('option').evaluateAll((os) => os.map((o) => o.value)), ['dev', 'minimal']);
  assert.equal(await select.inputValue(), 'dev', 'the default preset is chosen');
  assert.match(await select.locator('option[value="dev"]').textContent(), /dev \(default\) — Tools and a setup script/);
  const detail = page.getByTestId('preset-detail');
  await detail.filter({ hasText: 'Tools and a setup script' }).waitFor();
  const text = await detail.textContent();
  for (const part of ['2 CPUs', '1 GiB', 'sleeps after 45 min idle', 'sudo', 'env GREETING', 'setup script']) assert.ok(text.includes(part), `${part} in “${text}”`);
  // Empty fields say they take the preset's values.
  await until('cpus placeholder from the preset', async () => (await page.locator('#new-cpus').getAttribute('placeholder')) === '2 (preset)');
  assert.equal(await page.locator('#new-memoryMb').getAttribute('placeholder'), '1024 (preset)');
  // "Allow root (sudo)" is ticked as the chosen preset says.
  const root = page.getByTestId('allow-root');
  assert.equal(await root.isChecked(), true, 'dev allows root');
  await select.selectOption('minimal');
  await detail.filter({ hasText: 'Plain Debian, small' }).waitFor();
  assert.equal(await root.isChecked(), false, 'minimal does not');
  assert.match(await detail.textContent(), /1 CPU\b.*512 MiB/);
  assert.equal(await page.locator('#new-cpus').getAttribute('placeholder'), '1 (preset)');
  // What the server says the preset gives, even where its config left a key out.
  const minimal = presets.find((p) => p.name === 'minimal');
  assert.equal(await page.locator('#new-idleMinutes').getAttribute('placeholder'), `${minimal.idleMinutes} (preset)`);
  // The runtime choice shows only when the server allows more than one.
  const limits = await ctx.server.apiJson('GET', '/limits');
  const many = Array.isArray(limits.runtimes) && limits.runtimes.length > 1;
  assert.equal(await page.getByTestId('runtime-select').isVisible(), many);
  await select.selectOption('dev');
  await screenshot(page, 'create-presets.png');
});

test('create from the dropdown with env rows; the agent page shows preset, env and the setup log', async () => {
  const { page } = ctx.b;
  await page.locator('#new-name').fill('from-dev');
  await page.getByTestId('preset-select').selectOption('dev');
  await page.locator('#new-memoryMb').fill('768');
  await page.getByTestId('new-env-add').click();
  await page.getByRole('textbox', { name: 'Variable 1 name' }).fill('EXTRA');
  await page.getByRole('textbox', { name: 'Variable 1 value' }).fill('from-form');
  await page.getByRole('button', { name: 'Create agent' }).click();
  const r = row(page, 'from-dev');
  await r.waitFor();
  await r.locator('[data-testid="state"][data-state="running"]').waitFor({ timeout: 60_000 });
  const id = await r.getAttribute('data-agent-id');
  const agent = await ctx.server.apiJson('GET', `/agents/${id}`);
  assert.equal(agent.preset, 'dev');
  assert.equal(agent.cpus, 2, 'an empty field took the preset’s value');
  assert.equal(agent.memoryMb, 768, 'a field given overrides the preset');
  assert.deepEqual(agent.env, { GREETING: 'hello', EXTRA: 'from-form' });
  assert.equal(agent.allowRoot, true, 'the preset’s allowRoot, the box left as it was');
  assert.match(await r.textContent(), /preset dev/, 'the list names the preset');
  // The form is ready for the next one: no env rows left, the default preset chosen.
  assert.equal(await page.getByTestId('env-row').count(), 0);
  assert.equal(await page.getByTestId('preset-select').inputValue(), 'dev');

  await r.getByRole('link', { name: 'Open from-dev' }).click();
  await page.getByTestId('agent-preset').filter({ hasText: 'preset dev' }).waitFor();
  assert.match(await page.getByTestId('agent-env').textContent(), /EXTRA, GREETING/);
  const setup = page.getByTestId('setup');
  await setup.waitFor();
  const log = setup.getByTestId('setup-log');
  await log.filter({ hasText: 'hello-from-setup' }).waitFor({ timeout: 60_000 });
  await log.filter({ hasText: 'setup-to-stderr' }).waitFor();
  await log.filter({ hasText: 'greeting is hello' }).waitFor();
  await setup.and(page.locator('[data-state="done"]')).waitFor({ timeout: 60_000 });
  assert.match(await setup.getByTestId('setup-state').textContent(), /done \(exit code 0\)/);
  const after = await ctx.server.apiJson('GET', `/agents/${id}`);
  assert.equal(after.setup.state, 'done');
  assert.equal(after.setup.exitCode, 0);
  await screenshot(page, 'agent-setup.png');
});

test('run setup again: the new run’s log is followed', async () => {
  const { page } = ctx.b;
  const id = await page.locator('.agent-page').getAttribute('data-agent-id');
  const before = (await ctx.server.apiJson('GET', `/agents/${id}`)).setup;
  const setup = page.getByTestId('setup');
  await setup.getByTestId('setup-again').click();
  if (before.processId) {
    const next = await until('a new setup process', async () => {
      const s = (await ctx.server.apiJson('GET', `/agents/${id}`)).setup;
      return s.processId && s.processId !== before.processId && s;
    });
    await setup.and(page.locator(`[data-process-id="${next.processId}"]`)).waitFor();
  }
  await setup.and(page.locator('[data-state="done"]')).waitFor({ timeout: 60_000 });
  const log = setup.getByTestId('setup-log');
  await log.filter({ hasText: 'hello-from-setup' }).waitFor({ timeout: 60_000 });
  await setup.getByTestId('setup-log-panel').and(page.locator('[data-state="ended"]')).waitFor({ timeout: 60_000 });
});

test('env is edited on the agent page and reaches new processes', async () => {
  const { page } = ctx.b;
  const id = await page.locator('.agent-page').getAttribute('data-agent-id');
  await page.getByTestId('env').click();
  const form = page.getByTestId('env-form');
  await form.waitFor();
  assert.equal(await form.getByTestId('env-row').count(), 2);
  // Rows are sorted: EXTRA, then GREETING.
  await form.getByRole('textbox', { name: 'Variable 1 value' }).fill('changed');
  await form.getByRole('button', { name: 'Remove variable 2' }).click();
  await form.getByTestId('agent-env-add').click();
  await form.getByRole('textbox', { name: 'Variable 2 name' }).fill('1BAD');
  await form.getByTestId('env-save').click();
  await form.getByTestId('env-error').filter({ hasText: '1BAD' }).waitFor();
  await form.getByRole('textbox', { name: 'Variable 2 name' }).fill('NEW_ONE');
  await form.getByRole('textbox', { name: 'Variable 2 value' }).fill('x y');
  await form.getByTestId('env-save').click();
  await form.waitFor({ state: 'hidden' });
  const want = { EXTRA: 'changed', NEW_ONE: 'x y' };
  await until(`env ${JSON.stringify(want)}`, async () => {
    const a = await ctx.server.apiJson('GET', `/agents/${id}`);
    assert.deepEqual(a.env, want);
    return true;
  });
  await page.getByTestId('agent-env').filter({ hasText: 'EXTRA, NEW_ONE' }).waitFor();
  const r = await ctx.server.apiJson('POST', `/agents/${id}/exec`, { command: ['sh', '-c', 'echo "$EXTRA|$NEW_ONE|${GREETING-unset}"'] });
  assert.equal(r.stdout, 'changed|x y|unset\n');
});

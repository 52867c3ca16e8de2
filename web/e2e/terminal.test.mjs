// The terminal: a shell answers, it fits its box and follows the window's size, a new session
// after the shell exits, paste.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { browserSuite, openTerminal, runInTerminal, screenshot, termLines, until } from './harness.mjs';

const ctx = browserSuite({ agent: 'term', open: openTerminal });

const termSize = (page) => page.evaluate(() => ({ cols: window.__agentholdTerm.cols, rows: window.__agentholdTerm.rows }));

test('type a command and read its output from the terminal buffer', async () => {
  const { page } = ctx.b;
  const nonce = randomBytes(4).toString('hex');
  const { line } = await runInTerminal(page, `echo hello-$((20+22))-${nonce}`, new RegExp(`^hello-42-${nonce}\\s*$`));
  assert.equal(line.trim(), `hello-42-${nonce}`);
  // The shell's own $RANDOM (when the shell has one) differs from the typed text.
  await runInTerminal(page, 'echo hello-$RANDOM-x', /^hello-\d*-x\s*$/);
  await screenshot(page, 'terminal.png');
});

test('the terminal fits its box and stty size follows a viewport resize', async () => {
  const { page } = ctx.b;
  const before = await termSize(page);
  assert.ok(before.cols > 80 && before.rows > 15, `fits a 1280×720 page: ${JSON.stringify(before)}`);
  await runInTerminal(page, 'stty size', new RegExp(`^${before.rows} ${before.cols}\\s*$`));
  await page.setViewportSize({ width: 900, height: 560 });
  const after2 = await until('terminal refit', async () => {
    const s = await termSize(page);
    return s.cols < before.cols && s.rows < before.rows ? s : null;
  });
  await runInTerminal(page, 'stty size', new RegExp(`^${after2.rows} ${after2.cols}\\s*$`));
  await page.setViewportSize({ width: 1280, height: 720 });
  await until('terminal refit back', async () => (await termSize(page)).cols === before.cols);
});

test('paste puts the clipboard into the shell', async () => {
  const { page } = ctx.b;
  const nonce = randomBytes(4).toString('hex');
  await page.evaluate((t) => navigator.clipboard.writeText(t), `echo pasted-${nonce}`);
  await page.getByRole('button', { name: 'Paste' }).click();
  // The button reads the clipboard asynchronously and then focuses the terminal: press Enter
  // only once the shell has echoed the pasted text, or it lands on the button (pasting again).
  await until('pasted text on the prompt line', async () => (await termLines(page)).some((l) => l.includes(`echo pasted-${nonce}`)), { timeout: 15_000 });
  await until('terminal focused', () => page.evaluate(() => document.activeElement?.closest('.xterm') != null));
  await page.keyboard.press('Enter');
  await until('pasted output', async () => (await termLines(page)).some((l) => l.trim() === `pasted-${nonce}`), { timeout: 15_000 });
});

test('when the shell exits, the page says so and offers a new session', async () => {
  const { page } = ctx.b;
  await page.locator('.xterm').click();
  await page.keyboard.type('exit');
  await page.keyboard.press('Enter');
  await page.locator('.term[data-status="ended"]').waitFor({ timeout: 20_000 });
  assert.ok((await termLines(page)).some((l) => l.includes('The shell ended')));
  const again = page.getByTestId('new-session');
  assert.equal(await again.isVisible(), true);
  await again.click();
  await page.locator('.term[data-status="connected"]').waitFor({ timeout: 30_000 });
  const nonce = randomBytes(4).toString('hex');
  await runInTerminal(page, `echo again-${nonce}`, new RegExp(`^again-${nonce}\\s*$`));
});

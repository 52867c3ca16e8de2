// The file browser: drag-and-drop upload of 20 MiB (byte-identical), download, folders, the
// editor, and hostile names rendered as text.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { browserSuite, openFiles, screenshot, sha256, until } from './harness.mjs';

const ctx = browserSuite({ agent: 'files', open: openFiles });

const fileRow = (page, name) => page.locator('tr.file-row').filter({ has: page.locator(`.file-name`).getByText(name, { exact: true }) });
const q = encodeURIComponent;

test('drag and drop a 20 MiB file: progress, then byte-identical through the API', async () => {
  const { page } = ctx.b;
  const size = 20 * 1024 * 1024;
  const hash = await page.evaluate(async (size) => {
    const bytes = new Uint8Array(size);
    for (let off = 0; off < size; off += 65536) crypto.getRandomValues(bytes.subarray(off, off + 65536));
    const digest = await crypto.subtle.digest('SHA-256', bytes);
    const file = new File([bytes], 'big.bin', { type: 'application/octet-stream' });
    const dt = new DataTransfer();
    dt.items.add(file);
    const target = document.querySelector('[data-testid="files"]');
    for (const type of ['dragenter', 'dragover', 'drop']) {
      target.dispatchEvent(new DragEvent(type, { bubbles: true, cancelable: true, dataTransfer: dt }));
    }
    return [...new Uint8Array(digest)].map((x) => x.toString(16).padStart(2, '0')).join('');
  }, size);
  const item = page.locator('[data-testid="upload"][data-name="big.bin"]');
  await item.waitFor();
  assert.equal(await item.locator('progress').count(), 1, 'a progress bar for the upload');
  await item.and(page.locator('.upload-done')).waitFor({ timeout: 120_000 });
  await fileRow(page, 'big.bin').waitFor();
  const res = await ctx.server.api('GET', `/agents/${ctx.agent.id}/fs/read?path=big.bin`);
  assert.equal(res.status, 200);
  const body = Buffer.from(await res.arrayBuffer());
  assert.equal(body.length, size);
  assert.equal(sha256(body), hash);
  assert.match(await fileRow(page, 'big.bin').textContent(), /20(\.0)? MiB/);
});

test('download a file through its link', async () => {
  const { page } = ctx.b;
  const content = Buffer.from(`download me ${Date.now()}\n`);
  assert.equal((await ctx.server.api('PUT', `/agents/${ctx.agent.id}/fs/write?path=dl.txt`, content)).status, 204);
  await page.getByRole('button', { name: 'Refresh' }).click();
  const link = fileRow(page, 'dl.txt').getByRole('link', { name: 'Download dl.txt' });
  const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
  assert.equal(download.suggestedFilename(), 'dl.txt');
  const saved = await readFile(await download.path());
  assert.equal(sha256(saved), sha256(content));
  // The 20 MiB file downloads whole too.
  const [big] = await Promise.all([page.waitForEvent('download'), fileRow(page, 'big.bin').getByRole('link', { name: 'Download big.bin' }).click()]);
  const bigBytes = await readFile(await big.path());
  const apiBytes = Buffer.from(await (await ctx.server.api('GET', `/agents/${ctx.agent.id}/fs/read?path=big.bin`)).arrayBuffer());
  assert.equal(sha256(bigBytes), sha256(apiBytes));
});

test('make a folder, open it, go back by the breadcrumb, delete it with confirmation', async () => {
  const { page } = ctx.b;
  await page.getByRole('button', { name: 'New folder' }).click();
  await page.getByRole('textbox', { name: 'Name' }).fill('made-here');
  await page.getByRole('button', { name: 'Create folder' }).click();
  const r = fileRow(page, 'made-here');
  await r.waitFor();
  const list = await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/fs/list?path=.`);
  assert.equal(list.find((e) => e.name === 'made-here')?.type, 'dir');
  await r.getByRole('button', { name: 'made-here', exact: true }).click();
  await page.getByTestId('breadcrumbs').getByRole('button', { name: 'made-here', exact: true }).waitFor();
  await page.getByTestId('files-message').filter({ hasText: 'empty' }).waitFor();
  await page.getByTestId('breadcrumbs').getByRole('button', { name: '/home/agent' }).click();
  await r.waitFor();
  await r.getByRole('button', { name: 'Delete made-here' }).click();
  const dialog = page.locator('dialog[open]');
  assert.match(await dialog.textContent(), /made-here/);
  await dialog.getByRole('button', { name: 'Delete' }).click();
  await r.waitFor({ state: 'detached' });
  const after2 = await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/fs/list?path=.`);
  assert.ok(!after2.some((e) => e.name === 'made-here'));
});

test('open a text file in the editor, change it, save it', async () => {
  const { page } = ctx.b;
  assert.equal((await ctx.server.api('PUT', `/agents/${ctx.agent.id}/fs/write?path=notes.txt`, 'line one\n')).status, 204);
  await page.getByRole('button', { name: 'Refresh' }).click();
  await fileRow(page, 'notes.txt').getByRole('button', { name: 'Edit notes.txt' }).click();
  const editor = page.getByTestId('editor');
  await page.getByTestId('editor-panel').filter({ hasText: 'notes.txt' }).waitFor();
  await until('editor content', async () => (await editor.inputValue()) === 'line one\n', { timeout: 10_000 });
  await editor.fill('line one\nline two — ünïcødé ✓\n');
  await page.getByTestId('editor-save').click();
  await page.getByTestId('editor-status').filter({ hasText: 'Saved' }).waitFor();
  const res = await ctx.server.api('GET', `/agents/${ctx.agent.id}/fs/read?path=notes.txt`);
  assert.equal(await res.text(), 'line one\nline two — ünïcødé ✓\n');
  await page.getByTestId('editor-close').click();
  await fileRow(page, 'notes.txt').waitFor();
});

test('hostile file names render as text', async () => {
  const { page } = ctx.b;
  const names = [
    'has space.txt',
    'ünïcødé ✓ 日本語.txt',
    `quote"s 'and' \`ticks\`.txt`,
    '<script>window.__xss=1<\\script>.txt',
    '<img src=x onerror="window.__xss=2">',
    '&amp; &lt;b&gt;.txt',
  ];
  for (const n of names) {
    const res = await ctx.server.api('PUT', `/agents/${ctx.agent.id}/fs/write?path=${q(n)}`, `content of ${n}`);
    assert.equal(res.status, 204, `write ${n}: ${await res.text()}`);
  }
  const dirName = '<b>dir</b> "x"';
  const mk = await ctx.server.api('POST', `/agents/${ctx.agent.id}/fs/mkdir?path=${q(dirName.replace('/', '∕'))}`);
  assert.equal(mk.status, 204);
  await page.getByRole('button', { name: 'Refresh' }).click();
  for (const n of names) {
    const cell = page.locator('.file-name').getByText(n, { exact: true });
    await cell.waitFor();
    assert.equal(await cell.textContent(), n);
  }
  assert.equal(await page.locator('.files-table img, .files-table script, .files-table b').count(), 0, 'no element made from a name');
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  // The editor opens a hostile-named file and the breadcrumb shows a hostile folder name as text.
  const hostile = names[3];
  await fileRow(page, hostile).getByRole('button', { name: `Edit ${hostile}` }).click();
  await page.getByTestId('editor-panel').filter({ hasText: hostile }).waitFor();
  await until('editor content', async () => (await page.getByTestId('editor').inputValue()) === `content of ${hostile}`, { timeout: 10_000 });
  await page.getByTestId('editor-close').click();
  const dn = dirName.replace('/', '∕');
  await fileRow(page, dn).getByRole('button', { name: dn, exact: true }).click();
  await page.getByTestId('breadcrumbs').getByRole('button', { name: dn, exact: true }).waitFor();
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  await page.getByTestId('breadcrumbs').getByRole('button', { name: '/home/agent' }).click();
  await fileRow(page, 'notes.txt').waitFor();
  await screenshot(page, 'files.png');
});

test('the path bar and breadcrumbs reach any absolute path; a refused one shows the server’s error', async () => {
  const { page } = ctx.b;
  assert.equal((await ctx.server.api('POST', `/agents/${ctx.agent.id}/fs/mkdir?path=deep/er`)).status, 204);
  assert.equal((await ctx.server.api('PUT', `/agents/${ctx.agent.id}/fs/write?path=deep/er/inside.txt`, 'x')).status, 204);
  const crumbs = page.getByTestId('breadcrumbs');
  const pathInput = page.getByRole('textbox', { name: 'Path' });
  assert.equal(await pathInput.inputValue(), '/home/agent', 'the path bar shows the folder shown');

  // An absolute path typed and Enter.
  await pathInput.fill('/home/agent/deep/er');
  await pathInput.press('Enter');
  await fileRow(page, 'inside.txt').waitFor();
  await crumbs.locator('[aria-current="location"]').filter({ hasText: 'er' }).waitFor();
  assert.equal(await pathInput.inputValue(), '/home/agent/deep/er');
  // A relative one, with `..`, resolved against the folder shown.
  await pathInput.fill('..');
  await pathInput.press('Enter');
  await fileRow(page, 'er').waitFor();
  assert.equal(await pathInput.inputValue(), '/home/agent/deep');
  // `~` is the home.
  await pathInput.fill('~/deep/er/');
  await pathInput.press('Enter');
  await fileRow(page, 'inside.txt').waitFor();
  assert.equal(await pathInput.inputValue(), '/home/agent/deep/er');

  // Above the home: `/` through the path bar. The fake driver serves nothing outside the home,
  // so the server refuses it there; whatever it answers is what the page shows.
  const direct = await ctx.server.api('GET', `/agents/${ctx.agent.id}/fs/list?path=${q('/')}`);
  const body = await direct.text();
  await pathInput.fill('/');
  await pathInput.press('Enter');
  await crumbs.getByRole('button', { name: 'Root folder' }).and(page.locator('[aria-current="location"]')).waitFor();
  if (direct.ok) {
    await fileRow(page, 'home').waitFor();
  } else {
    const { error } = JSON.parse(body);
    const msg = page.getByTestId('files-message');
    await msg.filter({ hasText: error.message }).waitFor();
    assert.equal(await msg.getAttribute('role'), 'alert');
    assert.match(await msg.textContent(), /Cannot open “\/”/);
    assert.equal(await page.locator('[data-testid="files"]').getAttribute('data-state'), 'error');
  }
  await page.getByTestId('files-scope').filter({ hasText: 'Outside the home' }).waitFor();
  await screenshot(page, 'files-root.png');

  // The ".." row of the home goes up to /home; the home crumb comes back.
  await crumbs.getByRole('button', { name: '/home/agent' }).waitFor({ state: 'detached' });
  await pathInput.fill('/home/agent');
  await pathInput.press('Enter');
  await fileRow(page, 'deep').waitFor();
  assert.equal(await page.getByTestId('files-scope').isHidden(), true);
  await page.getByRole('button', { name: 'Parent folder' }).click();
  await until('path bar at /home', async () => (await pathInput.inputValue()) === '/home');
  await crumbs.getByRole('button', { name: 'home', exact: true }).and(page.locator('[aria-current="location"]')).waitFor();
  await page.locator('[data-testid="files"]:is([data-state="ready"], [data-state="error"])').waitFor();
  await pathInput.fill('~');
  await pathInput.press('Enter');
  await fileRow(page, 'deep').waitFor();
  await crumbs.getByRole('button', { name: '/home/agent' }).and(page.locator('[aria-current="location"]')).waitFor();
});

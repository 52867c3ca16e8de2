// Terminal sessions that survive: the control messages stay out of the terminal, a dropped
// connection reattaches by itself and continues the output exactly, a reload reattaches to the
// same shell, the session picker, and a session that ends with its agent's sleep.
//
// The page talks to the server through a loopback TCP proxy (harness `startProxy`), so a test
// can cut its connections the way a network drop does.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { browserSuite, openTerminal, runInTerminal, screenshot, termLines, until } from './harness.mjs';

/** Every terminal WebSocket the page opened: { url, received: [text], sent: [text], closed }. */
const sockets = [];

const ctx = browserSuite({
  proxied: true,
  onBrowser: ({ b }) => b.page.on('websocket', (ws) => {
    if (!ws.url().includes('/terminal')) return;
    const rec = { url: ws.url(), received: [], sent: [], closed: false };
    sockets.push(rec);
    ws.on('framereceived', ({ payload }) => typeof payload === 'string' && rec.received.push(payload));
    ws.on('framesent', ({ payload }) => typeof payload === 'string' && rec.sent.push(payload));
    ws.on('close', () => (rec.closed = true));
  }),
  agent: 'sessions',
  open: openTerminal,
});

const connected = (page, timeout = 30_000) => page.locator('.term[data-status="connected"]').waitFor({ timeout });
const stored = (page) => page.evaluate((id) => JSON.parse(sessionStorage.getItem(`agenthold.terminal.${id}`) ?? 'null'), ctx.agent.id);
const sessions = () => ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/terminals`);
const controls = (list = sockets) => list.flatMap((s) => s.received.map((t) => JSON.parse(t)));
const termSize = (page) => page.evaluate(() => ({ cols: window.__agentholdTerm.cols, rows: window.__agentholdTerm.rows }));

/** No control message (or any JSON object) ever reached the terminal buffer. */
async function assertNoControlJson(page) {
  const bad = (await termLines(page)).filter((l) => /"type"\s*:|\{"(cols|id|offset|rows|type|bytes|code)"/.test(l));
  assert.deepEqual(bad, [], 'control JSON in the terminal buffer');
}

/** Numbers n of the lines `${tag}-n` in the buffer, in buffer order. */
async function numbered(page, tag) {
  const re = new RegExp(`^${tag}-(\\d+)\\s*$`);
  return (await termLines(page)).map((l) => re.exec(l)?.[1]).filter(Boolean).map(Number);
}
const oneTo = (n) => Array.from({ length: n }, (_, i) => i + 1);

/** Starts 400 numbered lines (10 ms apart) and waits until the first few are on screen. */
async function startLines(page, tag) {
  await page.locator('.xterm').click();
  await page.keyboard.type(`for i in $(seq 1 400); do echo ${tag}-$i; sleep 0.01; done; echo ${tag}-''done`);
  await page.keyboard.press('Enter');
  await until(`${tag}-20 on screen`, async () => (await numbered(page, tag)).includes(20), { timeout: 20_000 });
}

/** Waits until the session (seen from the server) has produced `bytes` more output than now. */
async function outputGrows(sid, bytes) {
  const start = (await sessions()).find((s) => s.id === sid).offset;
  await until(`${bytes} more bytes of output in session ${sid}`, async () => (await sessions()).find((s) => s.id === sid).offset >= start + bytes, {
    timeout: 20_000,
  });
}

test('control messages (session, resize, redraw) never reach the terminal', async () => {
  const { page } = ctx.b;
  const { id: sid } = await stored(page);
  const mine = sockets.at(-1);
  // A second viewer attaches at another size: the session takes it and tells us (`resize`).
  await page.evaluate(
    ({ agentId, sid }) =>
      new Promise((resolve, reject) => {
        const ws = new WebSocket(`ws://${location.host}/api/v1/agents/${agentId}/terminal?session=${sid}&cols=100&rows=20`);
        window.__otherViewer = ws;
        ws.onmessage = (e) => typeof e.data === 'string' && JSON.parse(e.data).type === 'session' && resolve();
        ws.onclose = (e) => reject(new Error(`other viewer closed ${e.code}`));
      }),
    { agentId: ctx.agent.id, sid },
  );
  await until('our xterm takes the other viewer’s size', async () => {
    const t = await termSize(page);
    return t.cols === 100 && t.rows === 20;
  });
  assert.ok(controls([mine]).some((c) => c.type === 'resize' && c.cols === 100 && c.rows === 20), 'a resize message');
  const sentBefore = mine.sent.length;
  // The other viewer asks the shell for its size: a resize echoed back by us would show here.
  await page.evaluate(() => window.__otherViewer.send(new TextEncoder().encode('stty size\r')));
  await until('stty size of the other viewer', async () => (await termLines(page)).some((l) => l.trim() === '20 100'));
  assert.deepEqual(mine.sent.slice(sentBefore), [], 'no resize sent back for another viewer’s resize');
  await page.evaluate(() => window.__otherViewer.close());
  // Typing here takes the session back to our size (refit, then the keys).
  const nonce = randomBytes(4).toString('hex');
  await runInTerminal(page, `echo typed-${nonce}`, new RegExp(`^typed-${nonce}\s*$`));
  const ours = await termSize(page);
  assert.ok(ours.cols > 100 && ours.rows > 20, `refit to our box: ${JSON.stringify(ours)}`);
  assert.ok(mine.sent.some((t) => JSON.parse(t).type === 'resize'), 'we sent our size when typing');
  await runInTerminal(page, 'stty size', new RegExp(`^${ours.rows} ${ours.cols}\\s*$`));

  // A reload attaches without an offset: the server sends a redraw of the screen.
  const beforeReload = sockets.length;
  await page.reload();
  await connected(page);
  await until('a redraw after the reload', () => controls(sockets.slice(beforeReload)).some((c) => c.type === 'redraw'));
  const types = new Set(controls(sockets.filter((s) => !s.url.includes('cols=100&rows=20'))).map((c) => c.type));
  for (const t of ['session', 'resize', 'redraw']) assert.ok(types.has(t), `the page received a ${t} message`);
  await runInTerminal(page, `echo still-${sid}`, new RegExp(`^still-${sid}\\s*$`));
  await assertNoControlJson(page);
});

test('a page reload reattaches to the same shell and leaves no shell behind', async () => {
  const { page } = ctx.b;
  const nonce = randomBytes(4).toString('hex');
  await runInTerminal(page, `KEEP=kept-${nonce}; echo set-${nonce}`, new RegExp(`^set-${nonce}\\s*$`));
  const before = await stored(page);
  assert.ok(before?.id, 'the session id is in sessionStorage');
  await page.reload();
  await connected(page);
  assert.equal((await stored(page)).id, before.id, 'the same session after the reload');
  // The redraw puts the screen back as it was (the `set-` line is on it).
  await until('the screen redrawn', async () => (await termLines(page)).some((l) => l.trim() === `set-${nonce}`));
  await runInTerminal(page, 'echo "[$KEEP]"', new RegExp(`^\\[kept-${nonce}\\]\\s*$`));
  const list = await sessions();
  assert.deepEqual(
    list.map((s) => s.id),
    [before.id],
    'one session: the reload did not start a second shell',
  );
  assert.equal(list[0].viewers, 1);
  await assertNoControlJson(page);
  await screenshot(page, 'terminal-reattached.png');
});

test('a network drop while output streams: it reconnects by itself and every line arrives exactly once', async () => {
  const { page, context } = ctx.b;
  const tag = `drop${randomBytes(3).toString('hex')}`;
  const { id: sid } = await stored(page);
  await startLines(page, tag);
  const socketsBefore = sockets.length;
  // Chromium's offline emulation alone does not close an open WebSocket (it holds its traffic,
  // and with it the news of a reset connection), so the outage is made at the TCP level: the
  // proxy cuts the page's connections and refuses new ones. The page sees close 1006, reconnects
  // with backoff (failing), and goes offline as well, so the `offline`/`online` events play too.
  try {
    assert.ok(ctx.proxy.setDown(true) > 0, 'the proxy had connections to cut');
    await page.locator('.term[data-status="reconnecting"]').waitFor({ timeout: 10_000 });
    await context.setOffline(true);
    await until('the status line says offline', async () => /Offline/.test(await page.getByTestId('terminal-status').innerText()), { timeout: 10_000 });
    // Failed attempts (with backoff) meanwhile, and the shell keeps printing.
    await until('two failed reconnect attempts', () => sockets.length >= socketsBefore + 2, { timeout: 10_000 });
    await outputGrows(sid, 1500);
    await screenshot(page, 'terminal-reconnecting.png');
  } finally {
    ctx.proxy.setDown(false);
    await context.setOffline(false);
  }
  await connected(page);
  await until(`${tag}-done`, async () => (await termLines(page)).some((l) => l.trim() === `${tag}-done`), { timeout: 30_000 });
  assert.deepEqual(await numbered(page, tag), oneTo(400), 'lines 1..400, each once, in order');
  assert.equal((await stored(page)).id, sid, 'the same session');
  // The reconnect reattached with the offset (no redraw: the buffer kept its history).
  const reattach = sockets.slice(socketsBefore).find((s) => s.received.length);
  assert.match(reattach.url, new RegExp(`[?&]session=${sid}&offset=\\d+`));
  assert.ok(!reattach.received.some((t) => JSON.parse(t).type === 'redraw'), 'an exact replay, not a redraw');
  const lines = await termLines(page);
  assert.ok(!lines.some((l) => /Reconnecting|Disconnected/.test(l)), 'the indicator stays out of the terminal');
  await assertNoControlJson(page);
});

test('offline then online without a close: the page reattaches and continues exactly', async () => {
  const { page, context } = ctx.b;
  const tag = `blip${randomBytes(3).toString('hex')}`;
  const { id: sid } = await stored(page);
  await startLines(page, tag);
  const socketsBefore = sockets.length;
  // Only the offline/online events here: the old socket stays open (the emulation holds its
  // traffic), and the `online` event makes the page reattach from its offset on a fresh socket.
  try {
    await context.setOffline(true);
    await outputGrows(sid, 1500);
  } finally {
    await context.setOffline(false);
  }
  await until('a fresh socket after coming back online', () => sockets.length > socketsBefore, { timeout: 10_000 });
  await connected(page);
  await until(`${tag}-done`, async () => (await termLines(page)).some((l) => l.trim() === `${tag}-done`), { timeout: 30_000 });
  assert.deepEqual(await numbered(page, tag), oneTo(400), 'lines 1..400, each once, in order');
  assert.match(sockets.at(-1).url, new RegExp(`[?&]session=${sid}&offset=\\d+`));
  await assertNoControlJson(page);
});

test('a stored session that is gone is replaced by a new one on load', async () => {
  const { page } = ctx.b;
  const { id: sid } = await stored(page);
  // A well-formed id no sandbox has: the attach fails with 404 (the page sees only 1006), the
  // session list says it does not exist, and the page starts a new shell by itself.
  const fake = sid.replace(/^./, (c) => (c === 'a' ? 'b' : 'a'));
  // (Set it on another page: leaving the agent page stores its own session.)
  await page.goto('/');
  await page.getByRole('heading', { name: 'Agents' }).waitFor();
  await page.evaluate(({ key, fake }) => sessionStorage.setItem(key, JSON.stringify({ id: fake, offset: 0 })), {
    key: `agenthold.terminal.${ctx.agent.id}`,
    fake,
  });
  const socketsBefore = sockets.length;
  await page.goto(`/agents/${ctx.agent.id}`);
  await connected(page);
  const now = (await stored(page)).id;
  assert.match(sockets[socketsBefore].url, new RegExp(`[?&]session=${fake}(&|$)`), 'it tried the stored session first');
  assert.notEqual(now, fake);
  assert.notEqual(now, sid);
  const nonce = randomBytes(4).toString('hex');
  await runInTerminal(page, `echo fresh-${nonce}`, new RegExp(`^fresh-${nonce}\\s*$`));
  // The old one lives on detached (it was not this tab's any more); end it through the picker.
  await page.getByTestId('sessions').click();
  const row = page.locator(`[data-testid="sessions-list"] li[data-session="${sid}"]`);
  await row.waitFor();
  assert.equal(await page.locator(`li[data-session="${now}"] button`, { hasText: 'Shown' }).isVisible(), true);
  await screenshot(page, 'terminal-sessions.png');
  await row.getByRole('button', { name: 'End' }).click();
  await until('the old session ended', async () => !(await sessions()).some((s) => s.id === sid));
  await row.waitFor({ state: 'detached' });
  await page.getByTestId('sessions').click();
  await assertNoControlJson(page);
});

test('when the agent sleeps, the page says the session ended and a new session wakes it', async () => {
  const { page } = ctx.b;
  await ctx.server.apiJson('POST', `/agents/${ctx.agent.id}/stop`);
  await page.locator('.term[data-status="ended"]').waitFor({ timeout: 30_000 });
  assert.ok((await termLines(page)).some((l) => l.includes('the agent slept or was restarted')));
  assert.equal(await stored(page), null, 'the ended session is forgotten');
  await page.getByTestId('new-session').click();
  await connected(page, 60_000);
  const nonce = randomBytes(4).toString('hex');
  await runInTerminal(page, `echo awake-${nonce}`, new RegExp(`^awake-${nonce}\\s*$`));
  assert.ok((await stored(page)).id);
  await assertNoControlJson(page);
});

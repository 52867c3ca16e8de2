// Ports and previews on the agent's page: the Ports tab lists what listens in the sandbox (with
// the fake driver, the sandbox's loopback is this machine's, so an HTTP server this test starts on
// 127.0.0.1 is what the sandbox serves), live; "Open preview" opens it in a new tab through the
// sign-in hand-off; a token preview's link is shown once; a browser that is not signed in is sent
// to the UI's sign-in and comes back; the preview's origin cannot read the API; a deleted preview
// answers 410 at once; a sleeping agent lists nothing. Last, the same with the Docker driver and
// `python3 -m http.server` in a real sandbox.
//
// The UI is opened at http://localhost:{API port}: with no `server.public_url`, that is the origin
// a private preview sends a browser to for sign-in (cookies are per host).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { test } from 'node:test';
import { browserSuite, dockerMissing, screenshot, signIn, startServer, tokenTab, until } from './harness.mjs';

const ctx = browserSuite({
  uiHost: 'localhost',
  agent: 'web',
  // A short idle minute, for the agent that must fall asleep (deepSleepMinutes 0: stopped, not paused); the others stay up for an hour of it.
  options: { sandboxConfig: ['  idle_minute: 1s', '  default_idle_minutes: 3600'] },
});

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

/** An HTTP server on this machine's loopback (the fake sandbox's): a page naming `label`, the path asked and the cookies it got. */
async function startSite(label) {
  const srv = createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(
      `<!doctype html><title>${esc(label)}</title><h1 id="hello">Hello from ${esc(label)}</h1>` +
        `<p id="path">${esc(req.url)}</p><p id="cookies">${esc(req.headers.cookie ?? '')}</p>`,
    );
  });
  await new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });
  return {
    port: srv.address().port,
    close: () =>
      new Promise((resolve) => {
        srv.closeAllConnections();
        srv.close(() => resolve());
      }),
  };
}

const sites = [];
async function site(label) {
  const s = await startSite(label);
  sites.push(s);
  return s;
}
test.after(async () => {
  for (const s of sites) await s.close();
});

const previews = () => ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/previews`);
const portRow = (page, port) => page.locator(`tr.port-row[data-port="${port}"]`);
const previewRow = (page, p) => page.locator(`tr.preview-row[data-preview-id="${p.id}"]`);

async function openPorts(page, agent) {
  await page.goto(`/agents/${agent.id}#ports`);
  await page.locator('[data-testid="ports"][data-state="ready"]').waitFor();
}

/** Clicks the row's "Open preview" and answers the tab it opened, once `check` finds its page loaded. */
async function openPreview(page, port, check) {
  const [tab] = await Promise.all([page.context().waitForEvent('page'), portRow(page, port).getByRole('button', { name: 'Open preview' }).click()]);
  await check(tab);
  return tab;
}

/** What `fetch(url, {credentials: 'include'})` gets when run in `page`: `{status}` or `{error}`. */
const fetchFrom = (page, url) =>
  page.evaluate(async (u) => {
    try {
      const res = await fetch(u, { credentials: 'include' });
      return { status: res.status, body: (await res.text()).slice(0, 200) };
    } catch (e) {
      return { error: String(e) };
    }
  }, url);

/** Shared by the tests below, in order: the private preview of `one` and the tab it is open in. */
const state = {};

test('the Ports tab lists what listens, live, and Open preview opens it through the sign-in hand-off', async () => {
  const { page, context } = ctx.b;
  const one = await site('site one');
  state.one = one;
  await openPorts(page, ctx.agent);
  const row = portRow(page, one.port);
  await row.waitFor();
  assert.match(await row.locator('.col-address').textContent(), /127\.0\.0\.1/);
  assert.equal(await row.getAttribute('data-preview'), '', 'no preview yet');
  assert.equal(await row.getByTestId('preview-access').inputValue(), 'private', 'private is the default');
  assert.equal(await page.getByTestId('previews-message').textContent(), 'No previews. “Open preview” on a port above makes one.');

  // Live: a server started while the tab is shown appears, and goes when it stops.
  const late = await startSite('late');
  await portRow(page, late.port).waitFor({ timeout: 15_000 });
  await late.close();
  await portRow(page, late.port).waitFor({ state: 'detached', timeout: 15_000 });

  const urls = [];
  const onRequest = (r) => urls.push(r.url());
  context.on('request', onRequest);
  const tab = await openPreview(page, one.port, (t) => t.locator('#hello').filter({ hasText: 'Hello from site one' }).waitFor());
  context.off('request', onRequest);

  const list = await previews();
  assert.equal(list.length, 1);
  const [p] = list;
  state.p = p;
  assert.equal(p.port, one.port);
  assert.equal(p.access, 'private');
  assert.equal(p.token ?? null, null, 'a listing never shows a token');
  assert.equal(p.url, `http://${one.port}-web.localhost:${ctx.server.previewsPort}/`);
  assert.equal(tab.url(), p.url, 'landed on the preview itself, its address clean');
  const origin = new URL(p.url).origin;
  assert.ok(urls.some((u) => u.startsWith(`${ctx.uiUrl}/api/v1/previews/${p.id}/open`)), `went through the UI origin's /open: ${urls.join(' ')}`);
  assert.ok(urls.some((u) => u.startsWith(`${origin}/.agenthold/auth?code=`)), `and the preview's hand-off: ${urls.join(' ')}`);
  assert.equal(await tab.locator('#cookies').textContent(), '', 'the app sees none of agenthold’s cookies');

  // The preview's cookie is its host's alone; the UI's session never goes there.
  const cookies = await context.cookies(p.url);
  const grant = cookies.find((c) => c.name === 'agenthold_preview');
  assert.ok(grant, JSON.stringify(cookies));
  assert.equal(grant.domain, new URL(p.url).hostname, 'host-only');
  assert.equal(grant.httpOnly, true);
  assert.equal(grant.sameSite, 'Lax');
  assert.equal(cookies.find((c) => c.name === 'agenthold_session'), undefined);

  // The list: port, access, URL (copied by its button), expiry; the port's row names its preview.
  const prow = previewRow(page, p);
  await prow.waitFor();
  assert.equal(await prow.locator('.col-port').textContent(), String(one.port));
  assert.equal(await prow.getAttribute('data-access'), 'private');
  assert.equal(await prow.getByTestId('preview-url').textContent(), p.url);
  assert.equal(await prow.getByTestId('preview-url').getAttribute('href'), p.url);
  assert.equal(await prow.locator('.col-expires').textContent(), 'never');
  assert.equal(await prow.getByTestId('preview-token-url').count(), 0, 'no token for a private preview');
  await row.and(page.locator('[data-preview="private"]')).waitFor();
  assert.equal(await row.getByTestId('preview-access').isDisabled(), true, 'the port has its access now');
  await prow.getByRole('button', { name: `Copy the URL of the preview of port ${one.port}` }).click();
  await until('the URL on the clipboard', async () => (await page.evaluate(() => navigator.clipboard.readText())) === p.url, { timeout: 5000 });
  await screenshot(page, 'ports.png');

  // Open preview again: the port's preview (the server answers 409 naming it) opens; none is added.
  const again = await openPreview(page, one.port, (t) => t.locator('#hello').filter({ hasText: 'Hello from site one' }).waitFor());
  assert.equal(again.url(), p.url);
  assert.deepEqual((await previews()).map((x) => x.id), [p.id]);
  await again.close();
  await tab.close();
});

test('a token preview: its link with the token is shown once, and opens it for anyone', async () => {
  const { page, browser } = ctx.b;
  const two = await site('site two');
  const row = portRow(page, two.port);
  await row.waitFor({ timeout: 15_000 });
  await row.getByTestId('preview-access').selectOption('token');
  // The choice survives the 2 s refreshes of the list (the second answer comes after the first was shown).
  for (let i = 0; i < 2; i++) await page.waitForResponse((r) => r.url().endsWith(`/agents/${ctx.agent.id}/ports`));
  assert.equal(await row.getByTestId('preview-access').inputValue(), 'token');
  await openPreview(page, two.port, (t) => t.locator('#hello').filter({ hasText: 'Hello from site two' }).waitFor());
  const p = (await previews()).find((x) => x.port === two.port);
  assert.equal(p.access, 'token');

  const prow = previewRow(page, p);
  await prow.getByTestId('preview-token-url').waitFor();
  const link = await prow.locator('.preview-token-link').textContent();
  const u = new URL(link);
  assert.equal(`${u.origin}${u.pathname}`, p.url);
  assert.match(u.searchParams.get('token') ?? '', /^\S{16,}$/);
  await prow.scrollIntoViewIfNeeded();
  await screenshot(page, 'previews-token.png');
  await prow.getByRole('button', { name: `Copy the link with the token of the preview of port ${two.port}` }).click();
  await until('the token link on the clipboard', async () => (await page.evaluate(() => navigator.clipboard.readText())) === link, { timeout: 5000 });

  // Anyone with the link: a browser that never signed in opens it; the address bar loses the token.
  const stranger = await browser.newContext();
  try {
    const sp = await stranger.newPage();
    await sp.goto(link);
    await sp.locator('#hello').filter({ hasText: 'Hello from site two' }).waitFor();
    assert.equal(sp.url(), p.url);
    assert.equal(await sp.locator('#path').textContent(), '/', 'the app never sees the token');
    const bare = await (await browser.newContext()).newPage();
    const res = await bare.goto(p.url);
    assert.equal(res.status(), 401, 'without the token');
    await bare.context().close();
  } finally {
    await stranger.close();
  }

  // Shown once: the page that made it forgets it on reload, as the server does.
  await page.reload();
  await page.locator('[data-testid="previews"][data-state="ready"]').waitFor();
  await prow.waitFor();
  assert.equal(await prow.getByTestId('preview-token-url').count(), 0);
  assert.equal((await page.content()).includes(u.searchParams.get('token')), false);
});

test('a private preview: a browser not signed in goes to the sign-in and comes back; its origin cannot read the API', async () => {
  const { browser } = ctx.b;
  const { p } = state;
  const origin = new URL(p.url).origin;
  const fresh = await browser.newContext();
  state.fresh = fresh;
  const fp = await fresh.newPage();
  fp.setDefaultTimeout(30_000);
  await fp.goto(new URL('/deep/page?x=1', p.url).href);
  await fp.getByTestId('signin-form').waitFor();
  await tokenTab(fp);
  const at = new URL(fp.url());
  assert.equal(at.origin, ctx.uiUrl, 'the UI, on the origin the preview sends to');
  assert.equal(at.pathname, '/');
  assert.equal(at.searchParams.get('next'), `/api/v1/previews/${p.id}/open?next=${encodeURIComponent('/deep/page?x=1')}`);
  assert.equal(await fp.getByTestId('signin-note').textContent(), 'Sign in with the admin token to open the preview.');
  await screenshot(fp, 'preview-signin.png');

  await fp.locator('#token').fill(ctx.server.token);
  await fp.getByRole('button', { name: 'Sign in' }).click();
  await fp.waitForURL((u) => u.origin === origin && u.pathname === '/deep/page');
  await fp.locator('#hello').filter({ hasText: 'Hello from site one' }).waitFor();
  assert.equal(await fp.locator('#path').textContent(), '/deep/page?x=1');
  assert.equal(await fp.locator('#cookies').textContent(), '');
  state.fp = fp;

  // Script on the preview's origin: the API by either of its names is out of reach, cookie or not.
  const apiPort = new URL(ctx.server.url).port;
  for (const api of [`http://127.0.0.1:${apiPort}`, `http://localhost:${apiPort}`]) {
    const got = await fetchFrom(fp, `${api}/api/v1/agents`);
    assert.ok(got.error || got.status === 401, `${api} from the preview: ${JSON.stringify(got)}`);
    assert.equal(got.status === 200, false);
  }
  // The signed-in UI itself can (the same request from its own origin).
  const ui = await fresh.newPage();
  await ui.goto(`${ctx.uiUrl}/`);
  await ui.getByRole('heading', { name: 'Agents' }).waitFor();
  assert.equal((await fetchFrom(ui, `${ctx.uiUrl}/api/v1/agents`)).status, 200);

  // Already signed in: the UI goes on to the hand-off at once.
  await ui.goto(`${ctx.uiUrl}/?next=${encodeURIComponent(`/api/v1/previews/${p.id}/open?next=${encodeURIComponent('/direct')}`)}`);
  await ui.waitForURL((u) => u.origin === origin && u.pathname === '/direct');
  await ui.locator('#hello').filter({ hasText: 'Hello from site one' }).waitFor();

  // Any other next is ignored: the UI is no open redirect.
  for (const next of ['https://example.invalid/', '//example.invalid/api/v1/previews/x/open', '/api/v1/agents', `/api/v1/previews/${p.id}/open/../../agents`]) {
    await ui.goto(`${ctx.uiUrl}/?next=${encodeURIComponent(next)}`);
    await ui.getByRole('heading', { name: 'Agents' }).waitFor();
    assert.equal(new URL(ui.url()).origin, ctx.uiUrl, next);
    assert.equal(new URL(ui.url()).pathname, '/', next);
  }
  await ui.close();
});

test('a deleted preview stops at once: a reload answers 410', async () => {
  const { page } = ctx.b;
  const { p, fp } = state;
  const prow = previewRow(page, p);
  await prow.getByRole('button', { name: `Delete the preview of port ${p.port}` }).click();
  await page.locator('dialog [data-confirm]').click();
  await prow.waitFor({ state: 'detached' });
  assert.equal((await previews()).some((x) => x.id === p.id), false);
  const res = await fp.reload();
  assert.equal(res.status(), 410);
  await portRow(page, p.port).and(page.locator('[data-preview=""]')).waitFor({ timeout: 15_000 });
  assert.equal(await portRow(page, p.port).getByTestId('preview-access').isDisabled(), false);
  await state.fresh.close();
});

test('a sleeping agent lists nothing, and the tab does not wake it', async () => {
  const { page } = ctx.b;
  const a = await ctx.server.apiJson('POST', '/agents', { name: 'sleepy', idleMinutes: 1, deepSleepMinutes: 0 });
  const sleeping = async () => (await ctx.server.apiJson('GET', `/agents/${a.id}`)).state === 'sleeping';
  await until('sleepy asleep', sleeping, { timeout: 60_000, interval: 200 });
  await openPorts(page, a);
  await page.getByTestId('ports-message').filter({ hasText: 'The agent is asleep: nothing listens.' }).waitFor();
  assert.equal(await page.locator('tr.port-row').count(), 0);
  // After a refresh of the tab it still sleeps.
  await page.waitForResponse((r) => r.url().endsWith(`/agents/${a.id}/previews`), { timeout: 15_000 });
  assert.ok(await sleeping(), 'still asleep');
});

test('Docker: a page served by python3 -m http.server in a sandbox opens through its preview URL', async (t) => {
  const image = process.env.AGENTHOLD_E2E_AGENT_IMAGE || 'agenthold/agent:bookworm';
  const missing = await dockerMissing(image);
  if (missing) {
    if (process.env.AGENTHOLD_DOCKER_TESTS === 'require') assert.fail(`the Docker preview test cannot run: ${missing}`);
    t.skip(missing);
    return;
  }
  const server = await startServer({ docker: { image } });
  let context;
  let agent;
  try {
    agent = await server.runningAgent('pyweb');
    const nonce = randomBytes(6).toString('hex');
    const script = `mkdir -p /tmp/site && printf '<!doctype html><title>py</title><h1 id="hello">python %s</h1>' ${nonce} > /tmp/site/index.html && cd /tmp/site && exec python3 -m http.server 8000 --bind 127.0.0.1`;
    await server.apiJson('POST', `/agents/${agent.id}/processes`, { command: ['sh', '-c', script], tag: 'http' });
    await until('port 8000 listening in the sandbox', async () => (await server.apiJson('GET', `/agents/${agent.id}/ports`)).some((p) => p.port === 8000), {
      timeout: 60_000,
      interval: 250,
    });

    const ui = `http://localhost:${new URL(server.url).port}`;
    context = await ctx.b.browser.newContext({ baseURL: ui, viewport: { width: 1280, height: 720 } });
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    await signIn(page, server.token);
    await openPorts(page, agent);
    await portRow(page, 8000).waitFor();
    const tab = await openPreview(page, 8000, (t2) => t2.locator('#hello').filter({ hasText: `python ${nonce}` }).waitFor({ timeout: 60_000 }));
    assert.equal(tab.url(), `http://8000-pyweb.localhost:${server.previewsPort}/`);
    await server.apiJson('DELETE', `/agents/${agent.id}`);
    await until('pyweb destroyed', async () => (await server.api('GET', `/agents/${agent.id}`)).status === 404, { timeout: 60_000, interval: 250 });
    agent = null;
  } catch (e) {
    throw new Error(`${e.message}\n--- server log ---\n${server.log().slice(-6000)}`);
  } finally {
    await context?.close();
    if (agent) await server.api('DELETE', `/agents/${agent.id}`).catch(() => {});
    await server.stop();
  }
});

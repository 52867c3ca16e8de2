import { openBrowser, signIn, startServer } from './harness.mjs';
const server = await startServer();
const b = await openBrowser(server);
try {
  const agent = await server.runningAgent('dl');
  console.log((await server.api('PUT', `/agents/${agent.id}/fs/write?path=dl.txt`, 'hello\n')).status);
  await signIn(b.page, server.token);
  await b.page.goto(`/agents/${agent.id}#files`);
  await b.page.getByText('dl.txt').waitFor();
  b.page.on('request', (r) => console.log('req', r.url()));
  b.page.on('response', (r) => console.log('res', r.status(), r.url(), JSON.stringify(r.headers())));
  b.page.on('download', (d) => console.log('download', d.suggestedFilename()));
  b.page.on('framenavigated', (f) => console.log('nav', f.url()));
  await b.page.getByRole('link', { name: 'Download dl.txt' }).click();
  await b.page.waitForTimeout(3000);
  console.log(b.page.url());
  console.log(b.consoleErrors.join('\n'));
} finally {
  await b.browser.close();
  await server.stop();
}

import { openBrowser, signIn, startServer } from './harness.mjs';
const server = await startServer();
const b = await openBrowser(server);
try {
  await server.apiJson('POST', '/agents', { name: 'alpha' });
  await server.apiJson('POST', '/agents', { name: 'beta-with-a-long-name', cpus: 1, memoryMb: 1536 });
  await signIn(b.page, server.token);
  await b.page.waitForTimeout(1500);
  await b.page.screenshot({ path: '/tmp/shots/agents.png' });
  await b.page.locator('#new-name').fill('BAD NAME');
  await b.page.getByRole('button', { name: 'Create agent' }).click();
  await b.page.waitForTimeout(800);
  await b.page.screenshot({ path: '/tmp/shots/agents-err.png' });
  await b.page.locator('[data-testid="agent-row"]').first().getByRole('link', { name: /Open/ }).click();
  await b.page.waitForTimeout(1500);
  await b.page.screenshot({ path: '/tmp/shots/agent.png' });
  await b.page.emulateMedia({ colorScheme: 'dark' });
  await b.page.getByRole('tab', { name: 'Files' }).click();
  await b.page.waitForTimeout(500);
  await b.page.screenshot({ path: '/tmp/shots/agent-files-dark.png' });
  console.log(b.consoleErrors.join('\n'));
} finally {
  await b.browser.close();
  await server.stop();
}

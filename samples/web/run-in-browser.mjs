// Opens the sample page in headless Chromium (Debian's, through playwright-core), waits for it to finish,
// saves a screenshot and prints window.edgeportResult as JSON. Used by tests/test_web.py; works offline.
// usage: node run-in-browser.mjs URL SCREENSHOT.png [CHROMIUM_PATH]
import {mkdtempSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {chromium} from 'playwright-core';

const [url, screenshot, executablePath = '/usr/bin/chromium'] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), 'edgeport-chromium-'));
// Flags seen working as root with no network; the profile is fresh so nothing carries over between runs.
const args = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];
const context = await chromium.launchPersistentContext(profile, {executablePath, headless: true, args});
const log = [];
try {
  const page = await context.newPage();
  // LiteRT.js logs INFO lines (no WebGPU/NPU) as console errors: keep them for diagnosis, do not fail on them.
  page.on('console', (msg) => log.push(`${msg.type()}: ${msg.text()}`));
  page.on('pageerror', (err) => log.push(`pageerror: ${err.message}`));
  await page.goto(url);
  await page.waitForSelector('body[data-state]', {timeout: 120_000});
  await page.screenshot({path: screenshot, fullPage: true});
  const result = await page.evaluate(() => window.edgeportResult);
  // What the outputs table shows, and any element in it other than the table's own (markup from a name).
  const table = await page.evaluate(() => {
    const t = document.getElementById('outputs');
    const own = new Set(['tbody', 'tr', 'th', 'td']);
    return {text: t.innerText, elements: [...t.querySelectorAll('*')].map((e) => e.localName).filter((n) => !own.has(n))};
  });
  process.stdout.write(JSON.stringify({...result, crossOriginIsolated: await page.evaluate(() => crossOriginIsolated), table, log}));
} catch (error) {
  process.stdout.write(JSON.stringify({error: String(error), log}));
  process.exitCode = 1;
} finally {
  await context.close();
  rmSync(profile, {recursive: true, force: true});
}

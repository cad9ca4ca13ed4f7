// The playground page (GET /) in headless Chromium: load it, send a chat
// request, check the rendered answer equals the same request's answer
// through the API, and that the canvas replay shows a step mid-diffusion.
// run.sh runs it when Chromium is installed (Debian's chromium package);
// PLAYGROUND_SCREENSHOT=path saves a screenshot of the canvas mid-diffusion.
import { test } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const base = process.env.DLMCACHE_URL;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
if (!base) throw new Error("DLMCACHE_URL is not set: run serve/e2e/run.sh (or make e2e)");

test("the playground renders a streamed answer and its canvas", async () => {
  const browser = await chromium.launch({
    executablePath,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(base + "/");
    assert.match(await page.title(), /dlmcache playground/);
    const system = await page.inputValue("#system");
    const user = await page.inputValue("#user");
    await page.click("#send");
    await page.waitForSelector('#answer[data-done="1"]', { timeout: 60_000 });
    const shown = await page.textContent("#answer");
    const api = await (await fetch(`${base}/v1/chat/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "system", content: system }, { role: "user", content: user }] }),
    })).json();
    assert.equal(shown, api.choices[0].message.content, "the page shows the API's answer");
    // The request's statistics and the live metrics are rendered.
    assert.match(await page.textContent("#stats"), /shared-prefix ratio/);
    await page.waitForFunction(() => document.querySelector("#metrics").textContent.includes("prefix hit tokens"));
    // Replay to the middle of the diffusion: some slots still masked.
    const steps = Number(await page.getAttribute("#scrub", "max"));
    assert.ok(steps >= 2, `${steps} steps`);
    await page.$eval("#scrub", (el, k) => { el.value = String(k); el.dispatchEvent(new Event("input")); }, Math.ceil(steps / 2));
    const masked = await page.$$eval("#canvas .slot.masked", (els) => els.length);
    const all = await page.$$eval("#canvas .slot", (els) => els.length);
    assert.ok(masked > 0 && masked < all, `mid-diffusion: ${masked} of ${all} slots masked`);
    if (process.env.PLAYGROUND_SCREENSHOT) await page.screenshot({ path: process.env.PLAYGROUND_SCREENSHOT, fullPage: true });
  } finally {
    await browser.close();
  }
});

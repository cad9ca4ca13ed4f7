// End-to-end test of `dlmcache serve --api-key` with the official openai
// npm client: run.sh starts a server with a key on the command line and two
// in a key file, and sets DLMCACHE_URL and DLMCACHE_KEYS (comma-separated).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.DLMCACHE_URL;
const keys = (process.env.DLMCACHE_KEYS || "").split(",").filter(Boolean);
if (!base || keys.length === 0) throw new Error("DLMCACHE_URL and DLMCACHE_KEYS are not set: run serve/e2e/run.sh (or make e2e)");

const client = (apiKey) => new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
const ask = (c) => c.chat.completions.create({ model: "tiny-bf16", messages: [{ role: "user", content: "Say hi." }], max_tokens: 8 });

test("without a valid key: 401 in OpenAI's shape", async () => {
  // No key at all (the client insists on one, so plain fetch).
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "Say hi." }] }),
  });
  assert.equal(res.status, 401);
  const body = await res.json();
  assert.equal(body.error.code, "invalid_api_key");
  assert.equal(body.error.type, "invalid_request_error");
  for (const key of ["sk-wrong", keys[0] + "x"]) {
    await assert.rejects(ask(client(key)), (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, `${key}: ${err}`);
      assert.equal(err.status, 401);
      assert.equal(err.code, "invalid_api_key");
      assert.equal(err.type, "invalid_request_error");
      return true;
    });
  }
  await assert.rejects(client("sk-wrong").models.list(), (err) => err.status === 401);
});

test("with each key: 200", async () => {
  for (const key of keys) {
    const r = await ask(client(key));
    assert.equal(r.object, "chat.completion");
    assert.equal(r.model, "tiny-bf16");
    const models = await client(key).models.list();
    assert.deepEqual(models.data.map((m) => m.id), ["tiny-bf16"]);
  }
});

test("the health check is open", async () => {
  const res = await fetch(`${base}/health`);
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.equal(body.model, "tiny-bf16");
});

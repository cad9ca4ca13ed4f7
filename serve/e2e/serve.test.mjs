// End-to-end test of `dlmcache serve` with the official openai npm client.
// run.sh starts the server and sets DLMCACHE_URL; run it with `make e2e`.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.DLMCACHE_URL;
if (!base) throw new Error("DLMCACHE_URL is not set: run serve/e2e/run.sh (or make e2e)");

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "not-needed", maxRetries: 0, timeout: 30_000 });
const system = "You are a terse assistant. You answer every question in one short sentence.";

// metric reads one sample of /metrics (labels as Prometheus writes them:
// in name order).
async function metric(name) {
  const page = await (await fetch(`${base}/metrics`)).text();
  const line = page.split("\n").find((l) => l.startsWith(name + " "));
  assert.ok(line, `metric ${name} missing from /metrics`);
  return Number(line.slice(name.length + 1));
}

let first;

test("chat completion", async () => {
  first = await client.chat.completions.create({
    model: "tiny-bf16",
    messages: [
      { role: "system", content: system },
      { role: "user", content: "Say hi." },
    ],
    max_tokens: 16,
  });
  assert.equal(first.object, "chat.completion");
  assert.match(first.id, /^chatcmpl-/);
  assert.equal(first.choices.length, 1);
  assert.equal(first.choices[0].message.role, "assistant");
  assert.equal(typeof first.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(first.choices[0].finish_reason));
  const u = first.usage;
  assert.ok(u.prompt_tokens > 0);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.ok(first.dlmcache.prefix_tokens > 0, "the system message is the shared prefix");
  assert.equal(first.dlmcache.gen_length, 16);
});

test("a second request with the same system message hits the prefix store", async () => {
  const hits = await metric("dlmcache_prefix_cache_hits_tokens_total");
  const queries = await metric("dlmcache_prefix_cache_queries_tokens_total");
  const second = await client.chat.completions.create({
    model: "tiny-bf16",
    messages: [
      { role: "system", content: system },
      { role: "user", content: "Now say bye, politely." },
    ],
  });
  assert.equal(second.dlmcache.prefix_hit, true);
  assert.equal(second.dlmcache.prefix_tokens, first.dlmcache.prefix_tokens);
  assert.equal(await metric("dlmcache_prefix_cache_hits_tokens_total"), hits + first.dlmcache.prefix_tokens);
  assert.equal(await metric("dlmcache_prefix_cache_queries_tokens_total"), queries + first.dlmcache.prefix_tokens);
  assert.ok((await metric('dlmcache_prefix_requests_total{hit="true"}')) >= 1);
});

test("text completion with a shared system prefix", async () => {
  const c = await client.completions.create({ model: "tiny-bf16", prompt: "Once upon a time", max_tokens: 8, system: "Stories: " });
  assert.equal(c.object, "text_completion");
  assert.equal(typeof c.choices[0].text, "string");
  assert.equal(c.dlmcache.gen_length, 8);
});

test("malformed requests get a clear 4xx through the client", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "tiny-bf16", messages: [{ role: "tool", content: "x", tool_call_id: "1" }] }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `want BadRequestError, got ${err}`);
      assert.equal(err.status, 400);
      assert.equal(err.param, "messages[0].role");
      assert.match(err.message, /role "tool" is not supported/);
      return true;
    },
  );
  await assert.rejects(
    client.chat.completions.create({ model: "tiny-bf16", messages: [{ role: "user", content: "hi" }], max_tokens: "many" }),
    (err) => err instanceof OpenAI.BadRequestError && err.param === "max_tokens",
  );
  const raw = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"messages": [' });
  assert.equal(raw.status, 400);
  const body = await raw.json();
  assert.equal(body.error.type, "invalid_request_error");
  assert.match(body.error.message, /not valid JSON/);
});

test("the OpenAI contract: max_tokens caps, stop cuts, tools are refused", async () => {
  const messages = [
    { role: "system", content: system },
    { role: "user", content: "Say hi." },
  ];
  const capped = await client.chat.completions.create({ model: "tiny-bf16", messages, max_tokens: 5 });
  assert.ok(capped.usage.completion_tokens <= 5, `max_tokens 5 gave ${capped.usage.completion_tokens} completion tokens`);
  // The fixture (random weights) fills every slot: the cap is what ends it.
  assert.equal(capped.choices[0].finish_reason, "length");
  // gen_length fixes the slots, so the capped answer is a prefix of the uncapped one.
  const full = await client.chat.completions.create({ model: "tiny-bf16", messages, gen_length: 16 });
  const cut = await client.chat.completions.create({ model: "tiny-bf16", messages, gen_length: 16, max_tokens: 5 });
  assert.ok(full.choices[0].message.content.startsWith(cut.choices[0].message.content));
  const text = full.choices[0].message.content;
  const chars = [...text];
  assert.ok(chars.length >= 4, `answer ${JSON.stringify(text)} too short to cut`);
  const stop = chars.slice(2, 4).join("");
  const stopped = await client.chat.completions.create({ model: "tiny-bf16", messages, gen_length: 16, stop: [stop] });
  assert.equal(stopped.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(stopped.choices[0].finish_reason, "stop");
  await assert.rejects(
    client.chat.completions.create({
      model: "tiny-bf16", messages,
      tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } }],
    }),
    (err) => err instanceof OpenAI.BadRequestError && err.param === "tools",
  );
  await assert.rejects(
    client.chat.completions.create({ model: "tiny-bf16", messages, response_format: { type: "json_object" } }),
    (err) => err instanceof OpenAI.BadRequestError && err.param === "response_format",
  );
  const health = await fetch(`${base}/health`);
  assert.equal(health.status, 200);
});

test("streaming: every block's text, the usage and [DONE] through the client", async () => {
  const messages = [
    { role: "system", content: system },
    { role: "user", content: "Say hi." },
  ];
  // 32 slots in blocks of 8 (the fixture's default block): four blocks.
  const whole = await client.chat.completions.create({ model: "tiny-bf16", messages, gen_length: 32 });
  const stream = await client.chat.completions.create({
    model: "tiny-bf16", messages, gen_length: 32, stream: true, stream_options: { include_usage: true },
  });
  let text = "", chunks = 0, finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) { text += c.delta.content; chunks++; }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  // The client's iterator ends at data: [DONE]; a stream without it would hang or throw.
  assert.equal(role, "assistant");
  assert.equal(text, whole.choices[0].message.content, "the streamed deltas join to the unstreamed answer");
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.ok(chunks >= 1 && chunks <= 4, `${chunks} content chunks for four blocks`);
  assert.deepEqual(usage, whole.usage);
  // The raw stream ends with [DONE].
  const raw = await fetch(`${base}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 8, stream: true }),
  });
  assert.match(raw.headers.get("content-type"), /text\/event-stream/);
  assert.match(await raw.text(), /data: \[DONE\]\n\n$/);
});

test("the server is still healthy and serving", async () => {
  const h = await fetch(`${base}/healthz`);
  assert.equal(h.status, 200);
  const again = await client.chat.completions.create({
    model: "tiny-bf16",
    messages: [
      { role: "system", content: system },
      { role: "user", content: "Say hi." },
    ],
    max_tokens: 16,
  });
  assert.equal(again.choices[0].message.content, first.choices[0].message.content, "same request, same greedy answer");
  assert.ok((await metric('dlmcache_requests_total{code="400",endpoint="/v1/chat/completions"}')) >= 4);
});

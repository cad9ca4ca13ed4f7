// Compares dlmcache's tokenizer ids, decoded texts and chat-template renders
// (written by `go run ./tools/hfcheck DIR...`) with Hugging Face's own
// implementations: @huggingface/tokenizers (JavaScript) and tokenizers (the
// Rust library's Node binding, what Python's transformers runs) for the ids,
// @huggingface/tokenizers for the decoded text (clean_up_tokenization_spaces
// off, as dlmcache never cleans up), @huggingface/jinja for the templates.
// Prints the counts compared; exits 1 on any disagreement.
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";

const require = createRequire(import.meta.url);
let rust = null;
try {
  rust = require("tokenizers");
} catch (e) {
  console.error(`hfcheck: WARNING: the Rust tokenizers binding did not load (${e.message.split("\n")[0]}); ids are compared with @huggingface/tokenizers only`);
}

const cases = JSON.parse(readFileSync(process.argv[2] ?? 0, "utf8"));
let ids = 0, strings = 0, decodes = 0, renders = 0, bad = 0, rustStrings = 0, jsDeparts = 0;
const tokenText = (t) => (t == null ? "" : typeof t === "string" ? t : t.content ?? "");
const show = (s) => JSON.stringify(s).replace(/[^\x20-\x7e]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const disagree = (msg) => {
  bad++;
  if (bad <= 40) console.error(msg);
};

for (const tc of cases) {
  const tokText = readFileSync(join(tc.dir, "tokenizer.json"), "utf8");
  const tokJSON = JSON.parse(tokText);
  const cfgPath = join(tc.dir, "tokenizer_config.json");
  const cfg = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {};
  const tok = new Tokenizer(tokJSON, cfg);
  let rtok = rust ? rust.Tokenizer.fromString(tokText) : null;
  // Rust numbers added tokens from the vocab's size on, whatever ids the
  // file gives them; where the file's added ids leave a gap (the small test
  // tokenizers'), its ids are mapped back to the file's. Where that
  // numbering lands on ids the vocab itself uses (tiny-dream: its added
  // tokens sit between the bytes and the merged tokens), Rust cannot load
  // the file faithfully and only JavaScript checks it.
  const renumber = new Map();
  const vocabIds = new Set(Object.values(tokJSON.model?.vocab ?? {}));
  for (const a of rtok ? tokJSON.added_tokens ?? [] : []) {
    const r = rtok.tokenToId(a.content);
    if (r !== a.id) renumber.set(r, a.id);
  }
  if ([...renumber.keys()].some((r) => vocabIds.has(r))) {
    console.log(`hfcheck: ${tc.dir}: the Rust binding gives added tokens ids of the vocab's own tokens; compared with JavaScript only`);
    rtok = null;
  }
  for (const c of tc.encode) {
    const js = tok.encode(c.text, { add_special_tokens: false }).ids;
    strings++;
    ids += js.length;
    let ref = js, refName = "HF JavaScript";
    if (rtok) {
      const r = (await rtok.encode(c.text, null, { addSpecialTokens: false })).getIds().map((i) => renumber.get(i) ?? i);
      rustStrings++;
      if (!same(r, js)) {
        // The two Hugging Face implementations differ: Rust is the one
        // transformers runs. (@huggingface/tokenizers' ByteLevel regex uses
        // JavaScript's \s, which has U+FEFF and lacks U+0085, unlike
        // Oniguruma's.)
        jsDeparts++;
        if (jsDeparts <= 3) console.log(`hfcheck: note: HF JavaScript and HF Rust differ on ${show(c.text)} in ${tc.dir}; dlmcache is held to Rust`);
        ref = r;
        refName = "HF Rust";
      }
    }
    if (!same(ref, c.ids)) {
      disagree(`DISAGREE ${tc.dir}: ids of ${show(c.text)}\n  dlmcache       ${JSON.stringify(c.ids)}\n  ${refName.padEnd(14)} ${JSON.stringify(ref)}`);
    }
    const text = c.ids.length ? tok.decode(c.ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
    if (text !== c.decoded) {
      disagree(`DISAGREE ${tc.dir}: decode of ${JSON.stringify(c.ids)}\n  dlmcache       ${show(c.decoded)}\n  HF JavaScript  ${show(text)}`);
    }
  }
  for (const c of tc.decode) {
    decodes++;
    const js = tok.decode(c.ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    if (js !== c.text) {
      disagree(`DISAGREE ${tc.dir}: decode of ${JSON.stringify(c.ids)}\n  dlmcache       ${show(c.text)}\n  HF JavaScript  ${show(js)}`);
    }
    if (rtok) {
      const inv = new Map([...renumber].map(([r, f]) => [f, r]));
      const r = await rtok.decode(c.ids.map((i) => inv.get(i) ?? i), false);
      if (r !== c.text) {
        disagree(`DISAGREE ${tc.dir}: decode of ${JSON.stringify(c.ids)}\n  dlmcache       ${show(c.text)}\n  HF Rust        ${show(r)}`);
      }
    }
  }
  if (cfg.chat_template) {
    const tpl = new Template(cfg.chat_template);
    for (const c of tc.chat) {
      const want = tpl.render({
        messages: c.messages,
        bos_token: tokenText(cfg.bos_token),
        eos_token: tokenText(cfg.eos_token),
        add_generation_prompt: c.add_generation_prompt,
      });
      renders++;
      if (want !== c.rendered) {
        disagree(`DISAGREE ${tc.dir}: chat render of ${JSON.stringify(c.messages)} (generation prompt ${c.add_generation_prompt})\n  dlmcache ${show(c.rendered)}\n  HF       ${show(want)}`);
      }
    }
  }
}
const refs = rust
  ? `Hugging Face's Rust tokenizers (Node binding; ${rustStrings} of them) and @huggingface/tokenizers (JavaScript; it departs from Rust on ${jsDeparts}, where dlmcache is held to Rust)`
  : "@huggingface/tokenizers";
console.log(`hfcheck: ${cases.length} tokenizers, ${strings} strings (${ids} ids, and their decoded text) compared with ${refs}, ${decodes} random id lists decoded (with both where Rust loads the file), ${renders} chat renders with @huggingface/jinja: ${bad} disagreements`);
process.exit(bad ? 1 : 0);

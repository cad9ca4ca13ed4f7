// Compares dlmcache's tokenizer ids and chat-template renders (written by
// `go run ./tools/hfcheck DIR...`) with Hugging Face's JavaScript
// implementations: @huggingface/tokenizers for the ids, @huggingface/jinja
// for the templates. Prints the counts compared; exits 1 on any
// disagreement.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";

const cases = JSON.parse(readFileSync(process.argv[2] ?? 0, "utf8"));
let ids = 0, strings = 0, renders = 0, bad = 0;
const tokenText = (t) => (t == null ? "" : typeof t === "string" ? t : t.content ?? "");

for (const tc of cases) {
  const tokJSON = JSON.parse(readFileSync(join(tc.dir, "tokenizer.json"), "utf8"));
  const cfgPath = join(tc.dir, "tokenizer_config.json");
  const cfg = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {};
  const tok = new Tokenizer(tokJSON, cfg);
  for (const c of tc.encode) {
    const want = tok.encode(c.text, { add_special_tokens: false }).ids;
    strings++;
    ids += want.length;
    if (JSON.stringify(want) !== JSON.stringify(c.ids)) {
      bad++;
      console.error(`DISAGREE ${tc.dir}: ids of ${JSON.stringify(c.text)}\n  dlmcache ${JSON.stringify(c.ids)}\n  HF       ${JSON.stringify(want)}`);
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
        bad++;
        console.error(`DISAGREE ${tc.dir}: chat render of ${JSON.stringify(c.messages)} (generation prompt ${c.add_generation_prompt})\n  dlmcache ${JSON.stringify(c.rendered)}\n  HF       ${JSON.stringify(want)}`);
      }
    }
  }
}
console.log(`hfcheck: ${cases.length} tokenizers, ${strings} strings, ${ids} ids and ${renders} chat renders compared with @huggingface/tokenizers and @huggingface/jinja: ${bad} disagreements`);
process.exit(bad ? 1 : 0);

// Command hfcheck writes what dlmcache's tokenizer and chat templates make of
// a fixed corpus, for check.mjs to compare with Hugging Face's own
// JavaScript implementations (@huggingface/tokenizers, @huggingface/jinja):
//
//	go run ./tools/hfcheck DIR... > cases.json && node tools/hfcheck/check.mjs cases.json
//
// Each DIR holds tokenizer.json and tokenizer_config.json. `make hfcheck`
// runs both over the bundled tokenizer and the LLaDA-8B-shaped test
// tokenizer (LLaDA's split regex, added special tokens and chat template).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// corpus covers prose, code, digits, CJK, emoji, white space runs and the
// special tokens written in text.
var corpus = []string{
	"Hello world",
	"The registry for this session maps every name to a code. Answer from the registry only.",
	"* deli = equ\n* licens = nam\n* possib = dat",
	"Reply with ## followed by the code only.",
	"func main() {\n\tfmt.Println(\"hi\") // comment\n}\n",
	"for (let i = 0; i < n; i++) { sum += a[i] * b[i]; }",
	"x := map[string]int{\"a\": 1, \"b\": 2}",
	"3.14159 2718281828 1,000,000 0x1F 42nd 1e-9 -17 +4",
	"1234567890123456789012345678901234567890",
	"中文分词测试：你好，世界！",
	"日本語のテキストとカタカナ、ひらがな。",
	"한국어 문장입니다.",
	"emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ✨",
	"   leading spaces",
	"trailing spaces   ",
	"tabs\t\tand\nnew\n\n\nlines \r\n crlf",
	"a  b   c    d     e",
	"",
	" ",
	"\n",
	"<|startoftext|>text<|endoftext|>",
	"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
	"<|mdm_mask|><|mdm_mask|> mixed <|eot_id|>",
	"Ünïcödé àccents, ßtraße, naïve café, Ελληνικά, русский текст",
	"don't won't it's I'm you're we've they'll she'd",
	"URL: http://example.invalid/a/b?c=d&e=f#g",
	"Punctuation!!! ??? ... --- ___ *** ### @@@",
}

// conversations exercise the chat templates: an explicit empty system
// message, several turns, content with spaces to trim.
var conversations = [][]tokenizer.Message{
	{{Role: "user", Content: "Hi"}},
	{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
	{{Role: "system", Content: ""}, {Role: "user", Content: "Hi"}},
	{{Role: "system", Content: "  padded  "}, {Role: "user", Content: "\nline\n"}},
	{{Role: "system", Content: "S"}, {Role: "user", Content: "Q1"}, {Role: "assistant", Content: "A1"}, {Role: "user", Content: "Q2"}},
	{{Role: "user", Content: "中文 😀"}},
}

type encodeCase struct {
	Text string  `json:"text"`
	IDs  []int32 `json:"ids"`
}

type chatCase struct {
	Messages            []tokenizer.Message `json:"messages"`
	AddGenerationPrompt bool                `json:"add_generation_prompt"`
	Rendered            string              `json:"rendered"`
}

type tokenizerCases struct {
	Dir    string       `json:"dir"`
	Encode []encodeCase `json:"encode"`
	Chat   []chatCase   `json:"chat"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hfcheck TOKENIZER_DIR... > cases.json")
		os.Exit(2)
	}
	var out []tokenizerCases
	for _, dir := range os.Args[1:] {
		tok, err := tokenizer.Load(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hfcheck: %v\n", err)
			os.Exit(1)
		}
		abs, _ := filepath.Abs(dir)
		tc := tokenizerCases{Dir: abs}
		for _, s := range corpus {
			ids := tok.Encode(s)
			if ids == nil {
				ids = []int32{}
			}
			tc.Encode = append(tc.Encode, encodeCase{Text: s, IDs: ids})
		}
		for _, msgs := range conversations {
			for _, gen := range []bool{false, true} {
				r, err := tok.ApplyChat(msgs, gen)
				if err != nil {
					fmt.Fprintf(os.Stderr, "hfcheck: %s: %v\n", dir, err)
					os.Exit(1)
				}
				tc.Chat = append(tc.Chat, chatCase{Messages: msgs, AddGenerationPrompt: gen, Rendered: r})
			}
		}
		out = append(out, tc)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "hfcheck: %v\n", err)
		os.Exit(1)
	}
}

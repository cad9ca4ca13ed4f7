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
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

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
	"x'ſa 'S 'LL 'Ve 'x ''s I'M",
	"a\ufeffb \ufeff\ufeff c\u0085\u0085d e\u2028\u2029f g\u00a0\u00a0h i\u3000\u3000j\u2009k",
	"٣٤٥ ੩ ²³ ½ Ⅻ ⑫ 𝟙𝟚 1٢3",
	"cafe\u0301 n\u0303 e\u0301\u0301 ǅemal ʰʲ Å Å",
	"line\r\n\r\n  indented\r\n\t\ttabbed\n \n \n",
	"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nOK<|im_end|>",
	"x<|endoftext|>y <|im_start|> <|im_start <|im_end|><|im_end|>",
	"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
	"<|mask|><|mask|> and <|beginoftext|>",
}

// randomRunes are drawn from for the random strings: every class the
// pre-tokenizers tell apart (letters of several scripts and categories,
// combining marks, numbers, the contractions' letters, white space of
// several kinds, line breaks, symbols, emoji, format characters).
var randomRunes = []rune("aSsTtrReEvVmMlLdDxZ'’ſ \t\n\r\u0085\u00a0\u3000\u2028\u2009" +
	"é\u0301ǅʰ中文日本語한국ΩЖ٣੩²½Ⅻ0123456789.,;:!?-_#@*()[]{}<>/\\\"`~$%^&+=|😀👍🏽\u200d\ufeff")

// randomPieces are glued in whole now and then: contractions, runs of
// white space and line breaks, added tokens of the checked tokenizers.
var randomPieces = []string{"'s", "'LL", "'Re", "'ve", "'M", "'d", "'T", "\r\n", "  ", "\n\n", " \n",
	"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "<|eot_id|>", "<|mdm_mask|>", "<|mask|>"}

// randomTexts returns n seeded random strings (the same on every run).
func randomTexts(n int) []string {
	rng := rand.New(rand.NewSource(20250601))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for k := rng.Intn(40); k > 0; k-- {
			if rng.Intn(8) == 0 {
				b.WriteString(randomPieces[rng.Intn(len(randomPieces))])
			} else {
				b.WriteRune(randomRunes[rng.Intn(len(randomRunes))])
			}
		}
		out[i] = b.String()
	}
	return out
}

// documents are a few KB of the repository's own prose and code each.
var documents = []string{"README.md", "docs/architecture.md", "model/tokenizer/tokenizer.go"}

// conversations exercise the chat templates: an explicit empty system
// message, several turns, content with spaces to trim.
var conversations = [][]tokenizer.Message{
	{{Role: "user", Content: "Hi"}},
	{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
	{{Role: "system", Content: ""}, {Role: "user", Content: "Hi"}},
	{{Role: "system", Content: "  padded  "}, {Role: "user", Content: "\nline\n"}},
	{{Role: "system", Content: "S"}, {Role: "user", Content: "Q1"}, {Role: "assistant", Content: "A1"}, {Role: "user", Content: "Q2"}},
	{{Role: "user", Content: "中文 😀"}},
	{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Q1"},
		{Role: "assistant", Content: "<think>\nstep one\n</think>\n\nA1"}, {Role: "user", Content: "Q2"},
		{Role: "assistant", Content: "<think>\nmore\n</think>\n\nA2"}},
}

type encodeCase struct {
	Text    string  `json:"text"`
	IDs     []int32 `json:"ids"`
	Decoded string  `json:"decoded"` // Decode(IDs)
}

type chatCase struct {
	Messages            []tokenizer.Message `json:"messages"`
	AddGenerationPrompt bool                `json:"add_generation_prompt"`
	Rendered            string              `json:"rendered"`
}

type decodeCase struct {
	IDs  []int32 `json:"ids"`
	Text string  `json:"text"` // Decode(IDs)
}

type tokenizerCases struct {
	Dir    string       `json:"dir"`
	Encode []encodeCase `json:"encode"`
	Decode []decodeCase `json:"decode"`
	Chat   []chatCase   `json:"chat"`
}

// randomIDs returns n seeded random id lists: half of the ids single-rune
// (byte) tokens, so that many lists are not UTF-8 (cut characters, stray
// bytes), the rest any token, added tokens included.
func randomIDs(tok *tokenizer.Tokenizer, n int) [][]int32 {
	var all, bytes []int32
	for id := int32(0); int(id) < tok.VocabSize(); id++ {
		if s := tok.Token(id); s != "" {
			all = append(all, id)
			if utf8.RuneCountInString(s) == 1 {
				bytes = append(bytes, id)
			}
		}
	}
	rng := rand.New(rand.NewSource(7))
	out := make([][]int32, n)
	for i := range out {
		for k := 1 + rng.Intn(10); k > 0; k-- {
			pool := all
			if rng.Intn(2) == 0 {
				pool = bytes
			}
			out[i] = append(out[i], pool[rng.Intn(len(pool))])
		}
	}
	return out
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hfcheck TOKENIZER_DIR... > cases.json")
		os.Exit(2)
	}
	texts := append(append([]string(nil), corpus...), randomTexts(1000)...)
	for _, f := range documents {
		data, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hfcheck: %v\n", err)
			os.Exit(1)
		}
		texts = append(texts, strings.ToValidUTF8(string(data[:min(len(data), 6000)]), ""))
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
		for _, s := range texts {
			ids := tok.Encode(s)
			if ids == nil {
				ids = []int32{}
			}
			tc.Encode = append(tc.Encode, encodeCase{Text: s, IDs: ids, Decoded: tok.Decode(ids)})
		}
		for _, ids := range randomIDs(tok, 300) {
			tc.Decode = append(tc.Decode, decodeCase{IDs: ids, Text: tok.Decode(ids)})
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

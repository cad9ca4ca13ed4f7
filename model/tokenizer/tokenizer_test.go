package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func mustLoad(t *testing.T, dir string) *Tokenizer {
	t.Helper()
	tk, err := Load(filepath.Join("testdata", dir))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

var roundTripTexts = []string{
	"",
	"Hello world",
	"The theater is in the world.",
	"café naïve résumé — “quotes” 日本語のテキスト 😀👍🏽",
	"   leading, trailing   ",
	"runs     of      spaces\t\t\ttabs",
	"line one\nline two\n\n\n\nthree\r\nfour\n",
	"\n",
	" ",
	"numbers 0 12 123 1234567890 3.14159",
	"I'm sure it's what they've said, I'd think. DON'T",
	"<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
	"a<|mdm_mask|><|mdm_mask|>b",
	"<|eot_id|",
	"\x00\x01 control \x7f",
}

func TestRoundTrip(t *testing.T) {
	for _, dir := range []string{"gpt2", "llama3"} {
		tk := mustLoad(t, dir)
		for _, s := range roundTripTexts {
			ids := tk.Encode(s)
			if got := tk.Decode(ids); got != s {
				t.Errorf("%s: Decode(Encode(%q)) = %q (ids %v)", dir, s, got, ids)
			}
		}
	}
}

// TestEncodeMatchesReferenceEncoder compares Encode with tools/golden/bpe_ref.py, an independent
// plain-Python encoder (its regexes approximate \p{L}/\p{N}; the test
// strings are ASCII and Latin).
func TestEncodeMatchesReferenceEncoder(t *testing.T) {
	data, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden map[string][]struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"gpt2", "llama3", "trained"} {
		cases, ok := golden[dir]
		if !ok {
			t.Errorf("golden.json has no %q", dir)
			continue
		}
		tk := mustLoad(t, dir)
		for _, c := range cases {
			if got := tk.Encode(c.Text); !reflect.DeepEqual(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
				t.Errorf("%s: Encode(%q)\n got %v\nwant %v", dir, c.Text, got, c.IDs)
			}
		}
	}
}

func tokens(tk *Tokenizer, ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tk.Token(id)
	}
	return out
}

func TestEncodeKnown(t *testing.T) {
	tk := mustLoad(t, "gpt2")
	llama := mustLoad(t, "llama3")
	for _, c := range []struct {
		tk   *Tokenizer
		text string
		want []string
	}{
		{tk, "Hello world", []string{"Hello", "Ġworld"}},
		{tk, "hello the", []string{"he", "ll", "o", "Ġthe"}},
		{tk, "café", []string{"cafÃ©"}},
		{tk, "cafés", []string{"cafÃ©", "s"}},
		{tk, "aaaaa", []string{"aaaa", "a"}},
		{tk, "x  y", []string{"x", "Ġ", "Ġ", "y"}}, // \s+(?!\S) leaves one space for the word
		{tk, "a\n\n\nb", []string{"a", "ĊĊ", "Ċ", "b"}},
		{tk, "1234567", []string{"123", "4", "5", "6", "7"}},
		{llama, "1234567", []string{"123", "4", "5", "6", "7"}}, // \p{N}{1,3}
		{llama, "a\n\n\nb", []string{"a", "ĊĊ", "Ċ", "b"}},
		{tk, "<|eot_id|>x<|eot_id|>", []string{"<|eot_id|>", "x", "<|eot_id|>"}},
		{tk, "x <sep> y", []string{"x", "<sep>", "y"}}, // lstrip + rstrip
		{tk, "Hello<|startoftext|>Hello", []string{"Hello", "<|startoftext|>", "Hello"}},
	} {
		if got := tokens(c.tk, c.tk.Encode(c.text)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestNFC(t *testing.T) {
	tk := mustLoad(t, "gpt2") // NFC normalizer
	composed := tk.Encode("caf\u00e9")
	decomposed := tk.Encode("cafe\u0301")
	if !reflect.DeepEqual(composed, decomposed) {
		t.Errorf("NFC: %v != %v", composed, decomposed)
	}
	llama := mustLoad(t, "llama3") // no normalizer
	if reflect.DeepEqual(llama.Encode("caf\u00e9"), llama.Encode("cafe\u0301")) {
		t.Error("no normalizer, yet composed and decomposed é encode alike")
	}
}

func TestMergeForms(t *testing.T) {
	// The two fixtures hold the same merges, one as "a b" strings, the
	// other as [a, b] pairs.
	a, b := mustLoad(t, "gpt2"), mustLoad(t, "llama3")
	if !reflect.DeepEqual(a.mergeList, b.mergeList) || len(a.merges) != len(b.merges) {
		t.Fatal("string-form and pair-form merges differ")
	}
	if len(a.mergeList) < 30 {
		t.Fatalf("only %d merges read", len(a.mergeList))
	}
}

func TestTokenLookupsAndSpecialTokens(t *testing.T) {
	tk := mustLoad(t, "gpt2")
	// The fixture leaves 4 unused ids between the vocab and the 7 added
	// tokens.
	first, _ := tk.TokenID(TokenBOS)
	if got, want := tk.VocabSize(), int(first)+7; got != want || len(tk.vocab) != int(first)-4 {
		t.Errorf("VocabSize = %d, want %d (vocab %d, first added id %d)", got, want, len(tk.vocab), first)
	}
	if tk.Token(first-1) != "" || tk.Decode([]int32{first - 1, first - 4}) != "" {
		t.Errorf("unused id %d has token %q", first-1, tk.Token(first-1))
	}
	id, ok := tk.TokenID("<|eot_id|>")
	if !ok || tk.Token(id) != "<|eot_id|>" || !tk.IsSpecial(id) {
		t.Errorf("TokenID(<|eot_id|>) = %d, %v", id, ok)
	}
	id, ok = tk.TokenID("<sep>")
	if !ok || tk.IsSpecial(id) {
		t.Errorf("<sep>: id %d ok %v special %v", id, ok, tk.IsSpecial(id))
	}
	if id, ok := tk.TokenID("Ġworld"); !ok || tk.Token(id) != "Ġworld" {
		t.Errorf("TokenID(Ġworld) = %d, %v", id, ok)
	}
	if _, ok := tk.TokenID("nope"); ok {
		t.Error("TokenID(nope) found")
	}
	if tk.Token(-1) != "" || tk.Token(1<<20) != "" {
		t.Error("Token of an unknown id is not empty")
	}
	ids := tk.Encode("<|startoftext|>Hello<|eot_id|>")
	if got := tk.DecodeSkipSpecial(ids); got != "Hello" {
		t.Errorf("DecodeSkipSpecial = %q", got)
	}
	// A cut UTF-8 sequence decodes to U+FFFD.
	e := tk.Encode("é")
	if len(e) != 1 {
		t.Fatalf("é: %v", e)
	}
	if got := tk.Decode(tk.Encode("\xc3")); got != "\uFFFD" {
		t.Errorf("Decode of a lone lead byte = %q", got)
	}
}

// mutate loads testdata/gpt2/tokenizer.json as a generic map, applies f and
// parses the result.
func mutate(t *testing.T, f func(m map[string]any)) error {
	t.Helper()
	_, err := mutateTok(t, f)
	return err
}

func mutateTok(t *testing.T, f func(m map[string]any)) (*Tokenizer, error) {
	t.Helper()
	data, err := os.ReadFile("testdata/gpt2/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	data, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return parse(data, "tokenizer.json")
}

func TestUnsupportedTokenizerFeaturesAreRefusedByName(t *testing.T) {
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	for _, c := range []struct {
		name string
		f    func(m map[string]any)
		want string
	}{
		{"metaspace", func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁"} },
			`tokenizer.json: pre_tokenizer type "Metaspace" is not supported`},
		{"seq", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{m["pre_tokenizer"], map[string]any{"type": "Whitespace"}}}
		}, `tokenizer.json: pre_tokenizer.pretokenizers[1] type "Whitespace" is not supported`},
		{"no bytelevel", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Digits", "individual_digits": true}
		}, "no ByteLevel step"},
		{"null pre", func(m map[string]any) { m["pre_tokenizer"] = nil }, "pre_tokenizer is null"},
		{"wordpiece", func(m map[string]any) { model(m)["type"] = "WordPiece" }, `tokenizer.json: model type "WordPiece" is not supported`},
		{"byte fallback", func(m map[string]any) { model(m)["byte_fallback"] = true }, "byte_fallback"},
		{"dropout", func(m map[string]any) { model(m)["dropout"] = 0.1 }, "dropout"},
		{"prefix", func(m map[string]any) { model(m)["continuing_subword_prefix"] = "##" }, "continuing_subword_prefix"},
		{"model field", func(m map[string]any) { model(m)["frobnicate"] = 1 }, `tokenizer.json: model: field "frobnicate" is not supported`},
		{"top field", func(m map[string]any) { m["extra_stage"] = map[string]any{} }, `tokenizer.json: field "extra_stage" is not supported`},
		{"truncation", func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 5} }, "truncation"},
		{"normalizer", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "BertNormalizer"} },
			`tokenizer.json: normalizer type "BertNormalizer" is not supported`},
		{"decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} },
			`tokenizer.json: decoder type "WordPiece" is not supported`},
		{"post", func(m map[string]any) { m["post_processor"] = map[string]any{"type": "BertProcessing"} },
			`tokenizer.json: post_processor type "BertProcessing" is not supported`},
		{"bad merge", func(m map[string]any) { model(m)["merges"] = []any{"a b c"} }, "merges[0]"},
		{"merge not in vocab", func(m map[string]any) { model(m)["merges"] = []any{[]any{"x", "y"}} }, `merged token "xy" is not in the vocab`},
		{"split behavior", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "a"}, "behavior": "Sideways"}
		}, `behavior "Sideways"`},
		{"bad regex", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(a"}, "behavior": "Isolated"}
		}, "bad regex"},
		{"added clash", func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 0, "content": "Hello", "special": true}}
		}, "vocab gives it id"},
	} {
		err := mutate(t, c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
	// Harmless fields are accepted.
	if err := mutate(t, func(m map[string]any) {
		m["version"] = "1.0"
		m["padding"] = map[string]any{"strategy": "BatchLongest"}
		model(m)["ignore_merges"] = true
	}); err != nil {
		t.Errorf("harmless fields refused: %v", err)
	}
	if _, err := Load("testdata/nonexistent"); err == nil {
		t.Error("Load of a missing directory succeeded")
	}
}

func TestSplitBehaviors(t *testing.T) {
	re, err := compileRegexp2("-", "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		b      splitBehavior
		invert bool
		want   []string
	}{
		{behaviorRemoved, false, []string{"a", "b", "c"}},
		{behaviorIsolated, false, []string{"a", "-", "b", "-", "-", "c", "-"}},
		{behaviorMergedWithPrevious, false, []string{"a-", "b-", "-", "c-"}},
		{behaviorMergedWithNext, false, []string{"a", "-b", "-", "-c", "-"}},
		{behaviorContiguous, false, []string{"a", "-", "b", "--", "c", "-"}},
		{behaviorRemoved, true, []string{"-", "-", "-", "-"}},
	} {
		if got := regexSplit(nil, "a-b--c-", re, c.invert, c.b); !reflect.DeepEqual(got, c.want) {
			t.Errorf("behavior %d invert %v: %q, want %q", c.b, c.invert, got, c.want)
		}
	}
	d := digitsPre{individual: true}
	if got, want := d.split(nil, "ab12c3"), []string{"ab", "1", "2", "c", "3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Digits individual: %q", got)
	}
	d.individual = false
	if got, want := d.split(nil, "ab12c3"), []string{"ab", "12", "c", "3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Digits: %q", got)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tk := mustLoad(t, "gpt2")
	want := tk.Encode(roundTripTexts[3])
	done := make(chan bool)
	for g := 0; g < 4; g++ {
		go func() {
			ok := true
			for i := 0; i < 50; i++ {
				ok = ok && reflect.DeepEqual(tk.Encode(roundTripTexts[3]), want)
			}
			done <- ok
		}()
	}
	for g := 0; g < 4; g++ {
		if !<-done {
			t.Error("concurrent Encode disagrees")
		}
	}
}

func TestPrefixSpaceAndIgnoreMerges(t *testing.T) {
	tk, err := mutateTok(t, func(m map[string]any) {
		m["pre_tokenizer"].(map[string]any)["add_prefix_space"] = true
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each stretch between added tokens gets its own leading space.
	if got, want := tokens(tk, tk.Encode("world<|eot_id|>world")), []string{"Ġworld", "<|eot_id|>", "Ġworld"}; !reflect.DeepEqual(got, want) {
		t.Errorf("add_prefix_space: %q, want %q", got, want)
	}
	// ignore_merges: a word found whole in the vocab is one token even when
	// the merges would split it otherwise ("hello": he·ll·o by rank).
	plain := mustLoad(t, "gpt2")
	if got := tokens(plain, plain.Encode("hello")); len(got) != 3 {
		t.Fatalf("hello without ignore_merges: %q", got)
	}
	tk, err = mutateTok(t, func(m map[string]any) {
		m["model"].(map[string]any)["ignore_merges"] = true
		m["model"].(map[string]any)["vocab"].(map[string]any)["hello"] = 400.0
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tokens(tk, tk.Encode("hello")); !reflect.DeepEqual(got, []string{"hello"}) {
		t.Errorf("ignore_merges: %q", got)
	}
}

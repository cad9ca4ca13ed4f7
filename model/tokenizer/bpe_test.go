package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// handMade builds a byte-level BPE tokenizer.json from merges (each "a b"
// in rank order, over plain ASCII so that the byte-level forms are the
// letters themselves) and added tokens, with Qwen2's pre-tokenizer.
func handMade(t *testing.T, merges []string, added ...string) *Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	for _, m := range merges {
		var a, b string
		for i := range m {
			if m[i] == ' ' {
				a, b = m[:i], m[i+1:]
				break
			}
		}
		if _, ok := vocab[a+b]; !ok {
			vocab[a+b] = len(vocab)
		}
	}
	var at []map[string]any
	for i, s := range added {
		at = append(at, map[string]any{"id": len(vocab) + i, "content": s, "special": true})
	}
	doc := map[string]any{
		"version": "1.0", "added_tokens": at, "normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": PatternQwen2}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := parse(data, "hand-made tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestBPEMergeOrder: merges apply by rank, lowest first, the leftmost
// occurrence first among equal pairs, and a merge that only becomes
// possible after others still applies. Each case gives a different answer
// if the merges ran in list order reversed, left to right greedily, or
// rightmost first.
func TestBPEMergeOrder(t *testing.T) {
	for _, c := range []struct {
		merges []string
		text   string
		want   []string
	}{
		// "b c" outranks "a b": a·bc, not ab·c (left-to-right greed).
		{[]string{"b c", "a b"}, "abc", []string{"a", "bc"}},
		{[]string{"a b", "b c"}, "abc", []string{"ab", "c"}},
		// Equal pairs: the leftmost merges first: aa·a, not a·aa.
		{[]string{"a a"}, "aaa", []string{"aa", "a"}},
		{[]string{"a a", "aa aa"}, "aaaaa", []string{"aaaa", "a"}},
		// A chain: cd, then b+cd, then a+bcd (rank 2 "a b" never gets its
		// chance because b is taken by rank 1 first).
		{[]string{"c d", "b cd", "a b", "a bcd"}, "abcd", []string{"abcd"}},
		{[]string{"c d", "a b", "b cd", "a bcd"}, "abcd", []string{"ab", "cd"}},
		// Merges never cross pre-tokenizer pieces: "b c" cannot join "ab"
		// and " c" (Qwen2's split: "ab", " c").
		{[]string{"b Ġ", "Ġ c", "a b"}, "ab c", []string{"ab", "Ġc"}},
		// Digits are single pieces in Qwen2's split: no "1 2" merge applies.
		{[]string{"1 2"}, "12", []string{"1", "2"}},
	} {
		tk := handMade(t, c.merges)
		if got := tokens(tk, tk.Encode(c.text)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("merges %q: Encode(%q) = %q, want %q", c.merges, c.text, got, c.want)
		}
	}
}

// TestBPEAddedTokensInText: added tokens are split out of the raw text
// before the BPE, leftmost and longest first, and no merge crosses them.
func TestBPEAddedTokensInText(t *testing.T) {
	tk := handMade(t, []string{"a b", "ab c", "< |"}, "<|x|>", "<|x|>y", "<|z|>")
	for _, c := range []struct {
		text string
		want []string
	}{
		{"ab<|x|>c", []string{"ab", "<|x|>", "c"}},
		{"a<|x|>bc", []string{"a", "<|x|>", "b", "c"}},       // a·b split by the token
		{"abc<|x|>yabc", []string{"abc", "<|x|>y", "abc"}},   // longest added token
		{"<|x|<|z|>", []string{"<|", "x", "|", "<|z|>"}},     // an unfinished token is text
		{"<|z|><|z|>abc", []string{"<|z|>", "<|z|>", "abc"}}, // adjacent tokens
	} {
		if got := tokens(tk, tk.Encode(c.text)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
		}
		if back := tk.Decode(tk.Encode(c.text)); back != c.text {
			t.Errorf("Decode(Encode(%q)) = %q", c.text, back)
		}
	}
}

// TestBPEInvalidUTF8: bytes that are not UTF-8 still get their byte-level
// tokens (each a piece of its own, as U+FFFD would be a symbol) and merge
// with nothing across them; Decode gives U+FFFD for them.
func TestBPEInvalidUTF8(t *testing.T) {
	tk := handMade(t, []string{"a b", "Ã ©", "Ã ¿"})
	for _, c := range []struct {
		text string
		want []string
	}{
		{"ab\xffab", []string{"ab", "ÿ", "ab"}},
		{"\xc3\xa9", []string{"Ã©"}},         // é, valid: the merge applies
		{"\xc3ab", []string{"Ã", "ab"}},      // a cut sequence: no merge
		{"ab\xc3\xbf", []string{"ab", "Ã¿"}}, // ÿ, valid
		{"\xe4\xb8", []string{"ä", "¸"}},
	} {
		if got := tokens(tk, tk.Encode(c.text)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
		}
	}
	if got := tk.Decode(tk.Encode("ab\xffab")); got != "ab\uFFFDab" {
		t.Errorf("Decode of an invalid byte = %q", got)
	}
}

// TestVocabAndMergesScanner: the hand-written scanner of model.vocab and
// model.merges reads what encoding/json reads, escapes included, in both
// merge forms, on every test tokenizer and Qwen3's when installed.
func TestVocabAndMergesScanner(t *testing.T) {
	docs := map[string][]byte{
		"escaped": []byte(`{"model": {"vocab": {"\u0120": 0, "a\"b": 1, "\u0120a\"b": 2, "c\\d": 3, "x": 4, "c\\dx": 5},
			"merges": ["\u0120 a\"b" , ["c\\d", "x"]]}}`),
	}
	for _, f := range []string{"testdata/gpt2/tokenizer.json", "testdata/llama3/tokenizer.json", "testdata/trained/tokenizer.json", filepath.Join(qwen3Dir, "tokenizer.json")} {
		if data, err := os.ReadFile(f); err == nil {
			docs[f] = data
		}
	}
	for name, data := range docs {
		var want struct {
			Model struct {
				Vocab  map[string]int32  `json:"vocab"`
				Merges []json.RawMessage `json:"merges"`
			} `json:"model"`
		}
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var top struct {
			Model json.RawMessage `json:"model"`
		}
		json.Unmarshal(data, &top)
		m, err := scanObject(top.Model, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		vocab, err := parseVocab(m.m["vocab"], name)
		if err != nil || !reflect.DeepEqual(vocab, want.Model.Vocab) {
			t.Errorf("%s: vocab differs from encoding/json's (%v)", name, err)
		}
		merges, err := parseMerges(m.m["merges"], name)
		if err != nil || len(merges) != len(want.Model.Merges) {
			t.Fatalf("%s: %d merges, want %d (%v)", name, len(merges), len(want.Model.Merges), err)
		}
		for i, raw := range want.Model.Merges {
			var s string
			var pair [2]string
			if json.Unmarshal(raw, &s) == nil {
				pair[0], pair[1], _ = strings.Cut(s, " ")
			} else if err := json.Unmarshal(raw, &pair); err != nil {
				t.Fatal(err)
			}
			if merges[i] != pair {
				t.Errorf("%s: merges[%d] = %q, want %q", name, i, merges[i], pair)
				break
			}
		}
	}
}

// TestLossyUTF8: ill-formed UTF-8 decodes to one U+FFFD per maximal
// subpart, as Rust's String::from_utf8_lossy and the WHATWG decoder do
// (Go's strings.ToValidUTF8 would give one per run).
func TestLossyUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"ok é 😀":             "ok é 😀",
		"\xff\xff":           "\uFFFD\uFFFD",
		"\xe4\xb8":           "\uFFFD", // a cut 3-byte character
		"\xe4\xb8a\xe4":      "\uFFFDa\uFFFD",
		"\xf0\x9f\x98":       "\uFFFD",             // a cut emoji
		"\xed\xa0\x80":       "\uFFFD\uFFFD\uFFFD", // a surrogate: ED A0 is not a prefix
		"\xc0\xaf":           "\uFFFD\uFFFD",       // overlong
		"\xf4\x90\x80\x80":   "\uFFFD\uFFFD\uFFFD\uFFFD",
		"\xe0\x80":           "\uFFFD\uFFFD",
		"a\xef\xbf\xbdb\x80": "a\uFFFDb\uFFFD", // a real U+FFFD stays one
	} {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDecodePrefix: a character cut at the end is left out (not U+FFFD),
// and the Decode of any longer list starts with DecodePrefix's text.
func TestDecodePrefix(t *testing.T) {
	tk := mustLoad(t, "gpt2")
	b := func(bs ...byte) []int32 {
		var ids []int32
		for _, x := range bs {
			ids = append(ids, tk.byteID[x])
		}
		return ids
	}
	for _, c := range []struct {
		ids         []int32
		prefix, all string
	}{
		{b(0xe8, 0xb1), "", "\uFFFD"},
		{b('a', 0xe8), "a", "a\uFFFD"},
		{b('a', 0xe8, 0xb1, 0xb1), "a豱", "a豱"},
		{b(0xff), "\uFFFD", "\uFFFD"},
		{b(0xe0, 0x80), "\uFFFD\uFFFD", "\uFFFD\uFFFD"},
		{b(0xf0, 0x9f, 0x98), "", "\uFFFD"},
		{b('x', 0xc0), "x\uFFFD", "x\uFFFD"},
	} {
		if got := tk.DecodePrefix(c.ids); got != c.prefix {
			t.Errorf("DecodePrefix(%v) = %q, want %q", c.ids, got, c.prefix)
		}
		if got := tk.Decode(c.ids); got != c.all {
			t.Errorf("Decode(%v) = %q, want %q", c.ids, got, c.all)
		}
	}
	rng := rand.New(rand.NewSource(3))
	for n := 0; n < 2000; n++ {
		var ids []int32
		for k := rng.Intn(8); k >= 0; k-- {
			if rng.Intn(3) == 0 {
				ids = append(ids, int32(rng.Intn(tk.VocabSize())))
			} else {
				ids = append(ids, tk.byteID[0x80+rng.Intn(0x80)])
			}
		}
		all := tk.Decode(ids)
		for k := 0; k <= len(ids); k++ {
			if p := tk.DecodePrefix(ids[:k]); !strings.HasPrefix(all, p) {
				t.Fatalf("Decode(%v) = %q does not start with DecodePrefix of its first %d ids, %q", ids, all, k, p)
			}
		}
	}
}

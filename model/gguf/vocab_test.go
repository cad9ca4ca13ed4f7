package gguf

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// byteVocab is a "gpt2" vocabulary of the 256 byte-level tokens (id = byte) and the
// merged tokens of extra, with merges as given.
func byteVocab(merges []string, extra ...string) *Vocab {
	v := &Vocab{Model: "gpt2", Pre: "gpt-2", Merges: merges, BOS: -1, EOS: -1, UNK: -1, Pad: -1, Mask: -1, EOT: -1}
	for _, r := range byteLevelAlphabet() {
		v.Tokens = append(v.Tokens, string(r))
	}
	v.Tokens = append(v.Tokens, extra...)
	v.Types = make([]int32, len(v.Tokens))
	for i := range v.Types {
		v.Types[i] = TokenNormal
	}
	return v
}

// byteLevelAlphabet is GPT-2's byte → rune table, in byte order.
func byteLevelAlphabet() []rune {
	var bs []int
	for b := '!'; b <= '~'; b++ {
		bs = append(bs, int(b))
	}
	for b := 0xa1; b <= 0xac; b++ {
		bs = append(bs, b)
	}
	for b := 0xae; b <= 0xff; b++ {
		bs = append(bs, b)
	}
	out := make([]rune, 256)
	n := 0
	for b := range 256 {
		if slices.Contains(bs, b) {
			out[b] = rune(b)
		} else {
			out[b] = rune(256 + n)
			n++
		}
	}
	return out
}

// TestVocabMergesLlamaRules: the merges of a GGUF file become the
// tokenizer's as llama.cpp's loader (llama-vocab.cpp) reads them: split
// at the first space after the first byte; an entry without one (the
// [""] a llama.cpp-side writer puts in a file without merges) stands for
// the pair ("", ""), which never matches, and is dropped; a repeated pair
// keeps its first rank.
func TestVocabMergesLlamaRules(t *testing.T) {
	for _, c := range []struct {
		name   string
		merges []string
		want   []any
	}{
		{"none", nil, []any{}},
		{"empty array", []string{}, []any{}},
		{"llama.cpp's empty entry", []string{""}, []any{}},
		{"no space", []string{"ab", "a b"}, []any{"a b"}},
		{"leading space only", []string{" a"}, []any{}},
		{"repeat keeps the first rank", []string{"a b", "c d", "a b"}, []any{"a b", "c d"}},
		{"second token with a space", []string{"a b c", "ab c"}, []any{[]any{"a", "b c"}, "ab c"}},
		{"first token with a leading space", []string{" a b"}, []any{[]any{" a", "b"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tj, _, err := byteVocab(c.merges).TokenizerJSON()
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Model struct {
					Merges []any `json:"merges"`
				} `json:"model"`
			}
			if err := json.Unmarshal(tj, &doc); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(doc.Model.Merges)
			want, _ := json.Marshal(c.want)
			if string(got) != string(want) {
				t.Errorf("merges %s, want %s", got, want)
			}
		})
	}

	// A file as a llama.cpp-side writer leaves it ([""]) loads, and
	// tokenizes byte by byte; real merges after an empty entry apply.
	for _, c := range []struct {
		merges []string
		extra  []string
		want   []int32
	}{
		{[]string{""}, nil, []int32{'a', 'b'}},
		{[]string{"", "a b"}, []string{"ab"}, []int32{256}},
	} {
		tj, cfg, err := byteVocab(c.merges, c.extra...).TokenizerJSON()
		if err != nil {
			t.Fatal(err)
		}
		tok, err := tokenizer.Parse(tj, cfg, "test")
		if err != nil {
			t.Fatalf("merges %q: %v", c.merges, err)
		}
		if got := tok.Encode("ab"); !slices.Equal(got, c.want) {
			t.Errorf("merges %q: Encode(\"ab\") = %v, want %v", c.merges, got, c.want)
		}
	}
}

// TestVocabWritesMerges: KV writes tokenizer.ggml.merges even when there
// are none (an empty array: llama.cpp refuses a "gpt2" tokenizer without
// the key), and the file reads back.
func TestVocabWritesMerges(t *testing.T) {
	for _, merges := range [][]string{nil, {"a b"}} {
		v := byteVocab(merges)
		p := filepath.Join(t.TempDir(), "v.gguf")
		kv := append([]KV{{"general.architecture", String("llada")}}, v.KV()...)
		if err := Write(p, kv, nil, nil); err != nil {
			t.Fatal(err)
		}
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		x, ok := f.Get(KeyTokMerges)
		if !ok {
			t.Fatalf("merges %q: no %s written", merges, KeyTokMerges)
		}
		if s, ok := x.Strings(); !ok || x.Elem != TypeString || !slices.Equal(s, merges) && len(s)+len(merges) != 0 {
			t.Errorf("merges %q: %s is %s of %s %v", merges, KeyTokMerges, x.Type, x.Elem, s)
		}
		back, err := ReadVocab(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := back.TokenizerJSON(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

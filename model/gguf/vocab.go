package gguf

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// Tokenizer metadata keys as llama.cpp writes them.
const (
	KeyTokModel     = "tokenizer.ggml.model"
	KeyTokPre       = "tokenizer.ggml.pre"
	KeyTokTokens    = "tokenizer.ggml.tokens"
	KeyTokTypes     = "tokenizer.ggml.token_type"
	KeyTokMerges    = "tokenizer.ggml.merges"
	KeyTokBOS       = "tokenizer.ggml.bos_token_id"
	KeyTokEOS       = "tokenizer.ggml.eos_token_id"
	KeyTokUNK       = "tokenizer.ggml.unknown_token_id"
	KeyTokPad       = "tokenizer.ggml.padding_token_id"
	KeyTokMask      = "tokenizer.ggml.mask_token_id"
	KeyTokEOT       = "tokenizer.ggml.eot_token_id"
	KeyTokAddBOS    = "tokenizer.ggml.add_bos_token"
	KeyTokAddEOS    = "tokenizer.ggml.add_eos_token"
	KeyChatTemplate = "tokenizer.chat_template"
)

// Vocab is a GGUF file's tokenizer: a byte-level BPE ("gpt2" model in
// llama.cpp's terms) with its pre-tokenizer's name.
type Vocab struct {
	Model  string   // tokenizer.ggml.model; only "gpt2" is supported
	Pre    string   // tokenizer.ggml.pre: the pre-tokenizer's name
	Tokens []string // byte-level strings, by id
	Types  []int32  // Token* per token
	Merges []string // "a b", by rank
	// Special token ids, -1 when absent.
	BOS, EOS, UNK, Pad, Mask, EOT int
	AddBOS, AddEOS                *bool
	ChatTemplate                  string
}

// Pre-tokenizer names (tokenizer.ggml.pre) by the split they stand for in
// llama.cpp (llama-vocab.cpp): GPT-2's regex, or Llama 3's with merges
// ignored for whole-vocabulary words.
var (
	preGPT2 = []string{"gpt-2", "phi-2", "olmo", "mpt", "jina-es", "jina-de", "gigachat",
		"jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "trillion", "granite-docling"}
	preLlama3 = []string{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
		"midm-2.0", "lfm2", "jina-v5-nano"}
)

// llama3Regex is the split regex of Llama 3's tokenizer.json.
const llama3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func optInt(f *File, key string) (int, error) {
	v, ok := f.Get(key)
	if !ok {
		return -1, nil
	}
	i, ok := v.Int()
	if !ok {
		return 0, fmt.Errorf("%s is %s %v, want an integer", key, v.Type, v)
	}
	return int(i), nil
}

func optBool(f *File, key string) (*bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return nil, nil
	}
	b, ok := v.Bool()
	if !ok {
		return nil, fmt.Errorf("%s is %s %v, want a bool", key, v.Type, v)
	}
	return &b, nil
}

// ReadVocab reads the tokenizer metadata of f.
func ReadVocab(f *File) (*Vocab, error) {
	v := &Vocab{}
	str := func(key string, dst *string, required bool) error {
		x, ok := f.Get(key)
		if !ok {
			if required {
				return fmt.Errorf("no %s: the file carries no tokenizer", key)
			}
			return nil
		}
		s, ok := x.Str()
		if !ok {
			return fmt.Errorf("%s is %s, want a string", key, x.Type)
		}
		*dst = s
		return nil
	}
	if err := str(KeyTokModel, &v.Model, true); err != nil {
		return nil, err
	}
	if v.Model != "gpt2" {
		return nil, fmt.Errorf("%s %q is not supported (only \"gpt2\", byte-level BPE)", KeyTokModel, v.Model)
	}
	if err := str(KeyTokPre, &v.Pre, false); err != nil {
		return nil, err
	}
	if v.Pre == "" {
		v.Pre = "default"
	}
	if err := str(KeyChatTemplate, &v.ChatTemplate, false); err != nil {
		return nil, err
	}
	x, ok := f.Get(KeyTokTokens)
	if !ok {
		return nil, fmt.Errorf("no %s", KeyTokTokens)
	}
	if v.Tokens, ok = x.Strings(); !ok {
		return nil, fmt.Errorf("%s is %s of %s, want an array of strings", KeyTokTokens, x.Type, x.Elem)
	}
	v.Types = make([]int32, len(v.Tokens))
	for i := range v.Types {
		v.Types[i] = TokenNormal
	}
	if x, ok := f.Get(KeyTokTypes); ok {
		ts, ok := x.Ints()
		if !ok || len(ts) != len(v.Tokens) {
			return nil, fmt.Errorf("%s: want %d integers, one per token, got %s", KeyTokTypes, len(v.Tokens), x)
		}
		for i, t := range ts {
			v.Types[i] = int32(t)
		}
	}
	if x, ok := f.Get(KeyTokMerges); ok {
		if v.Merges, ok = x.Strings(); !ok {
			return nil, fmt.Errorf("%s is %s of %s, want an array of strings", KeyTokMerges, x.Type, x.Elem)
		}
	}
	var err error
	for _, s := range []struct {
		key string
		dst *int
	}{{KeyTokBOS, &v.BOS}, {KeyTokEOS, &v.EOS}, {KeyTokUNK, &v.UNK}, {KeyTokPad, &v.Pad}, {KeyTokMask, &v.Mask}, {KeyTokEOT, &v.EOT}} {
		if *s.dst, err = optInt(f, s.key); err != nil {
			return nil, err
		}
		if *s.dst >= len(v.Tokens) {
			return nil, fmt.Errorf("%s %d is outside the vocabulary (%d tokens)", s.key, *s.dst, len(v.Tokens))
		}
	}
	if v.AddBOS, err = optBool(f, KeyTokAddBOS); err != nil {
		return nil, err
	}
	if v.AddEOS, err = optBool(f, KeyTokAddEOS); err != nil {
		return nil, err
	}
	return v, nil
}

// KV returns the metadata entries that store v, in the order llama.cpp's
// converter writes them.
func (v *Vocab) KV() []KV {
	kv := []KV{
		{KeyTokModel, String(v.Model)},
		{KeyTokPre, String(v.Pre)},
		{KeyTokTokens, Strings(v.Tokens)},
		{KeyTokTypes, Int32s(v.Types)},
	}
	// Always written, an empty array when there are none: llama.cpp
	// refuses a "gpt2" tokenizer without the key ("cannot find tokenizer
	// merges in model file").
	merges := v.Merges
	if merges == nil {
		merges = []string{}
	}
	kv = append(kv, KV{KeyTokMerges, Strings(merges)})
	for _, s := range []struct {
		key string
		id  int
	}{{KeyTokBOS, v.BOS}, {KeyTokEOS, v.EOS}, {KeyTokUNK, v.UNK}, {KeyTokPad, v.Pad}, {KeyTokMask, v.Mask}, {KeyTokEOT, v.EOT}} {
		if s.id >= 0 {
			kv = append(kv, KV{s.key, Uint32(uint32(s.id))})
		}
	}
	if v.AddBOS != nil {
		kv = append(kv, KV{KeyTokAddBOS, Bool(*v.AddBOS)})
	}
	if v.AddEOS != nil {
		kv = append(kv, KV{KeyTokAddEOS, Bool(*v.AddEOS)})
	}
	if v.ChatTemplate != "" {
		kv = append(kv, KV{KeyChatTemplate, String(v.ChatTemplate)})
	}
	return kv
}

// llamaMerges turns GGUF merges into tokenizer.json's by llama.cpp's
// loader rules (llama-vocab.cpp): an entry splits at its first space
// after the first byte (the first token may begin with a space, the
// second holds the rest, spaces and all); an entry with no such space
// ("" — what a llama.cpp-side writer puts in a file without merges — or
// a single token) is the pair ("", ""), which no pair of symbols
// matches, and is left out; a repeated pair keeps its first rank (a
// std::map emplace), where a tokenizer.json's takes its last, so later
// repeats are left out too. Ranks keep their order. A pair whose tokens
// hold no space stays an "a b" string, the others become ["a", "b"].
func llamaMerges(merges []string) []any {
	out := make([]any, 0, len(merges))
	seen := make(map[[2]string]bool, len(merges))
	for _, m := range merges {
		i := strings.IndexByte(m[min(1, len(m)):], ' ')
		if i < 0 {
			continue
		}
		i += min(1, len(m))
		p := [2]string{m[:i], m[i+1:]}
		if seen[p] {
			continue
		}
		seen[p] = true
		if strings.Contains(p[0], " ") || strings.Contains(p[1], " ") {
			out = append(out, []string{p[0], p[1]})
		} else {
			out = append(out, m)
		}
	}
	return out
}

// TokenizerJSON renders v as a Hugging Face tokenizer.json and
// tokenizer_config.json that model/tokenizer reads: control and
// user-defined tokens become added tokens (special for control tokens),
// unused tokens (the [PADn] fillers llama.cpp's converter writes) are left
// out, and the pre-tokenizer is the one its name stands for in llama.cpp.
// Names this package does not know are refused.
func (v *Vocab) TokenizerJSON() (tokenizerJSON, configJSON []byte, err error) {
	var pre any
	ignoreMerges := false
	switch {
	case slices.Contains(preGPT2, v.Pre):
		pre = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	case slices.Contains(preLlama3, v.Pre):
		ignoreMerges = true
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": llama3Regex}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}}
	default:
		return nil, nil, fmt.Errorf("%s %q is not supported yet (supported: %s)", KeyTokPre, v.Pre,
			strings.Join(append(slices.Clone(preGPT2), preLlama3...), ", "))
	}
	vocab := map[string]int{}
	var added []tokenizer.AddedTokenJSON
	for i, t := range v.Tokens {
		switch v.Types[i] {
		case TokenControl, TokenUserDefined:
			added = append(added, tokenizer.AddedTokenJSON{ID: int32(i), Content: t, Special: v.Types[i] == TokenControl})
		case TokenUnused:
		case TokenNormal, TokenUnknown, TokenByte:
			if _, dup := vocab[t]; !dup {
				vocab[t] = i
			}
		default:
			return nil, nil, fmt.Errorf("%s[%d] is %d, not a llama.cpp token type", KeyTokTypes, i, v.Types[i])
		}
	}
	var unk any
	if v.UNK >= 0 {
		unk = v.Tokens[v.UNK]
	}
	merges := llamaMerges(v.Merges)
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	tok := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   added,
		"normalizer":     nil,
		"pre_tokenizer":  pre,
		"post_processor": nil,
		"decoder":        byteLevel,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false,
			"ignore_merges": ignoreMerges, "vocab": vocab, "merges": merges,
		},
	}
	if tokenizerJSON, err = json.MarshalIndent(tok, "", "  "); err != nil {
		return nil, nil, err
	}
	cfg := map[string]any{}
	if v.ChatTemplate != "" {
		cfg["chat_template"] = v.ChatTemplate
	}
	for _, s := range []struct {
		key string
		id  int
	}{{"bos_token", v.BOS}, {"eos_token", v.EOS}, {"pad_token", v.Pad}, {"unk_token", v.UNK}, {"mask_token", v.Mask}} {
		if s.id >= 0 {
			cfg[s.key] = v.Tokens[s.id]
		}
	}
	if v.AddBOS != nil {
		cfg["add_bos_token"] = *v.AddBOS
	}
	if v.AddEOS != nil {
		cfg["add_eos_token"] = *v.AddEOS
	}
	dec := map[string]tokenizer.AddedTokenJSON{}
	for _, a := range added {
		dec[strconv.Itoa(int(a.ID))] = a
	}
	cfg["added_tokens_decoder"] = dec
	if configJSON, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		return nil, nil, err
	}
	return tokenizerJSON, configJSON, nil
}

// VocabFromHF builds a Vocab from a Hugging Face tokenizer.json and
// tokenizer_config.json (may be nil) the way llama.cpp's converter does
// for LLaDA: ids 0..vocabSize-1, an id without a token becoming "[PADid]"
// of type unused, added tokens control (special) or user-defined, the rest
// normal; merges as "a b". The pre-tokenizer's name is recognised from the
// tokenizer.json's structure (GPT-2's ByteLevel split → "gpt-2", Llama 3's
// regex → "llama-bpe") where llama.cpp hashes a tokenization; others are
// refused. Special ids come from special (config.json's *_token_id,
// -1 when absent).
func VocabFromHF(tokenizerJSON, configJSON []byte, vocabSize int, special map[string]int) (*Vocab, error) {
	var tj struct {
		AddedTokens  []tokenizer.AddedTokenJSON `json:"added_tokens"`
		Normalizer   any                        `json:"normalizer"`
		PreTokenizer map[string]any             `json:"pre_tokenizer"`
		Model        struct {
			Type         string            `json:"type"`
			Vocab        map[string]int    `json:"vocab"`
			Merges       []json.RawMessage `json:"merges"`
			IgnoreMerges bool              `json:"ignore_merges"`
			ByteFallback bool              `json:"byte_fallback"`
		} `json:"model"`
	}
	if err := json.Unmarshal(tokenizerJSON, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %v", err)
	}
	if tj.Model.Type != "BPE" || tj.Model.ByteFallback {
		return nil, fmt.Errorf("tokenizer.json: model %q (byte_fallback %v): only byte-level BPE converts", tj.Model.Type, tj.Model.ByteFallback)
	}
	if tj.Normalizer != nil {
		return nil, fmt.Errorf("tokenizer.json: a normalizer is not supported by the conversion")
	}
	v := &Vocab{Model: "gpt2", BOS: -1, EOS: -1, UNK: -1, Pad: -1, Mask: -1, EOT: -1}
	pre, err := preName(tj.PreTokenizer, tj.Model.IgnoreMerges)
	if err != nil {
		return nil, err
	}
	v.Pre = pre
	byID := map[int]string{}
	for tok, id := range tj.Model.Vocab {
		byID[id] = tok
	}
	addedType := map[int]int32{}
	for _, a := range tj.AddedTokens {
		id := int(a.ID)
		byID[id] = a.Content
		addedType[id] = TokenUserDefined
		if a.Special {
			addedType[id] = TokenControl
		}
	}
	for id := range byID {
		if id < 0 || id >= vocabSize {
			return nil, fmt.Errorf("tokenizer.json: token id %d outside the model's vocabulary (%d)", id, vocabSize)
		}
	}
	for i := 0; i < vocabSize; i++ {
		tok, ok := byID[i]
		switch {
		case !ok:
			v.Tokens = append(v.Tokens, fmt.Sprintf("[PAD%d]", i))
			v.Types = append(v.Types, TokenUnused)
		case addedType[i] != 0:
			v.Tokens = append(v.Tokens, tok)
			v.Types = append(v.Types, addedType[i])
		default:
			v.Tokens = append(v.Tokens, tok)
			v.Types = append(v.Types, TokenNormal)
		}
	}
	for i, raw := range tj.Model.Merges {
		var s string
		var pair []string
		switch {
		case json.Unmarshal(raw, &s) == nil:
		case json.Unmarshal(raw, &pair) == nil && len(pair) == 2:
			if strings.Contains(pair[0], " ") || strings.Contains(pair[1], " ") {
				return nil, fmt.Errorf("tokenizer.json: merges[%d] holds a space, which GGUF's \"a b\" merges cannot carry", i)
			}
			s = pair[0] + " " + pair[1]
		default:
			return nil, fmt.Errorf("tokenizer.json: merges[%d]: want \"a b\" or [a, b]", i)
		}
		v.Merges = append(v.Merges, s)
	}
	ids := map[string]*int{"bos": &v.BOS, "eos": &v.EOS, "unk": &v.UNK, "pad": &v.Pad, "mask": &v.Mask}
	for name, dst := range ids {
		if id, ok := special[name]; ok && id >= 0 && id < vocabSize {
			*dst = id
		}
	}
	if configJSON != nil {
		var cfg map[string]json.RawMessage
		if err := json.Unmarshal(configJSON, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %v", err)
		}
		if raw, ok := cfg["chat_template"]; ok {
			if err := json.Unmarshal(raw, &v.ChatTemplate); err != nil {
				return nil, fmt.Errorf("tokenizer_config.json: chat_template: only a single template string converts")
			}
		}
		for _, b := range []struct {
			key string
			dst **bool
		}{{"add_bos_token", &v.AddBOS}, {"add_eos_token", &v.AddEOS}} {
			if raw, ok := cfg[b.key]; ok {
				var x bool
				if json.Unmarshal(raw, &x) == nil {
					*b.dst = &x
				}
			}
		}
	}
	return v, nil
}

// preName recognises a tokenizer.json pre_tokenizer as one llama.cpp names.
func preName(p map[string]any, ignoreMerges bool) (string, error) {
	isByteLevel := func(m map[string]any, regex bool) bool {
		r, _ := m["use_regex"].(bool)
		if _, has := m["use_regex"]; !has {
			r = true
		}
		aps, _ := m["add_prefix_space"].(bool)
		return m["type"] == "ByteLevel" && r == regex && !aps
	}
	if isByteLevel(p, true) && !ignoreMerges {
		return "gpt-2", nil
	}
	if p["type"] == "Sequence" {
		seq, _ := p["pretokenizers"].([]any)
		if len(seq) == 2 {
			split, _ := seq[0].(map[string]any)
			bl, _ := seq[1].(map[string]any)
			pat, _ := split["pattern"].(map[string]any)
			if split["type"] == "Split" && pat["Regex"] == llama3Regex && split["behavior"] == "Isolated" &&
				split["invert"] == false && bl != nil && isByteLevel(bl, false) && ignoreMerges {
				return "llama-bpe", nil
			}
		}
	}
	b, _ := json.Marshal(p)
	s := string(b)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return "", fmt.Errorf("tokenizer.json: pre_tokenizer %s is not one the conversion recognises (GPT-2's byte-level split, or Llama 3's regex with ignore_merges)", s)
}

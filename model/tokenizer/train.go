package tokenizer

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
)

// TrainOption adjusts Train.
type TrainOption func(*trainConfig)

type trainConfig struct {
	pattern  string
	minFreq  int64
	bos, eos string
	pad      string
	template string
	progress func(done, total int)
}

// WithPattern sets the pre-tokenization regex. The default, PatternGPT2, is
// written as a ByteLevel pre-tokenizer with use_regex; any other pattern
// (PatternLlama3, say) as Sequence[Split(pattern, Isolated),
// ByteLevel(use_regex false)], as Llama-3's tokenizer.json does.
func WithPattern(p string) TrainOption { return func(c *trainConfig) { c.pattern = p } }

// WithMinFrequency stops training when the most frequent pair occurs fewer
// than n times (default 2); the vocabulary is then smaller than asked.
func WithMinFrequency(n int) TrainOption { return func(c *trainConfig) { c.minFreq = int64(n) } }

// WithBOS, WithEOS and WithPad name the special tokens written as
// bos_token, eos_token and pad_token in tokenizer_config.json. By default
// they are LLaDA's "<|startoftext|>", "<|endoftext|>" and "<|endoftext|>"
// when those are among the specials.
func WithBOS(s string) TrainOption { return func(c *trainConfig) { c.bos = s } }

// WithEOS: see WithBOS.
func WithEOS(s string) TrainOption { return func(c *trainConfig) { c.eos = s } }

// WithPad: see WithBOS.
func WithPad(s string) TrainOption { return func(c *trainConfig) { c.pad = s } }

// WithChatTemplate sets the chat template written to tokenizer_config.json
// (default LLaDATemplate).
func WithChatTemplate(s string) TrainOption { return func(c *trainConfig) { c.template = s } }

// WithProgress has Train call fn after every 100 merges and at the end
// with the number of merges done and the number it aims at.
func WithProgress(fn func(done, total int)) TrainOption {
	return func(c *trainConfig) { c.progress = fn }
}

// Train learns a byte-level BPE from texts. Texts are split on the special
// tokens, then pre-tokenized exactly as the resulting tokenizer.json says
// (so Encode reproduces the training segmentation); words start as their
// bytes (token id = byte value, in GPT-2's byte-to-rune form) and the most
// frequent adjacent pair is merged repeatedly (ties: the pair with the
// smaller left id, then the smaller right id) until 256 + new tokens +
// len(specials) reaches vocabSize, or no pair is frequent enough. Special
// tokens take the ids right after the BPE vocabulary, in the order given.
//
// Pair counts are updated incrementally: a merge touches only the words
// that hold the pair, found through a per-pair word index.
func Train(texts []string, vocabSize int, specials []string, opts ...TrainOption) (*Tokenizer, error) {
	cfg := trainConfig{pattern: PatternGPT2, minFreq: 2, template: LLaDATemplate}
	for _, o := range opts {
		o(&cfg)
	}
	seen := map[string]bool{}
	for _, s := range specials {
		if s == "" {
			return nil, errors.New("tokenizer: Train: empty special token")
		}
		if seen[s] {
			return nil, fmt.Errorf("tokenizer: Train: special token %q given twice", s)
		}
		seen[s] = true
	}
	if vocabSize < 256+len(specials) {
		return nil, fmt.Errorf("tokenizer: Train: vocabSize %d < 256 bytes + %d specials", vocabSize, len(specials))
	}
	if cfg.minFreq < 1 {
		cfg.minFreq = 1
	}
	for _, def := range []struct {
		dst  *string
		name string
	}{{&cfg.bos, TokenBOS}, {&cfg.eos, TokenEOS}, {&cfg.pad, TokenEOS}} {
		if *def.dst == "" && seen[def.name] {
			*def.dst = def.name
		}
	}
	for _, s := range []string{cfg.bos, cfg.eos, cfg.pad} {
		if s != "" && !seen[s] {
			return nil, fmt.Errorf("tokenizer: Train: %q is not among the special tokens", s)
		}
	}

	// A tokenizer with the byte alphabet and the specials only, to
	// pre-tokenize with the very pipeline the result will have.
	base := make([]string, 256)
	for b := range base {
		base[b] = string(byteToRune[b])
	}
	t0, err := build(base, nil, specials, cfg)
	if err != nil {
		return nil, err
	}

	// Count the pre-tokenized words.
	wordCount := map[string]int64{}
	var pieces []string
	for _, text := range texts {
		t0.splitAdded(text, func(seg string, added int32) {
			if added >= 0 {
				return
			}
			if t0.norm != nil {
				seg = t0.norm.normalize(seg)
			}
			pieces = t0.pre.split(pieces[:0], seg)
			for _, w := range pieces {
				wordCount[w]++
			}
		})
	}
	keys := make([]string, 0, len(wordCount))
	for w := range wordCount {
		keys = append(keys, w)
	}
	sort.Strings(keys)

	tr := newTrainer(len(keys))
	for i, w := range keys {
		if !t0.rawPieces {
			w = byteLevelUnmapString(w)
		}
		syms := make([]int32, len(w))
		for j := range syms {
			syms[j] = int32(w[j])
		}
		tr.addWord(int32(i), syms, wordCount[w])
	}
	tr.start()
	tokens := append([]string(nil), base...)
	index := map[string]int32{}
	for i, s := range tokens {
		index[s] = int32(i)
	}
	target := vocabSize - len(specials)
	var merges [][2]string
	for len(tokens) < target {
		a, b, ok := tr.best(cfg.minFreq)
		if !ok {
			break
		}
		s := tokens[a] + tokens[b]
		id, exists := index[s]
		if !exists {
			id = int32(len(tokens))
			tokens = append(tokens, s)
			index[s] = id
		}
		merges = append(merges, [2]string{tokens[a], tokens[b]})
		tr.merge(a, b, id)
		if cfg.progress != nil && len(merges)%100 == 0 {
			cfg.progress(len(tokens)-256, target-256)
		}
	}
	if cfg.progress != nil {
		cfg.progress(len(tokens)-256, target-256)
	}
	return build(tokens, merges, specials, cfg)
}

// build writes the tokenizer.json of a byte-level BPE and parses it back,
// so a trained tokenizer and a loaded one share one code path.
func build(tokens []string, merges [][2]string, specials []string, cfg trainConfig) (*Tokenizer, error) {
	data, err := marshalTokenizerJSON(tokens, merges, specials, cfg.pattern)
	if err != nil {
		return nil, err
	}
	t, err := parse(data, "tokenizer.json")
	if err != nil {
		return nil, err
	}
	t.cfg.template = cfg.template
	t.cfg.bos, t.cfg.eos, t.cfg.pad = cfg.bos, cfg.eos, cfg.pad
	return t, nil
}

// marshalTokenizerJSON writes a Hugging Face tokenizer.json with the vocab
// in id order and merges in the [a, b] pair form.
func marshalTokenizerJSON(tokens []string, merges [][2]string, specials []string, pattern string) ([]byte, error) {
	var pre any
	byteLevel := func(useRegex bool) map[string]any {
		return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": useRegex}
	}
	if pattern == PatternGPT2 {
		pre = byteLevel(true)
	} else {
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			byteLevel(false),
		}}
	}
	added := make([]AddedTokenJSON, len(specials))
	for i, s := range specials {
		added[i] = AddedTokenJSON{ID: int32(len(tokens) + i), Content: s, Special: true}
	}

	var b bytes.Buffer
	w := func(key string, v any, last bool) error {
		kb, _ := json.Marshal(key)
		vb, err := marshalNoEscape(v)
		if err != nil {
			return err
		}
		b.WriteString("  ")
		b.Write(kb)
		b.WriteString(": ")
		b.Write(vb)
		if !last {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
		return nil
	}
	b.WriteString("{\n")
	for _, f := range []struct {
		k string
		v any
	}{
		{"version", "1.0"}, {"truncation", nil}, {"padding", nil},
		{"added_tokens", added}, {"normalizer", nil}, {"pre_tokenizer", pre},
		{"post_processor", byteLevel(true)}, {"decoder", byteLevel(true)},
	} {
		if err := w(f.k, f.v, false); err != nil {
			return nil, err
		}
	}
	b.WriteString(`  "model": {"type": "BPE", "dropout": null, "unk_token": null, ` +
		`"continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false, ` +
		`"byte_fallback": false, "ignore_merges": false,` + "\n")
	b.WriteString(`    "vocab": {`)
	for i, tok := range tokens {
		if i > 0 {
			b.WriteString(", ")
		}
		kb, _ := marshalNoEscape(tok)
		b.Write(kb)
		fmt.Fprintf(&b, ": %d", i)
	}
	b.WriteString("},\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			b.WriteString(", ")
		}
		mb, _ := marshalNoEscape(m[:])
		b.Write(mb)
	}
	b.WriteString("]\n  }\n}\n")
	return b.Bytes(), nil
}

// marshalNoEscape is json.Marshal without HTML escaping of <, > and &
// (special tokens read better as <|eot_id|>).
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// Save writes dir/tokenizer.json (the file the tokenizer was built from)
// and dir/tokenizer_config.json (chat template, bos/eos/pad tokens, the
// added tokens), each atomically (temp file + rename). dir is created if
// needed.
func (t *Tokenizer) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := map[string]any{}
	for k, v := range t.cfg.extra {
		cfg[k] = v
	}
	cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
	cfg["clean_up_tokenization_spaces"] = false
	cfg["add_bos_token"] = false
	cfg["add_eos_token"] = false
	if t.cfg.template != "" {
		cfg["chat_template"] = t.cfg.template
	}
	for k, v := range map[string]string{"bos_token": t.cfg.bos, "eos_token": t.cfg.eos, "pad_token": t.cfg.pad} {
		if v != "" {
			cfg[k] = v
		}
	}
	dec := map[string]any{}
	for _, a := range t.added {
		dec[fmt.Sprint(a.id)] = map[string]any{
			"content": a.content, "lstrip": a.lstrip, "rstrip": a.rstrip,
			"normalized": false, "single_word": a.singleWord, "special": a.special,
		}
	}
	cfg["added_tokens_decoder"] = dec
	var cb bytes.Buffer
	enc := json.NewEncoder(&cb)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, "tokenizer.json"), t.source); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, "tokenizer_config.json"), cb.Bytes())
}

func writeAtomic(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("tokenizer: writing %s: %v", path, err)
	}
	return nil
}

// trainer holds the words of a corpus as symbol sequences with counts, the
// count of every adjacent pair, and for each pair the words that (may)
// hold it.
type trainer struct {
	words  [][]int32
	counts []int64
	pairs  map[uint64]int64
	where  map[uint64][]int32 // may hold stale or repeated word indices
	seen   []int32            // seen[w] = merge number that last visited w
	q      countQueue
	nMerge int32
}

func newTrainer(n int) *trainer {
	return &trainer{
		words:  make([][]int32, n),
		counts: make([]int64, n),
		seen:   make([]int32, n),
		pairs:  map[uint64]int64{},
		where:  map[uint64][]int32{},
	}
}

func (tr *trainer) addWord(i int32, syms []int32, count int64) {
	tr.words[i] = syms
	tr.counts[i] = count
	for j := 0; j+1 < len(syms); j++ {
		k := pairKey(syms[j], syms[j+1])
		tr.pairs[k] += count
		if w := tr.where[k]; len(w) == 0 || w[len(w)-1] != i {
			tr.where[k] = append(w, i)
		}
	}
}

// start builds the heap once all words are in.
func (tr *trainer) start() {
	tr.q = make(countQueue, 0, len(tr.pairs))
	for k, n := range tr.pairs {
		tr.q = append(tr.q, countEntry{key: k, count: n})
	}
	heap.Init(&tr.q)
}

// best returns the most frequent pair (ties: smaller left id, then smaller
// right id) if it occurs at least minFreq times.
//
// The heap holds, for every pair with a positive count, an entry whose
// count is at least the true count; entries are refreshed lazily when
// popped.
func (tr *trainer) best(minFreq int64) (a, b int32, ok bool) {
	for tr.q.Len() > 0 {
		e := tr.q[0]
		cur := tr.pairs[e.key]
		if cur == e.count {
			if cur < minFreq {
				return 0, 0, false
			}
			return int32(e.key >> 32), int32(uint32(e.key)), true
		}
		heap.Pop(&tr.q)
		if cur > 0 && cur < e.count {
			heap.Push(&tr.q, countEntry{key: e.key, count: cur})
		}
		// cur > e.count cannot happen: increases push a fresh entry.
	}
	return 0, 0, false
}

// merge replaces every occurrence of (a, b) by c in the words holding it
// and updates the pair counts. Only pairs touching a, b or c can change:
// a pair of two other symbols keeps its neighbours.
func (tr *trainer) merge(a, b, c int32) {
	tr.nMerge++
	k := pairKey(a, b)
	fresh := map[uint64]bool{}
	for _, wi := range tr.where[k] {
		if tr.seen[wi] == tr.nMerge {
			continue
		}
		tr.seen[wi] = tr.nMerge
		w := tr.words[wi]
		has := false
		for j := 0; j+1 < len(w); j++ {
			if w[j] == a && w[j+1] == b {
				has = true
				break
			}
		}
		if !has {
			continue
		}
		n := tr.counts[wi]
		touches := func(x, y int32) bool { return x == a || x == b || y == a || y == b || x == c || y == c }
		for j := 0; j+1 < len(w); j++ {
			if touches(w[j], w[j+1]) {
				tr.pairs[pairKey(w[j], w[j+1])] -= n
			}
		}
		nw := make([]int32, 0, len(w))
		for j := 0; j < len(w); j++ {
			if j+1 < len(w) && w[j] == a && w[j+1] == b {
				nw = append(nw, c)
				j++
			} else {
				nw = append(nw, w[j])
			}
		}
		for j := 0; j+1 < len(nw); j++ {
			x, y := nw[j], nw[j+1]
			if touches(x, y) {
				pk := pairKey(x, y)
				tr.pairs[pk] += n
				if x == c || y == c {
					fresh[pk] = true
					if l := tr.where[pk]; len(l) == 0 || l[len(l)-1] != wi {
						tr.where[pk] = append(l, wi)
					}
				}
			}
		}
		tr.words[wi] = nw
	}
	delete(tr.where, k)
	delete(tr.pairs, k)
	keys := make([]uint64, 0, len(fresh))
	for pk := range fresh {
		keys = append(keys, pk)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, pk := range keys {
		if cnt := tr.pairs[pk]; cnt > 0 {
			heap.Push(&tr.q, countEntry{key: pk, count: cnt})
		}
	}
}

type countEntry struct {
	key   uint64
	count int64
}

// countQueue is a max-heap by count, then min by key.
type countQueue []countEntry

func (q countQueue) Len() int { return len(q) }
func (q countQueue) Less(i, j int) bool {
	if q[i].count != q[j].count {
		return q[i].count > q[j].count
	}
	return q[i].key < q[j].key
}
func (q countQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *countQueue) Push(x any)   { *q = append(*q, x.(countEntry)) }
func (q *countQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

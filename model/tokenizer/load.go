package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// Load reads dir/tokenizer.json and, when present, dir/tokenizer_config.json
// (chat template, BOS/EOS token names).
func Load(dir string) (*Tokenizer, error) {
	t, err := LoadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	if err := t.parseConfig(data, cfgPath); err != nil {
		return nil, err
	}
	return t, nil
}

// LoadFile reads a Hugging Face tokenizer.json holding a byte-level BPE
// model. It does not read tokenizer_config.json: the tokenizer has no chat
// template and ApplyChat uses LLaDA's format.
func LoadFile(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parse(data, filepath.Base(path))
}

// object is a JSON object whose fields are checked against a list of
// known names, so that a field this package does not implement is reported
// instead of silently ignored.
type object struct {
	m     map[string]json.RawMessage
	where string // "tokenizer.json: pre_tokenizer", for errors
}

func decodeObject(raw json.RawMessage, where string) (object, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return object{}, fmt.Errorf("%s: %v", where, err)
	}
	if m == nil {
		return object{}, fmt.Errorf("%s: want an object, got %s", where, abbrev(raw))
	}
	return object{m: m, where: where}, nil
}

// known reports the first field not in names.
func (o object) known(names ...string) error {
	var unknown []string
	for k := range o.m {
		found := false
		for _, n := range names {
			if k == n {
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("%s: field %q is not supported", o.where, unknown[0])
	}
	return nil
}

// get decodes field name into v; a missing or null field leaves v as is.
func (o object) get(name string, v any) error {
	raw, ok := o.m[name]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: field %q: %v", o.where, name, err)
	}
	return nil
}

// typ returns the "type" field.
func (o object) typ() (string, error) {
	var t string
	if err := o.get("type", &t); err != nil {
		return "", err
	}
	if t == "" {
		return "", fmt.Errorf("%s: missing \"type\"", o.where)
	}
	return t, nil
}

func (o object) unsupportedType(t string) error {
	return fmt.Errorf("%s type %q is not supported", o.where, t)
}

// decodeTyped decodes an object that names its kind in a "type" field.
func decodeTyped(raw json.RawMessage, where string) (object, string, error) {
	o, err := decodeObject(raw, where)
	if err != nil {
		return object{}, "", err
	}
	typ, err := o.typ()
	return o, typ, err
}

// sequence parses the list under key of a "Sequence" object, each element
// with parse; a Sequence object has no other field than type and key.
func sequence[T any](o object, key string, parse func(json.RawMessage, string) (T, error)) ([]T, error) {
	if err := o.known("type", key); err != nil {
		return nil, err
	}
	var list []json.RawMessage
	if err := o.get(key, &list); err != nil {
		return nil, err
	}
	var seq []T
	for i, r := range list {
		v, err := parse(r, fmt.Sprintf("%s.%s[%d]", o.where, key, i))
		if err != nil {
			return nil, err
		}
		seq = append(seq, v)
	}
	return seq, nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

func abbrev(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// AddedTokenJSON is one entry of a tokenizer.json's added_tokens, as
// Load reads it and model/gguf writes it.
type AddedTokenJSON struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// parse builds a Tokenizer from the bytes of a tokenizer.json; name is the
// file name used in errors.
func parse(data []byte, name string) (*Tokenizer, error) {
	top, err := decodeObject(data, name)
	if err != nil {
		return nil, err
	}
	if err := top.known("version", "truncation", "padding", "added_tokens", "normalizer",
		"pre_tokenizer", "post_processor", "decoder", "model"); err != nil {
		return nil, err
	}
	if raw, ok := top.m["truncation"]; ok && !isNull(raw) {
		return nil, fmt.Errorf("%s: truncation is not supported (want null)", name)
	}
	// padding only matters for batches, which this package does not build.

	t := &Tokenizer{source: data, name: name}
	t.cache.m = make(map[string][]int32)

	if err := t.parseModel(top, name); err != nil {
		return nil, err
	}
	if err := t.parseAdded(top, name); err != nil {
		return nil, err
	}
	if raw, ok := top.m["normalizer"]; ok && !isNull(raw) {
		if t.norm, err = parseNormalizer(raw, name+": normalizer"); err != nil {
			return nil, err
		}
	}
	raw, ok := top.m["pre_tokenizer"]
	if !ok || isNull(raw) {
		return nil, fmt.Errorf("%s: pre_tokenizer is null; a byte-level BPE needs a ByteLevel pre_tokenizer", name)
	}
	hasByteLevel := false
	if t.pre, err = parsePreTokenizer(raw, name+": pre_tokenizer", &hasByteLevel); err != nil {
		return nil, err
	}
	if !hasByteLevel {
		return nil, fmt.Errorf("%s: pre_tokenizer has no ByteLevel step; only byte-level BPE is supported", name)
	}
	t.pre, t.rawPieces = deferByteMap(t.pre)
	if raw, ok := top.m["post_processor"]; ok && !isNull(raw) {
		if err := postProcessorRules.check(raw, name+": post_processor"); err != nil {
			return nil, err
		}
	}
	raw, ok = top.m["decoder"]
	if !ok || isNull(raw) {
		return nil, fmt.Errorf("%s: decoder is null; want ByteLevel", name)
	}
	if err := decoderRules.check(raw, name+": decoder"); err != nil {
		return nil, err
	}
	t.finish()
	return t, nil
}

func (t *Tokenizer) parseModel(top object, name string) error {
	raw, ok := top.m["model"]
	if !ok || isNull(raw) {
		return fmt.Errorf("%s: missing model", name)
	}
	m, err := scanObject(raw, name+": model")
	if err != nil {
		return err
	}
	typ, err := m.typ()
	if err != nil {
		// Old files omit the model type; BPE is recognized by its merges.
		if _, ok := m.m["merges"]; !ok {
			return err
		}
		typ = "BPE"
	}
	if typ != "BPE" {
		return m.unsupportedType(typ)
	}
	if err := m.known("type", "dropout", "unk_token", "continuing_subword_prefix",
		"end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"); err != nil {
		return err
	}
	var dropout *float64
	if err := m.get("dropout", &dropout); err != nil {
		return err
	}
	if dropout != nil && *dropout != 0 {
		return fmt.Errorf("%s: model dropout %v is not supported (want null)", name, *dropout)
	}
	var byteFallback bool
	if err := m.get("byte_fallback", &byteFallback); err != nil {
		return err
	}
	if byteFallback {
		return fmt.Errorf("%s: model byte_fallback true is not supported", name)
	}
	for _, f := range []string{"continuing_subword_prefix", "end_of_word_suffix"} {
		var s string
		if err := m.get(f, &s); err != nil {
			return err
		}
		if s != "" {
			return fmt.Errorf("%s: model %s %q is not supported (want null)", name, f, s)
		}
	}
	if err := m.get("fuse_unk", &t.fuseUnk); err != nil {
		return err
	}
	if err := m.get("ignore_merges", &t.ignoreMerges); err != nil {
		return err
	}
	var unk string
	if err := m.get("unk_token", &unk); err != nil {
		return err
	}

	vocab, err := parseVocab(m.m["vocab"], name)
	if err != nil {
		return err
	}
	if len(vocab) == 0 {
		return fmt.Errorf("%s: model vocab is empty", name)
	}
	t.vocab = vocab
	for tok, id := range vocab {
		if id < 0 {
			return fmt.Errorf("%s: model vocab: token %q has negative id %d", name, tok, id)
		}
	}
	t.unk = -1
	if unk != "" {
		id, ok := vocab[unk]
		if !ok {
			return fmt.Errorf("%s: model unk_token %q is not in the vocab", name, unk)
		}
		t.unk = id
	}

	merges, err := parseMerges(m.m["merges"], name)
	if err != nil {
		return err
	}
	t.merges = make(map[uint64]merge, len(merges))
	t.mergeList = make([][2]string, 0, len(merges))
	for i, ab := range merges {
		a, b := ab[0], ab[1]
		ia, ok1 := vocab[a]
		ib, ok2 := vocab[b]
		ic, ok3 := vocab[a+b]
		switch {
		case !ok1:
			return fmt.Errorf("%s: model merges[%d]: token %q is not in the vocab", name, i, a)
		case !ok2:
			return fmt.Errorf("%s: model merges[%d]: token %q is not in the vocab", name, i, b)
		case !ok3:
			return fmt.Errorf("%s: model merges[%d]: merged token %q is not in the vocab", name, i, a+b)
		}
		// As in Hugging Face tokenizers, a repeated pair takes its last rank.
		t.merges[pairKey(ia, ib)] = merge{rank: int32(i), id: ic}
		t.mergeList = append(t.mergeList, [2]string{a, b})
	}
	return nil
}

// parseMerges reads model.merges, a list of "a b" strings or ["a", "b"]
// pairs (null or absent: none). It scans the JSON itself: a released
// vocabulary has some 150,000 merges, which encoding/json decodes an
// order of magnitude slower; strings with escapes go through
// encoding/json.
func parseMerges(raw json.RawMessage, name string) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	sc := jsonScanner{data: raw}
	bad := func(i int, what string) error {
		return fmt.Errorf("%s: model merges[%d]: %s", name, i, what)
	}
	if !sc.expect('[') {
		return nil, fmt.Errorf("%s: model merges: want a list, got %s", name, abbrev(raw))
	}
	var out [][2]string
	if sc.expect(']') {
		return out, nil
	}
	for i := 0; ; i++ {
		var a, b string
		var ok bool
		switch sc.peek() {
		case '"':
			var s string
			if s, ok = sc.str(); !ok {
				return nil, bad(i, "bad string")
			}
			var found bool
			a, b, found = strings.Cut(s, " ")
			if !found || strings.Contains(b, " ") {
				return nil, bad(i, fmt.Sprintf("%q: want two tokens separated by one space", s))
			}
		case '[':
			sc.pos++
			a, ok = sc.str()
			ok = ok && sc.expect(',')
			if ok {
				b, ok = sc.str()
			}
			if !ok || !sc.expect(']') {
				return nil, bad(i, `want "a b" or ["a", "b"]`)
			}
		default:
			return nil, bad(i, `want "a b" or ["a", "b"]`)
		}
		out = append(out, [2]string{a, b})
		if sc.expect(']') {
			break
		}
		if !sc.expect(',') {
			return nil, bad(i, "want , or ] after it")
		}
	}
	return out, nil
}

// jsonScanner reads a few JSON tokens from valid JSON (parse has already
// checked the whole document).
type jsonScanner struct {
	data []byte
	pos  int
}

func (s *jsonScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *jsonScanner) peek() byte {
	s.skipSpace()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// expect consumes c if it comes next.
func (s *jsonScanner) expect(c byte) bool {
	if s.peek() == c {
		s.pos++
		return true
	}
	return false
}

// skipString moves past the string that starts at pos.
func (s *jsonScanner) skipString() {
	for s.pos++; s.pos < len(s.data); s.pos++ {
		switch s.data[s.pos] {
		case '\\':
			s.pos++
		case '"':
			s.pos++
			return
		}
	}
}

// value moves past the next value and returns it.
func (s *jsonScanner) value() json.RawMessage {
	start := s.pos
	switch s.peek() {
	case '"':
		start = s.pos
		s.skipString()
	case '{', '[':
		start = s.pos
		depth := 0
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case '"':
				s.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.pos++
			if depth == 0 {
				break
			}
		}
	default:
		start = s.pos
		for s.pos < len(s.data) && !strings.ContainsRune(",}] \t\n\r", rune(s.data[s.pos])) {
			s.pos++
		}
	}
	return json.RawMessage(s.data[start:s.pos])
}

// scanObject is decodeObject for a part of a document that json has
// already checked: its fields are slices of raw, not copies.
func scanObject(raw json.RawMessage, where string) (object, error) {
	sc := jsonScanner{data: raw}
	if !sc.expect('{') {
		return object{}, fmt.Errorf("%s: want an object, got %s", where, abbrev(raw))
	}
	m := map[string]json.RawMessage{}
	if !sc.expect('}') {
		for {
			k, ok := sc.str()
			if !ok || !sc.expect(':') {
				return object{}, fmt.Errorf("%s: malformed object", where)
			}
			m[k] = sc.value()
			if sc.expect('}') {
				break
			}
			if !sc.expect(',') {
				return object{}, fmt.Errorf("%s: malformed object", where)
			}
		}
	}
	return object{m: m, where: where}, nil
}

// parseVocab reads model.vocab, an object from token to id, with
// jsonScanner (encoding/json is several times slower on 150,000 entries).
func parseVocab(raw json.RawMessage, name string) (map[string]int32, error) {
	vocab := map[string]int32{}
	if isNull(raw) {
		return vocab, nil
	}
	sc := jsonScanner{data: raw}
	if !sc.expect('{') {
		return nil, fmt.Errorf("%s: model vocab: want an object, got %s", name, abbrev(raw))
	}
	if sc.expect('}') {
		return vocab, nil
	}
	for {
		tok, ok := sc.str()
		if !ok || !sc.expect(':') {
			return nil, fmt.Errorf("%s: model vocab: malformed", name)
		}
		num := sc.value()
		id, err := strconv.ParseInt(string(num), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: model vocab: token %q: id %s is not an integer", name, tok, abbrev(num))
		}
		vocab[tok] = int32(id)
		if sc.expect('}') {
			return vocab, nil
		}
		if !sc.expect(',') {
			return nil, fmt.Errorf("%s: model vocab: malformed after %q", name, tok)
		}
	}
}

// str reads a string.
func (s *jsonScanner) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	start := s.pos
	escaped := false
	for j := start + 1; j < len(s.data); j++ {
		switch s.data[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			s.pos = j + 1
			if !escaped {
				return string(s.data[start+1 : j]), true
			}
			var v string
			err := json.Unmarshal(s.data[start:j+1], &v)
			return v, err == nil
		}
	}
	return "", false
}

func (t *Tokenizer) parseAdded(top object, name string) error {
	var added []AddedTokenJSON
	if err := top.get("added_tokens", &added); err != nil {
		return err
	}
	seen := map[string]bool{}
	seenID := map[int32]bool{}
	for i, a := range added {
		if a.Content == "" {
			return fmt.Errorf("%s: added_tokens[%d] has empty content", name, i)
		}
		if a.ID < 0 {
			return fmt.Errorf("%s: added_tokens[%d] %q has negative id %d", name, i, a.Content, a.ID)
		}
		if seen[a.Content] {
			return fmt.Errorf("%s: added_tokens[%d] %q appears twice", name, i, a.Content)
		}
		seen[a.Content] = true
		if seenID[a.ID] {
			return fmt.Errorf("%s: added_tokens[%d] %q reuses id %d", name, i, a.Content, a.ID)
		}
		seenID[a.ID] = true
		if id, ok := t.vocab[a.Content]; ok && id != a.ID {
			return fmt.Errorf("%s: added_tokens[%d] %q has id %d but the vocab gives it id %d", name, i, a.Content, a.ID, id)
		}
		t.added = append(t.added, addedToken{
			id: a.ID, content: a.Content, special: a.Special,
			singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip,
		})
	}
	return nil
}

func parseNormalizer(raw json.RawMessage, where string) (normalizer, error) {
	o, typ, err := decodeTyped(raw, where)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "NFC", "NFD", "NFKC", "NFKD", "Lowercase":
		if err := o.known("type"); err != nil {
			return nil, err
		}
		switch typ {
		case "NFC":
			return normForm{norm.NFC}, nil
		case "NFD":
			return normForm{norm.NFD}, nil
		case "NFKC":
			return normForm{norm.NFKC}, nil
		case "NFKD":
			return normForm{norm.NFKD}, nil
		}
		return lowercase{}, nil
	case "Sequence":
		seq, err := sequence(o, "normalizers", parseNormalizer)
		if err != nil {
			return nil, err
		}
		return normSequence(seq), nil
	}
	return nil, o.unsupportedType(typ)
}

func parsePreTokenizer(raw json.RawMessage, where string, hasByteLevel *bool) (preTokenizer, error) {
	o, typ, err := decodeTyped(raw, where)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		if err := o.known("type", "add_prefix_space", "trim_offsets", "use_regex"); err != nil {
			return nil, err
		}
		// Hugging Face's defaults: add_prefix_space and use_regex true.
		addPrefix, useRegex := true, true
		if err := o.get("add_prefix_space", &addPrefix); err != nil {
			return nil, err
		}
		if err := o.get("use_regex", &useRegex); err != nil {
			return nil, err
		}
		p := byteLevelPre{addPrefixSpace: addPrefix, mapBytes: true}
		if useRegex {
			if p.re, err = compileRegex(PatternGPT2, where); err != nil {
				return nil, err
			}
		}
		*hasByteLevel = true
		return p, nil
	case "Split":
		if err := o.known("type", "pattern", "behavior", "invert"); err != nil {
			return nil, err
		}
		var pat struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		}
		if err := o.get("pattern", &pat); err != nil {
			return nil, err
		}
		var src string
		switch {
		case pat.Regex != nil:
			src = *pat.Regex
		case pat.String != nil:
			src = regexp2.Escape(*pat.String)
		default:
			return nil, fmt.Errorf("%s: pattern wants {\"Regex\": ...} or {\"String\": ...}", where)
		}
		var behavior string
		if err := o.get("behavior", &behavior); err != nil {
			return nil, err
		}
		b, ok := behaviorNames[behavior]
		if !ok {
			return nil, fmt.Errorf("%s: behavior %q is not supported", where, behavior)
		}
		p := splitPre{behavior: b}
		if err := o.get("invert", &p.invert); err != nil {
			return nil, err
		}
		if p.re, err = compileRegex(src, where); err != nil {
			return nil, err
		}
		return p, nil
	case "Digits":
		if err := o.known("type", "individual_digits"); err != nil {
			return nil, err
		}
		var p digitsPre
		if err := o.get("individual_digits", &p.individual); err != nil {
			return nil, err
		}
		return p, nil
	case "Sequence":
		seq, err := sequence(o, "pretokenizers", func(raw json.RawMessage, where string) (preTokenizer, error) {
			return parsePreTokenizer(raw, where, hasByteLevel)
		})
		if err != nil {
			return nil, err
		}
		return preSequence(seq), nil
	}
	return nil, o.unsupportedType(typ)
}

// deferByteMap turns off the byte mapping of a pre-tokenizer whose last step
// is ByteLevel, so that its pieces stay raw text for the BPE to read byte by
// byte; it reports whether it did.
func deferByteMap(p preTokenizer) (preTokenizer, bool) {
	switch q := p.(type) {
	case byteLevelPre:
		q.mapBytes = false
		return q, true
	case preSequence:
		if len(q) == 0 {
			return q, false
		}
		last, ok := deferByteMap(q[len(q)-1])
		if !ok {
			return q, false
		}
		q = append(preSequence(nil), q...)
		q[len(q)-1] = last
		return q, true
	}
	return p, false
}

// sectionRules is what a checked section of tokenizer.json (the
// post-processor, the decoder) accepts: each type's fields, and a Sequence
// of such sections listed under seqKey (refused when empty if emptyBad).
type sectionRules struct {
	fields   map[string][]string
	seqKey   string
	emptyBad bool
}

var byteLevelFields = []string{"type", "add_prefix_space", "trim_offsets", "use_regex"}

// postProcessorRules accepts the post-processors that only add special
// tokens around an encoding (ignored: Encode adds none; the chat template
// adds BOS) or fix offsets.
var postProcessorRules = &sectionRules{
	fields: map[string][]string{"ByteLevel": byteLevelFields, "TemplateProcessing": {"type", "single", "pair", "special_tokens"}},
	seqKey: "processors",
}

// decoderRules accepts the ByteLevel decoder (alone or in a Sequence).
var decoderRules = &sectionRules{fields: map[string][]string{"ByteLevel": byteLevelFields}, seqKey: "decoders", emptyBad: true}

func (r *sectionRules) check(raw json.RawMessage, where string) error {
	o, typ, err := decodeTyped(raw, where)
	if err != nil {
		return err
	}
	if typ == "Sequence" {
		seq, err := sequence(o, r.seqKey, func(raw json.RawMessage, where string) (struct{}, error) {
			return struct{}{}, r.check(raw, where)
		})
		if err == nil && len(seq) == 0 && r.emptyBad {
			err = fmt.Errorf("%s: empty Sequence", where)
		}
		return err
	}
	if f, ok := r.fields[typ]; ok {
		return o.known(f...)
	}
	return o.unsupportedType(typ)
}

package tokenizer

import (
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Tokenizer is a byte-level BPE tokenizer read from a Hugging Face
// tokenizer.json (Load, LoadFile) or trained (Train). It is safe for
// concurrent use.
type Tokenizer struct {
	name   string // file name for errors
	source []byte // the tokenizer.json it was built from; Save writes it back

	vocab        map[string]int32
	idToToken    []string // "" where an id has no token
	merges       map[uint64]merge
	mergeList    [][2]string
	unk          int32 // -1 when there is no unk_token
	fuseUnk      bool
	ignoreMerges bool
	byteID       [256]int32 // vocab id of each byte's one-rune token, -1 if none
	// rawPieces: the pre-tokenizer leaves its pieces as raw text (its last
	// step is ByteLevel, whose mapping bpe does itself); otherwise the pieces
	// are byte-mapped and bpe maps them back.
	rawPieces bool

	added        []addedToken
	addedID      map[int32]*addedToken
	addedContent map[string]int32
	// addedByFirst lists the added tokens by their first byte, longest
	// first, for leftmost-longest matching.
	addedByFirst [256][]*addedToken

	norm normalizer
	pre  preTokenizer

	cfg chatConfig

	cache struct {
		sync.RWMutex
		m map[string][]int32
	}
}

// merge is the rank of a merge rule and the id of the token it makes.
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	id                         int32
	content                    string
	special                    bool
	singleWord, lstrip, rstrip bool
}

// maxCacheEntries bounds the per-word BPE cache; it is cleared when full.
const maxCacheEntries = 1 << 17

// finish builds the lookup tables once vocab, merges and added tokens are
// set.
func (t *Tokenizer) finish() {
	n := int32(0)
	for _, id := range t.vocab {
		n = max(n, id+1)
	}
	for _, a := range t.added {
		n = max(n, a.id+1)
	}
	t.idToToken = make([]string, n)
	for tok, id := range t.vocab {
		t.idToToken[id] = tok
	}
	for b := range t.byteID {
		id, ok := t.vocab[string(byteToRune[b])]
		if !ok {
			id = -1
		}
		t.byteID[b] = id
	}
	t.addedID = make(map[int32]*addedToken, len(t.added))
	t.addedContent = make(map[string]int32, len(t.added))
	for i := range t.added {
		a := &t.added[i]
		t.idToToken[a.id] = a.content
		t.addedID[a.id] = a
		t.addedContent[a.content] = a.id
		t.addedByFirst[a.content[0]] = append(t.addedByFirst[a.content[0]], a)
	}
	for i := range t.addedByFirst {
		l := t.addedByFirst[i]
		sort.SliceStable(l, func(x, y int) bool { return len(l[x].content) > len(l[y].content) })
	}
}

// VocabSize is the largest token id plus one, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.idToToken) }

// TokenID returns the id of a token: an added token's content or a vocab
// entry in its byte-level form (a leading space is "Ġ").
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	if id, ok := t.addedContent[s]; ok {
		return id, true
	}
	id, ok := t.vocab[s]
	return id, ok
}

// Token returns the token of id as stored (byte-level form for vocab
// entries, content for added tokens), or "" for an unknown id.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.idToToken) {
		return ""
	}
	return t.idToToken[id]
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int32) bool {
	a, ok := t.addedID[id]
	return ok && a.special
}

// Encode turns text into token ids. Added tokens (special or not) are
// matched in the raw text first, leftmost-longest, as Hugging Face does;
// the text between them is normalized, pre-tokenized, byte-mapped and
// BPE-merged. No BOS or EOS is added.
func (t *Tokenizer) Encode(text string) []int32 { return t.encodeSegments(text, nil) }

// encodeSegments is Encode with the text between added tokens passed
// through unescape first (nil: as it is).
func (t *Tokenizer) encodeSegments(text string, unescape func(string) string) []int32 {
	var ids []int32
	var pieces []string
	t.splitAdded(text, func(seg string, added int32) {
		if added >= 0 {
			ids = append(ids, added)
			return
		}
		if unescape != nil {
			seg = unescape(seg)
		}
		ids, pieces = t.encodeText(ids, pieces, seg)
	})
	return ids
}

// encodeText appends the ids of a stretch of text with no added tokens
// matched in it: normalized, pre-tokenized, byte-mapped and BPE-merged.
func (t *Tokenizer) encodeText(ids []int32, pieces []string, seg string) ([]int32, []string) {
	if t.norm != nil {
		seg = t.norm.normalize(seg)
	}
	pieces = t.pre.split(pieces[:0], seg)
	for _, w := range pieces {
		ids = t.bpeWord(ids, w)
	}
	return ids, pieces
}

// splitAdded calls fn, in order, for every stretch of text between added
// tokens (with added = -1) and for every added token found (with its id).
func (t *Tokenizer) splitAdded(text string, fn func(seg string, added int32)) {
	start := 0 // start of the pending text stretch
	i := 0
	for i < len(text) {
		cands := t.addedByFirst[text[i]]
		var hit *addedToken
		for _, a := range cands {
			if strings.HasPrefix(text[i:], a.content) && (!a.singleWord || t.wordBounded(text, i, i+len(a.content))) {
				hit = a
				break
			}
		}
		if hit == nil {
			i++
			continue
		}
		segEnd := i
		if hit.lstrip {
			segEnd = len(strings.TrimRightFunc(text[start:i], unicode.IsSpace)) + start
		}
		if segEnd > start {
			fn(text[start:segEnd], -1)
		}
		fn(hit.content, hit.id)
		i += len(hit.content)
		if hit.rstrip {
			i = len(text) - len(strings.TrimLeftFunc(text[i:], unicode.IsSpace))
		}
		start = i
	}
	if start < len(text) {
		fn(text[start:], -1)
	}
}

// wordBounded reports whether text[i:j] is not glued to word characters on
// either side (the single_word rule).
func (t *Tokenizer) wordBounded(text string, i, j int) bool {
	isWord := func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }
	if i > 0 {
		r, _ := utf8.DecodeLastRuneInString(text[:i])
		if isWord(r) {
			return false
		}
	}
	if j < len(text) {
		r, _ := utf8.DecodeRuneInString(text[j:])
		if isWord(r) {
			return false
		}
	}
	return true
}

// bpeWord appends the ids of one pre-tokenized word: raw text, or
// byte-mapped text when the pre-tokenizer maps (rawPieces false). Results
// are cached per word.
func (t *Tokenizer) bpeWord(dst []int32, w string) []int32 {
	if len(w) == 1 && t.rawPieces && t.byteID[w[0]] >= 0 {
		return append(dst, t.byteID[w[0]])
	}
	t.cache.RLock()
	ids, ok := t.cache.m[w]
	t.cache.RUnlock()
	if ok {
		return append(dst, ids...)
	}
	word := w
	if !t.rawPieces {
		word = byteLevelUnmapString(w)
	}
	ids = t.bpe(word)
	t.cache.Lock()
	if len(t.cache.m) >= maxCacheEntries {
		t.cache.m = make(map[string][]int32)
	}
	t.cache.m[strings.Clone(w)] = ids // w may be a slice of a long text
	t.cache.Unlock()
	return append(dst, ids...)
}

// bpe merges the bytes of w (each byte starts as its byte-level token) by
// merge rank: repeatedly the adjacent pair of lowest rank (leftmost among
// equals) is merged, until no pair has a rule. With ignore_merges a word
// that is a vocab token as a whole is that token.
func (t *Tokenizer) bpe(w string) []int32 {
	if t.ignoreMerges {
		if id, ok := t.vocab[byteLevelMap(w)]; ok {
			return []int32{id}
		}
	}
	syms := make([]bpeSym, 0, len(w))
	for i := 0; i < len(w); i++ {
		id := t.byteID[w[i]]
		if id < 0 {
			if t.unk < 0 {
				continue // Hugging Face drops a symbol it cannot map
			}
			if t.fuseUnk && len(syms) > 0 && syms[len(syms)-1].id == t.unk {
				continue
			}
			id = t.unk
		}
		syms = append(syms, bpeSym{id: id})
	}
	n := len(syms)
	for i := range syms {
		syms[i].prev = int32(i - 1)
		syms[i].next = int32(i + 1)
	}
	if n > 0 {
		syms[n-1].next = -1
	}
	var q pairQueue
	push := func(i int32) {
		j := syms[i].next
		if j < 0 {
			return
		}
		if m, ok := t.merges[pairKey(syms[i].id, syms[j].id)]; ok {
			q.push(pairCand{rank: m.rank, pos: i, left: syms[i].id, right: syms[j].id, id: m.id})
		}
	}
	for i := 0; i < n-1; i++ {
		push(int32(i))
	}
	for len(q) > 0 {
		c := q.pop()
		s := &syms[c.pos]
		if s.dead || s.id != c.left || s.next < 0 || syms[s.next].id != c.right {
			continue // stale
		}
		r := &syms[s.next]
		s.id = c.id
		r.dead = true
		s.next = r.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			push(s.prev)
		}
		push(c.pos)
	}
	out := make([]int32, 0, n)
	for i := 0; i >= 0 && i < n; i = int(syms[i].next) {
		out = append(out, syms[i].id)
	}
	return out
}

type bpeSym struct {
	id         int32
	prev, next int32
	dead       bool
}

type pairCand struct {
	rank, pos       int32
	left, right, id int32
}

func (a pairCand) less(b pairCand) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// pairQueue is a binary min-heap by (rank, pos).
type pairQueue []pairCand

func (q *pairQueue) push(c pairCand) {
	h := append(*q, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*q = h
}

func (q *pairQueue) pop() pairCand {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h[l].less(h[m]) {
			m = l
		}
		if r := l + 1; r < n && h[r].less(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// Decode turns ids back into text: vocab tokens through the ByteLevel
// decoder, added tokens as their content. Invalid UTF-8 (a sequence cut
// inside a character) becomes U+FFFD, one per maximal ill-formed subpart as
// in Hugging Face. Unknown ids are skipped.
func (t *Tokenizer) Decode(ids []int32) string {
	return t.decode(ids, false)
}

// DecodeSkipSpecial is Decode without the added tokens marked special.
func (t *Tokenizer) DecodeSkipSpecial(ids []int32) string {
	return t.decode(ids, true)
}

// DecodePrefix is Decode for ids that more ids will follow (a streamed
// answer): a character cut at the end — bytes that begin a well-formed
// UTF-8 sequence and stop before it ends — is left out instead of becoming
// U+FFFD, since the next ids may complete it. Decode of the longer sequence
// then starts with DecodePrefix's text.
func (t *Tokenizer) DecodePrefix(ids []int32) string {
	b := t.decodeBytes(ids, false)
	for k := 1; k <= 3 && k <= len(b); k++ {
		i := len(b) - k
		if b[i] < 0xC0 {
			continue // a continuation byte (or ASCII): look further back
		}
		if n := maximalSubpart(b[i:]); n == k && !utf8.FullRune(b[i:]) {
			b = b[:i]
		}
		break
	}
	return lossyUTF8(b)
}

func (t *Tokenizer) decode(ids []int32, skipSpecial bool) string {
	return lossyUTF8(t.decodeBytes(ids, skipSpecial))
}

func (t *Tokenizer) decodeBytes(ids []int32, skipSpecial bool) []byte {
	var buf []byte
	for _, id := range ids {
		if a, ok := t.addedID[id]; ok {
			if !(skipSpecial && a.special) {
				buf = append(buf, a.content...)
			}
			continue
		}
		if id < 0 || int(id) >= len(t.idToToken) {
			continue
		}
		buf = byteLevelUnmap(buf, t.idToToken[id])
	}
	return buf
}

// lossyUTF8 is b as a string with each maximal subpart of an ill-formed
// UTF-8 sequence replaced by one U+FFFD: Unicode's recommended practice,
// which Hugging Face's decoders follow (Rust's String::from_utf8_lossy,
// JavaScript's TextDecoder). A cut character ("\xe4\xb8") is one U+FFFD;
// each stray byte ("\xff\xff") is one.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		i += maximalSubpart(b[i:])
		out = append(out, "\uFFFD"...)
	}
	return string(out)
}

// maximalSubpart is the length of the longest prefix of b (which does not
// start with a well-formed character) that starts a well-formed sequence,
// at least 1 (Unicode's Table 3-7).
func maximalSubpart(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	need := 0
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b) && b[n] >= lo && b[n] <= hi; k++ {
		n++
		lo, hi = 0x80, 0xBF
	}
	return n
}

// textMark marks a special token's text in a message's content as text:
// EscapeSpecials puts one after each rune of every special token found
// there (and doubles the marks the content holds itself), so that
// splitAdded no longer finds the token; EncodeEscaped drops the marks
// from the text it encodes. U+FDD0 is a Unicode noncharacter.
const textMark = "\uFDD0"

// EscapeSpecials marks the special tokens in s as text (see textMark):
// a message's content put through it, rendered into a prompt and encoded
// with EncodeEscaped, has its special tokens' text encoded as text.
// EncodeChat, EncodeMessages and EncodeConversation do this themselves.
func (t *Tokenizer) EscapeSpecials(s string) string {
	s = strings.ReplaceAll(s, textMark, textMark+textMark)
	var b strings.Builder
	marked := false
	t.splitAdded(s, func(seg string, added int32) {
		if added < 0 || !t.IsSpecial(added) {
			b.WriteString(seg)
			return
		}
		marked = true
		for _, r := range seg {
			b.WriteRune(r)
			b.WriteString(textMark)
		}
	})
	if !marked {
		return s
	}
	return b.String()
}

// unescapeText drops the marks EscapeSpecials put and undoubles the
// content's own.
func unescapeText(seg string) string {
	if !strings.Contains(seg, textMark) {
		return seg
	}
	var b strings.Builder
	for {
		i := strings.Index(seg, textMark)
		if i < 0 {
			b.WriteString(seg)
			return b.String()
		}
		b.WriteString(seg[:i])
		seg = seg[i+len(textMark):]
		if strings.HasPrefix(seg, textMark) {
			b.WriteString(textMark)
			seg = seg[len(textMark):]
		}
	}
}

// EncodeEscaped is Encode of a text whose parts went through
// EscapeSpecials: their special tokens are encoded as text, the rest's as
// tokens.
func (t *Tokenizer) EncodeEscaped(text string) []int32 {
	if !strings.Contains(text, textMark) {
		return t.Encode(text)
	}
	return t.encodeSegments(text, unescapeText)
}

package datasets

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode"
)

// TokenCounter counts the tokens of a request made of a system message and
// a user turn: prefixTokens is m, the length of the shared prefix (the
// templated system message), and promptTokens the length of the whole
// templated prompt, prefix included, without the answer slots. Callers
// build it on a model's tokenizer and chat template; it must not depend on
// anything but its arguments.
type TokenCounter func(system, user string) (prefixTokens, promptTokens int, err error)

// RequestRatio returns r = prefix / (prompt + genLength), the shared-prefix
// ratio of a request's input string (DESIGN.md, "Definitions").
func RequestRatio(prefix, prompt, genLength int) float64 {
	if prompt+genLength <= 0 {
		return 0
	}
	return float64(prefix) / float64(prompt+genLength)
}

// maxRatioBins bounds the number of bins a spec may ask for.
const maxRatioBins = 1000

// ParseRatioBins parses ratio bin edges: "LO:HI:STEP" (e.g. "0.05:0.95:0.05",
// edges LO, LO+STEP, …, HI; (HI-LO)/STEP must be a whole number) or an
// ascending comma-separated list of edges ("0.1,0.25,0.5,0.9"). Edges lie
// in [0, 1]; bin i is [edges[i], edges[i+1]), so n edges make n-1 bins.
func ParseRatioBins(spec string) ([]float64, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("datasets: ratio bins %q: %s (want LO:HI:STEP such as 0.05:0.95:0.05, or ascending edges such as 0.1,0.5,0.9)", spec, fmt.Sprintf(format, a...))
	}
	num := func(s string) (float64, error) {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, bad("%q is not a number", strings.TrimSpace(s))
		}
		return v, nil
	}
	var edges []float64
	switch parts := strings.Split(spec, ":"); {
	case strings.TrimSpace(spec) == "":
		return nil, bad("empty")
	case len(parts) == 3:
		var v [3]float64
		for i, p := range parts {
			x, err := num(p)
			if err != nil {
				return nil, err
			}
			v[i] = x
		}
		lo, hi, step := v[0], v[1], v[2]
		if step <= 0 {
			return nil, bad("step %g is not positive", step)
		}
		if hi <= lo {
			return nil, bad("HI %g is not above LO %g", hi, lo)
		}
		k := (hi - lo) / step
		n := math.Round(k)
		if math.Abs(k-n) > 1e-6*math.Max(1, n) {
			return nil, bad("%g-%g is not a whole number of steps of %g", hi, lo, step)
		}
		if n > maxRatioBins {
			return nil, bad("%g bins, more than %d", n, maxRatioBins)
		}
		for i := 0; i <= int(n); i++ {
			edges = append(edges, math.Round((lo+float64(i)*step)*1e9)/1e9)
		}
	case len(parts) == 1:
		for _, p := range strings.Split(spec, ",") {
			x, err := num(p)
			if err != nil {
				return nil, err
			}
			edges = append(edges, x)
		}
		if len(edges) < 2 {
			return nil, bad("one edge makes no bin")
		}
		if len(edges)-1 > maxRatioBins {
			return nil, bad("%d bins, more than %d", len(edges)-1, maxRatioBins)
		}
	default:
		return nil, bad("%d colon-separated fields", len(parts))
	}
	for i, e := range edges {
		if e < 0 || e > 1 {
			return nil, bad("edge %g outside [0, 1]", e)
		}
		if i > 0 && e <= edges[i-1] {
			return nil, bad("edges %g and %g are not ascending", edges[i-1], e)
		}
	}
	return edges, nil
}

// ParseShard parses "K/N", shard K (counted from 0) of N.
func ParseShard(spec string) (k, n int, err error) {
	a, b, ok := strings.Cut(spec, "/")
	k, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || n < 1 || k < 0 || k >= n {
		return 0, 0, fmt.Errorf("datasets: shard %q: want K/N with 0 ≤ K < N, such as 0/4", spec)
	}
	return k, n, nil
}

// ShardRequests returns shard k of n (0 ≤ k < n): the requests at positions
// k, k+n, k+2n, … of reqs. The n shards partition reqs, and every shard is
// the same on every machine that builds reqs with the same arguments.
func ShardRequests(reqs []Request, k, n int) ([]Request, error) {
	if n < 1 || k < 0 || k >= n {
		return nil, fmt.Errorf("datasets: shard %d/%d: want 0 ≤ K < N", k, n)
	}
	var out []Request
	for i := k; i < len(reqs); i += n {
		out = append(out, reqs[i])
	}
	return out, nil
}

// Request is one profiling request: a system message (the shared prefix)
// and a user turn whose shared-prefix ratio falls in a bin.
type Request struct {
	// ID is a stable name: a hash of the system message, the user text, the
	// bin's edges, the gen length and Index, so a resumed run can tell which
	// requests it already recorded.
	ID string
	// SystemName names the system message; a trimmed builtin is named
	// "NAME[:P]", its first P paragraphs.
	SystemName string
	System     string
	User       string
	// UserSource lists the IDs of the prompts the user text was made of,
	// joined by "+"; "[:W]" marks a text cut after W words.
	UserSource string
	// PrefixTokens is m and PromptTokens the templated prompt's length, as
	// the TokenCounter measured them; the input string has
	// PromptTokens+GenLength tokens.
	PrefixTokens, PromptTokens, GenLength int
	Ratio                                 float64
	// Bin is the bin's index, [Lo, Hi) its edges; Index the request's
	// position among the requests of its bin.
	Bin, Index int
	Lo, Hi     float64
}

// UnfilledBin is a bin for which fewer requests than asked were found.
type UnfilledBin struct {
	Bin         int
	Lo, Hi      float64
	Found, Want int
}

func (u UnfilledBin) String() string {
	return fmt.Sprintf("bin %d [%.3g, %.3g): %d of %d requests", u.Bin, u.Lo, u.Hi, u.Found, u.Want)
}

// BinOptions steers SampleRequests.
type BinOptions struct {
	// Edges are the bin edges (see ParseRatioBins).
	Edges []float64
	// PerBin is N, the number of requests wanted in every bin.
	PerBin int
	// GenLength is the number of answer slots (mask tokens) of a request.
	GenLength int
	// Seed makes the sample reproducible.
	Seed int64
	// MaxUserTokens bounds the user turn, in tokens of the counter (the
	// prompt's tokens beyond those of an empty user turn); 0 means 8192.
	MaxUserTokens int
	// MaxTokens bounds the whole input string (prompt + gen length), in
	// tokens; 0 means no bound beyond MaxUserTokens. System messages that
	// cannot fit are not used (their leading paragraphs may be).
	MaxTokens int
}

// sampleAttempts is how many (system, user) draws a request gets before its
// slot is given up.
const sampleAttempts = 12

// maxUserPieces bounds the prompts joined into one user turn.
const maxUserPieces = 64

// SampleRequests draws opt.PerBin requests for every bin, each a system
// message with a user turn whose ratio r = prefix / (prompt + gen length)
// lies in the bin. For each request it picks a system message that can
// reach the bin (a builtin or user one as given; only when none can, the
// first paragraphs of a longer one), then a user prompt; a prompt too long
// for the bin is cut at a word boundary, and one too short is followed by
// more prompts (joined by blank lines) until the ratio drops into the bin.
// No two requests of a bin share both system and user text.
//
// Requests come bin by bin, in the order of Edges; request j of a bin
// depends only on the arguments, the bin and j, so a larger PerBin extends
// a smaller one. Bins that could not be filled are returned, with how many
// requests were found, and never silently dropped; it is up to the caller
// whether that is an error. An error of count is returned as is.
func SampleRequests(systems []SystemPrompt, users []Prompt, count TokenCounter, opt BinOptions) ([]Request, []UnfilledBin, error) {
	switch {
	case len(systems) == 0:
		return nil, nil, errors.New("datasets: no system prompts to sample requests from")
	case len(users) == 0:
		return nil, nil, errors.New("datasets: no user prompts to sample requests from")
	case count == nil:
		return nil, nil, errors.New("datasets: no token counter")
	case len(opt.Edges) < 2:
		return nil, nil, fmt.Errorf("datasets: %d ratio bin edges make no bin", len(opt.Edges))
	case opt.PerBin < 1:
		return nil, nil, fmt.Errorf("datasets: %d requests per bin, want at least 1", opt.PerBin)
	case opt.GenLength < 0:
		return nil, nil, fmt.Errorf("datasets: gen length %d is negative", opt.GenLength)
	case opt.MaxUserTokens < 0:
		return nil, nil, fmt.Errorf("datasets: max user tokens %d is negative", opt.MaxUserTokens)
	case opt.MaxTokens < 0:
		return nil, nil, fmt.Errorf("datasets: max tokens %d is negative", opt.MaxTokens)
	}
	for i := 1; i < len(opt.Edges); i++ {
		if opt.Edges[i] <= opt.Edges[i-1] || opt.Edges[i-1] < 0 || opt.Edges[i] > 1 {
			return nil, nil, fmt.Errorf("datasets: ratio bin edges %v are not ascending in [0, 1]", opt.Edges)
		}
	}
	if opt.MaxUserTokens == 0 {
		opt.MaxUserTokens = 8192
	}
	s := &requestSampler{systems: systems, users: users, count: count, opt: opt}
	full, err := s.variants(systems)
	if err != nil {
		return nil, nil, err
	}
	var out []Request
	var unfilled []UnfilledBin
	for b := 0; b+1 < len(opt.Edges); b++ {
		lo, hi := opt.Edges[b], opt.Edges[b+1]
		pool := s.feasible(full, lo, hi)
		if len(pool) == 0 {
			trimmed, err := s.trimmedVariants()
			if err != nil {
				return nil, nil, err
			}
			pool = s.feasible(trimmed, lo, hi)
		}
		seen := map[string]bool{}
		found := 0
		for j := 0; j < opt.PerBin && len(pool) > 0; j++ {
			req, ok, err := s.sample(pool, b, j, seen)
			if err != nil {
				return nil, nil, err
			}
			if ok {
				req.Index = found
				req.ID = requestID(req)
				out = append(out, req)
				found++
			}
		}
		if found < opt.PerBin {
			unfilled = append(unfilled, UnfilledBin{Bin: b, Lo: lo, Hi: hi, Found: found, Want: opt.PerBin})
		}
	}
	return out, unfilled, nil
}

// requestID hashes what makes a request: system, user, bin edges, gen
// length and index.
func requestID(r Request) string {
	h := sha256.New()
	var buf [8]byte
	for _, s := range []string{r.System, r.User} {
		binary.LittleEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	fmt.Fprintf(h, "%g:%g:%d:%d", r.Lo, r.Hi, r.GenLength, r.Index)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

type requestSampler struct {
	systems []SystemPrompt
	users   []Prompt
	count   TokenCounter
	opt     BinOptions
	trimmed []requestSystem // nil until needed
	trimOK  bool
}

// requestSystem is a system message with its token counts: prefix m, and
// base, the prompt's length with an empty user turn.
type requestSystem struct {
	name, text   string
	prefix, base int
}

func (s *requestSampler) variants(systems []SystemPrompt) ([]requestSystem, error) {
	var out []requestSystem
	for _, sp := range systems {
		m, p, err := s.count(sp.Text, "")
		if err != nil {
			return nil, err
		}
		out = append(out, requestSystem{name: sp.Name, text: sp.Text, prefix: m, base: p})
	}
	return out, nil
}

// trimmedVariants returns the first P paragraphs of every system message of
// more than one paragraph, for every P below its paragraph count.
func (s *requestSampler) trimmedVariants() ([]requestSystem, error) {
	if s.trimOK {
		return s.trimmed, nil
	}
	var sps []SystemPrompt
	for _, sp := range s.systems {
		paras := strings.Split(sp.Text, "\n\n")
		for p := 1; p < len(paras); p++ {
			sps = append(sps, SystemPrompt{Name: fmt.Sprintf("%s[:%d]", sp.Name, p), Text: strings.TrimSpace(strings.Join(paras[:p], "\n\n"))})
		}
	}
	v, err := s.variants(sps)
	if err != nil {
		return nil, err
	}
	s.trimmed, s.trimOK = v, true
	return v, nil
}

// maxUser is the longest user turn system v may take: MaxUserTokens, and
// what MaxTokens leaves after the empty-user prompt and the answer slots.
func (s *requestSampler) maxUser(v requestSystem) int {
	m := s.opt.MaxUserTokens
	if s.opt.MaxTokens > 0 {
		m = min(m, s.opt.MaxTokens-v.base-s.opt.GenLength)
	}
	return m
}

// feasible keeps the system messages that can reach [lo, hi): an empty user
// turn gives a ratio of at least lo, and a user turn within maxUser brings
// it below hi.
func (s *requestSampler) feasible(vs []requestSystem, lo, hi float64) []requestSystem {
	var out []requestSystem
	g := s.opt.GenLength
	for _, v := range vs {
		if v.prefix <= 0 || s.maxUser(v) < 0 || RequestRatio(v.prefix, v.base, g) < lo {
			continue
		}
		need := float64(v.prefix)/hi - float64(g+v.base) // user tokens for r < hi
		if need > float64(s.maxUser(v)) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// sample tries to draw request j of bin b.
func (s *requestSampler) sample(pool []requestSystem, b, j int, seen map[string]bool) (Request, bool, error) {
	lo, hi := s.opt.Edges[b], s.opt.Edges[b+1]
	var key [8]byte
	binary.LittleEndian.PutUint64(key[:], math.Float64bits(lo)^math.Float64bits(hi)<<1)
	stream := binary.LittleEndian.Uint64(key[:]) ^ uint64(j)*0x9e3779b97f4a7c15
	r := rand.New(rand.NewPCG(uint64(s.opt.Seed), stream))
	for range sampleAttempts {
		sys := pool[r.IntN(len(pool))]
		req, ok, err := s.build(r, sys, lo, hi)
		if err != nil {
			return Request{}, false, err
		}
		if !ok {
			continue
		}
		k := req.System + "\x00" + req.User
		if seen[k] {
			continue
		}
		seen[k] = true
		req.Bin, req.Lo, req.Hi = b, lo, hi
		return req, true, nil
	}
	return Request{}, false, nil
}

// build makes a user turn for sys whose ratio lies in [lo, hi).
func (s *requestSampler) build(r *rand.Rand, sys requestSystem, lo, hi float64) (Request, bool, error) {
	g := s.opt.GenLength
	eval := func(user string) (Request, error) {
		m, p, err := s.count(sys.text, user)
		if err != nil {
			return Request{}, err
		}
		return Request{SystemName: sys.name, System: sys.text, User: user, PrefixTokens: m, PromptTokens: p,
			GenLength: g, Ratio: RequestRatio(m, p, g)}, nil
	}
	u := s.users[r.IntN(len(s.users))]
	text, sources := u.Text, []string{u.ID}
	req, err := eval(text)
	if err != nil {
		return Request{}, false, err
	}
	// Too short: append prompts until the ratio drops below hi.
	for req.Ratio >= hi {
		if len(sources) >= maxUserPieces || req.PromptTokens-sys.base > s.maxUser(sys) {
			return Request{}, false, nil
		}
		u := s.users[r.IntN(len(s.users))]
		text, sources = text+"\n\n"+u.Text, append(sources, u.ID)
		if req, err = eval(text); err != nil {
			return Request{}, false, err
		}
	}
	if req.Ratio >= lo {
		req.UserSource = strings.Join(sources, "+")
		return req, req.PromptTokens-sys.base <= s.maxUser(sys), nil
	}
	// Too long: cut after w words, w found by interpolation, then bisection
	// between a too-short cut a and a too-long cut c.
	ends := requestWordEnds(text)
	a, c := 0, len(ends)                                   // ratio(a words) ≥ hi (or a = 0), ratio(c words) < lo
	target := float64(sys.prefix)/((lo+hi)/2) - float64(g) // prompt tokens at the bin's centre
	userTok := float64(req.PromptTokens - sys.base)
	w := int(math.Round(float64(len(ends)) * (target - float64(sys.base)) / math.Max(userTok, 1)))
	for c-a > 1 {
		if w <= a || w >= c {
			w = (a + c) / 2
		}
		cut, err := eval(text[:ends[w-1]])
		if err != nil {
			return Request{}, false, err
		}
		switch {
		case cut.Ratio >= hi:
			a = w
		case cut.Ratio < lo:
			c = w
		default:
			cut.UserSource = strings.Join(sources, "+") + fmt.Sprintf("[:%d]", w)
			return cut, cut.PromptTokens-sys.base <= s.maxUser(sys), nil
		}
		w = (a + c) / 2
	}
	return Request{}, false, nil
}

// requestWordEnds returns the byte offset after every white-space-separated
// word of s.
func requestWordEnds(s string) []int {
	var ends []int
	in := false
	for i, c := range s {
		if unicode.IsSpace(c) {
			if in {
				ends = append(ends, i)
			}
			in = false
		} else {
			in = true
		}
	}
	if in {
		ends = append(ends, len(s))
	}
	return ends
}

// LoadUserPrompts returns the user prompts that args name: "builtin" for n
// WildChat-style prompts generated from seed (GenerateWildChatStyle), and
// anything else for WildChat parquet files or directories of them, read
// with f (ReadWildChat).
func LoadUserPrompts(args []string, f WildChatFilter, seed int64, n int) ([]Prompt, error) {
	if len(args) == 0 {
		return nil, errors.New("datasets: no user prompt data given (want builtin or WildChat parquet paths)")
	}
	return gatherPrompts(args, f, func() ([]Prompt, error) {
		if n < 1 {
			return nil, fmt.Errorf("datasets: %d builtin prompts asked for, want at least 1", n)
		}
		return GenerateWildChatStyle(seed, n), nil
	})
}

// gatherPrompts returns the prompts of args in their order: builtin's for
// each "builtin", then those of the other arguments, WildChat parquet files
// or directories read with f (ReadWildChat).
func gatherPrompts(args []string, f WildChatFilter, builtin func() ([]Prompt, error)) ([]Prompt, error) {
	var out []Prompt
	var paths []string
	for _, a := range args {
		if a != "builtin" {
			paths = append(paths, a)
			continue
		}
		ps, err := builtin()
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	if len(paths) > 0 {
		ps, err := ReadWildChat(paths, f)
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	return out, nil
}

// LoadConversations gathers n chat conversations of at least f.MinTurns
// exchanges for a multi-turn workload, from args as LoadUserPrompts takes
// them: "builtin" generates them (GenerateWildChatStyleConversations, keeping
// those within f.MaxConversationChars), other arguments are WildChat parquet
// files or directories read with f (and Limit n).
func LoadConversations(args []string, f WildChatFilter, seed int64, n int) ([]Prompt, error) {
	if len(args) == 0 {
		return nil, errors.New("datasets: no conversation data given (want builtin or WildChat parquet paths)")
	}
	if n < 1 || f.MinTurns < 1 {
		return nil, fmt.Errorf("datasets: %d conversations of %d turns asked for, want at least 1 of 1", n, f.MinTurns)
	}
	f.Limit = n
	return gatherPrompts(args, f, func() ([]Prompt, error) {
		var out []Prompt
		for i := 0; len(out) < n && i < 100*n; i++ {
			p := wildchatStyleConversation(seed, i, f.MinTurns)
			if f.MaxConversationChars == 0 || conversationChars(p.Exchanges) <= f.MaxConversationChars {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("datasets: no generated conversation of %d turns fits in %d characters", f.MinTurns, f.MaxConversationChars)
		}
		return out, nil
	})
}

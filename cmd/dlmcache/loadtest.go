package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/plots"
	"github.com/dlmcache/dlmcache/serve"
)

type loadtestOptions struct {
	f *factory

	URL      string
	Clients  []int
	Requests int
	File     string
	Groups   int
	// The suites' workloads, drawn as bench draws them: --suite,
	// --limit, --questions-per-system, --seed, --filler-tokens, and
	// --turns conversations.
	suiteSampling
	Turns     int
	Label     string
	Out       string
	Plot      string
	AgreeWith string
	Timeout   time.Duration
	// WriteRequests is a JSON Lines file to write the requests to, in the
	// order sent (writeRequests).
	WriteRequests string
}

// loadLevel is one concurrency level's outcome.
type loadLevel struct {
	Clients      int     `json:"clients"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	Seconds      float64 `json:"seconds"`
	RequestsPerS float64 `json:"requests_per_s"`
	TokensPerS   float64 `json:"tokens_per_s"`
	LatencyP50   float64 `json:"latency_p50_s"`
	LatencyP99   float64 `json:"latency_p99_s"`
	FirstP50     float64 `json:"first_block_p50_s"`
	FirstP99     float64 `json:"first_block_p99_s"`
	// The answer slots over the requests' summed generation time (no
	// queue): the speed of a request, not of the server, which under
	// concurrency is TokensPerS; and the method that served each request
	// (a calibrated table's choice).
	GenTokensPerS float64        `json:"generation_tokens_per_s,omitempty"`
	Methods       map[string]int `json:"methods,omitempty"`
	loadServed
	// AgreeWith is the label whose answers at this client count the
	// answers were compared with (loadServed.Agree).
	AgreeWith string `json:"agree_with,omitempty"`
	// Turns, with --turns: the same per turn of the conversations.
	Turns []loadTurn `json:"turns,omitempty"`
}

// loadServed is what the server reported of the requests answered (dlmcache
// serve's dlmcache object) and their accuracy.
type loadServed struct {
	// The answer slots decoded (or completion tokens).
	AnswerSlots int `json:"answer_slots,omitempty"`
	// The generation time alone (no queue), and the shared-prefix tokens
	// of the requests whose method looked them up in the store (depth >
	// 0), and those it found there.
	GenSeconds      float64 `json:"generation_s,omitempty"`
	PrefixTokens    int     `json:"prefix_tokens,omitempty"`
	PrefixHitTokens int     `json:"prefix_hit_tokens,omitempty"`
	// Requests with a reference answer, and those answered correctly
	// (datasets.CheckBenchmarkAnswer, as bench checks them).
	Checked int `json:"checked,omitempty"`
	Correct int `json:"correct,omitempty"`
	// Requests that --agree-with's run answered too, and those answered
	// the same.
	Compared int `json:"compared,omitempty"`
	Agree    int `json:"agree,omitempty"`
	// Of the compared requests, those with a reference answer (paired),
	// and those this run answered correctly where --agree-with's did not
	// (gained) and the reverse (lost): the paired accuracy difference.
	Paired int `json:"paired,omitempty"`
	Gained int `json:"gained,omitempty"`
	Lost   int `json:"lost,omitempty"`
}

// loadTurn is one turn's share of a level of conversations.
type loadTurn struct {
	Turn       int     `json:"turn"`
	Requests   int     `json:"requests"` // answered
	LatencyP50 float64 `json:"latency_p50_s"`
	LatencyP99 float64 `json:"latency_p99_s"`
	loadServed
	lats []float64 // the answered requests' latencies
}

// loadRequest is one request of a workload; Turn is its turn in its
// conversation (1-based; 0: a request of its own), Key names it for
// comparing answers across runs (requestKey).
type loadRequest struct {
	verifyRequest
	Turn int
	Key  string
}

// loadAnswer is one streamed request's outcome.
type loadAnswer struct {
	lat, first float64 // seconds: the whole request, the first text
	tokens     int     // answer slots (or completion tokens)
	text       string
	stats      *serve.Stats // dlmcache serve's dlmcache object (nil from other servers)
}

// chatMessage is one message of an OpenAI chat request.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// oneRequest streams one chat request: latency, time to the first text,
// answer slots (or completion tokens), the answer and the server's stats.
func oneRequest(ctx context.Context, client *http.Client, url string, msgs []chatMessage) (loadAnswer, error) {
	var a loadAnswer
	body, _ := json.Marshal(map[string]any{"messages": msgs, "stream": true, "stream_options": map[string]bool{"include_usage": true}})
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return a, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return a, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<22)
	a.first = -1
	var text strings.Builder
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Dlmcache *serve.Stats `json:"dlmcache"`
			Error    any          `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return a, err
		}
		if c.Error != nil {
			return a, fmt.Errorf("stream error: %v", c.Error)
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			if a.first < 0 {
				a.first = time.Since(start).Seconds()
			}
			text.WriteString(c.Choices[0].Delta.Content)
		}
		if c.Dlmcache != nil {
			a.tokens, a.stats = c.Dlmcache.GenLength, c.Dlmcache
		} else if c.Usage != nil && a.tokens == 0 {
			a.tokens = c.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return a, err
	}
	a.lat = time.Since(start).Seconds()
	if a.first < 0 {
		a.first = a.lat
	}
	a.text = text.String()
	return a, nil
}

// add counts one answered request of r into the level (and its turn's
// tally); ref holds the answers to compare with, by request key.
func (lv *loadLevel) add(r loadRequest, a loadAnswer, ref map[string]string) {
	lv.loadServed.add(r, a, ref)
	if st := a.stats; st != nil {
		if lv.Methods == nil {
			lv.Methods = map[string]int{}
		}
		lv.Methods[st.Method]++
	}
	if r.Turn > 0 {
		for len(lv.Turns) < r.Turn {
			lv.Turns = append(lv.Turns, loadTurn{Turn: len(lv.Turns) + 1})
		}
		t := &lv.Turns[r.Turn-1]
		t.Requests++
		t.lats = append(t.lats, a.lat)
		t.loadServed.add(r, a, ref)
	}
}

func (sv *loadServed) add(r loadRequest, a loadAnswer, ref map[string]string) {
	sv.AnswerSlots += a.tokens
	checked := r.Answer != "" && r.Suite != datasets.ChatSuite
	correct := checked && datasets.CheckBenchmarkAnswer(r.Suite, a.text, r.Answer)
	if want, ok := ref[r.Key]; ok {
		sv.Compared++
		if a.text == want {
			sv.Agree++
		}
		if checked {
			sv.Paired++
			switch was := datasets.CheckBenchmarkAnswer(r.Suite, want, r.Answer); {
			case correct && !was:
				sv.Gained++
			case was && !correct:
				sv.Lost++
			}
		}
	}
	if checked {
		sv.Checked++
		if correct {
			sv.Correct++
		}
	}
	if st := a.stats; st != nil {
		sv.GenSeconds += st.Seconds
		if st.Depth > 0 || st.PrefixHit { // its method looked the prefix up in the store
			sv.PrefixTokens += st.PrefixTokens
			// The tokens found, partial matches of a block store included
			// (a server without prefix_hit_tokens: the prefix on a hit).
			hit := st.PrefixHitTokens
			if hit == 0 && st.PrefixHit {
				hit = st.PrefixTokens
			}
			sv.PrefixHitTokens += hit
		}
	}
}

// Accuracy is the share of checked requests answered correctly, in percent
// (-1: none checked).
func (sv loadServed) Accuracy() float64 {
	if sv.Checked == 0 {
		return -1
	}
	return 100 * float64(sv.Correct) / float64(sv.Checked)
}

// workload is the requests, grouped into what one client sends in turn:
// a conversation's turns, or one request alone.
func (opts *loadtestOptions) workload() ([][]loadRequest, error) {
	if len(opts.Suites) == 0 {
		switch {
		case opts.Turns != 0:
			return nil, fmt.Errorf("--turns needs --suite: the conversations are built from the task suites, and --requests-file %s has none", opts.File)
		case opts.PerSystem != 1:
			return nil, fmt.Errorf("--questions-per-system needs --suite (--requests-file %s keeps its own requests)", opts.File)
		}
		reqs, err := readVerifyRequests(opts.File, opts.Groups, 11)
		if err != nil {
			return nil, err
		}
		var out [][]loadRequest
		for _, r := range reqs {
			out = append(out, []loadRequest{{verifyRequest: r, Key: requestKey(r.System, r.User)}})
		}
		return out, nil
	}
	if opts.File != "builtin" {
		return nil, fmt.Errorf("--suite and --requests-file %s are two request sources: give one", opts.File)
	}
	// bench's workload for the same flags: the same samples in the same
	// order.
	samples, err := opts.samples()
	if err != nil {
		return nil, err
	}
	if opts.Turns != 0 {
		if samples, err = suiteConversations(samples, opts.Turns); err != nil {
			return nil, err
		}
	}
	var out [][]loadRequest
	for _, s := range samples {
		var users []string
		for _, h := range s.History {
			users = append(users, h.User)
		}
		users = append(users, s.User)
		r := loadRequest{verifyRequest{System: s.System, User: s.User, Answer: s.Answer, Suite: s.Suite}, s.Turn, requestKey(s.System, users...)}
		if s.Turn > 1 {
			out[len(out)-1] = append(out[len(out)-1], r)
		} else {
			out = append(out, []loadRequest{r})
		}
	}
	return out, nil
}

// requestKey names a request by its system message and its conversation's
// user messages (not the answers between them, which are the server's).
func requestKey(system string, users ...string) string {
	h := sha256.New()
	for _, t := range append([]string{system}, users...) {
		fmt.Fprintf(h, "%d:%s", len(t), t)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// converse sends one client's unit, turn after turn: each turn's
// messages are the system message, the earlier questions each followed by
// the server's own answer to it, and the turn's question, as an OpenAI
// chat client sends a conversation. done is told of each turn's outcome;
// after a failed turn the conversation stops (the turns not sent are
// returned).
func converse(ctx context.Context, client *http.Client, url string, unit []loadRequest, done func(loadRequest, loadAnswer, error)) (unsent int) {
	msgs := []chatMessage{{Role: "system", Content: unit[0].System}}
	for k, r := range unit {
		msgs = append(msgs, chatMessage{Role: "user", Content: r.User})
		a, err := oneRequest(ctx, client, url, msgs)
		done(r, a, err)
		if err != nil {
			return len(unit) - k - 1
		}
		msgs = append(msgs, chatMessage{Role: "assistant", Content: a.text})
	}
	return 0
}

// levelUnits is what a level of n requests sends: the workload's units
// from the first, round again where n asks for more, up to n requests
// (whole conversations); n ≤ 0: the whole workload once.
func levelUnits(units [][]loadRequest, n int) ([][]loadRequest, int) {
	if len(units) == 0 {
		return nil, 0
	}
	if n <= 0 {
		n = 0
		for _, u := range units {
			n += len(u)
		}
	}
	var out [][]loadRequest
	sent := 0
	for i := 0; sent < n; i++ {
		u := units[i%len(units)]
		out = append(out, u)
		sent += len(u)
	}
	return out, sent
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// loadRun is one run's workload against one server.
type loadRun struct {
	client *http.Client
	url    string
	units  [][]loadRequest
	// agree: by client count, the answers of --agree-with's run by
	// request key (none: nothing compared).
	agree     map[int]map[string]string
	agreeWith string
	firstErr  func(clients int, err error) // told of each level's first error
}

// level sends n requests of the workload (levelUnits) from c concurrent
// clients, each taking the next unit when done with its last. It returns
// the level and the answers by request key.
func (lr *loadRun) level(ctx context.Context, c, n int) (loadLevel, map[string]string, error) {
	todo, n := levelUnits(lr.units, n)
	lv := loadLevel{Clients: c, Requests: n}
	ref := lr.agree[c]
	if ref != nil {
		lv.AgreeWith = lr.agreeWith
	}
	answers := map[string]string{}
	var mu sync.Mutex
	var lats, firsts []float64
	next := 0
	done := func(r loadRequest, a loadAnswer, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			lv.Errors++
			if lv.Errors == 1 {
				lr.firstErr(c, err)
			}
			return
		}
		lats, firsts = append(lats, a.lat), append(firsts, a.first)
		if _, ok := answers[r.Key]; !ok {
			answers[r.Key] = a.text
		}
		lv.add(r, a, ref)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(todo) || ctx.Err() != nil {
					return
				}
				if unsent := converse(ctx, lr.client, lr.url, todo[i], done); unsent > 0 {
					mu.Lock()
					lv.Errors += unsent
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return lv, nil, err
	}
	lv.Seconds = time.Since(start).Seconds()
	lv.RequestsPerS = float64(len(lats)) / lv.Seconds
	lv.TokensPerS = float64(lv.AnswerSlots) / lv.Seconds
	lv.LatencyP50, lv.LatencyP99 = quantile(lats, 0.5), quantile(lats, 0.99)
	for k := range lv.Turns {
		t := &lv.Turns[k]
		t.LatencyP50, t.LatencyP99 = quantile(t.lats, 0.5), quantile(t.lats, 0.99)
	}
	lv.FirstP50, lv.FirstP99 = quantile(firsts, 0.5), quantile(firsts, 0.99)
	if lv.GenSeconds > 0 {
		lv.GenSeconds = math.Round(lv.GenSeconds*1000) / 1000
		lv.GenTokensPerS = float64(lv.AnswerSlots) / lv.GenSeconds
	}
	return lv, answers, nil
}

func (opts *loadtestOptions) run(ctx context.Context) error {
	if opts.URL == "" && opts.Plot == "" && opts.WriteRequests == "" {
		return fmt.Errorf("--url is required (the base URL of a running dlmcache serve)")
	}
	var units [][]loadRequest
	if opts.URL != "" || opts.WriteRequests != "" {
		var err error
		if units, err = opts.workload(); err != nil {
			return err
		}
	}
	if opts.WriteRequests != "" {
		if err := opts.writeRequests(units); err != nil {
			return err
		}
	}
	results := map[string][]loadLevel{}
	// The answers of each label's levels by client count and request key.
	answers := map[string]map[int]map[string]string{}
	path, apath := filepath.Join(opts.Out, "loadtest.json"), filepath.Join(opts.Out, "loadtest-answers.json")
	if opts.Out != "" {
		for p, v := range map[string]any{path: &results, apath: &answers} {
			if b, err := os.ReadFile(p); err == nil {
				if err := json.Unmarshal(b, v); err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
			}
		}
	}
	if opts.URL != "" {
		url := strings.TrimRight(opts.URL, "/")
		label := opts.Label
		if label == "" {
			label = serverMethod(url)
		}
		lr := &loadRun{client: &http.Client{Timeout: opts.Timeout}, url: url, units: units, firstErr: func(c int, err error) {
			fmt.Fprintf(opts.f.ErrOut, "loadtest: %d clients: %v\n", c, err)
		}}
		if opts.AgreeWith != "" && opts.AgreeWith != label {
			lr.agree, lr.agreeWith = answers[opts.AgreeWith], opts.AgreeWith
		}
		if answers[label] == nil {
			answers[label] = map[int]map[string]string{}
		}
		var levels []loadLevel
		for _, c := range opts.Clients {
			if c < 1 {
				return fmt.Errorf("--clients: %d is not a client count", c)
			}
			lv, ans, err := lr.level(ctx, c, opts.levelRequests(c))
			if err != nil {
				return err
			}
			levels = append(levels, lv)
			answers[label][c] = ans
			fmt.Fprintf(opts.f.ErrOut, "loadtest %s: %d clients: %.2f req/s, %.1f tokens/s, p99 %.2fs\n", label, c, lv.RequestsPerS, lv.TokensPerS, lv.LatencyP99)
			if opts.Out != "" && lr.agreeWith != "" && lv.Compared == 0 {
				fmt.Fprintf(opts.f.ErrOut, "loadtest: %s has no answers at %d clients to these requests in %s: not compared\n", lr.agreeWith, c, apath)
			}
		}
		results[label] = mergeLevels(results[label], levels)
		writeLoad(opts.f.Out, label, levels)
		if opts.Out != "" {
			if err := os.MkdirAll(opts.Out, 0o755); err != nil {
				return err
			}
			for p, v := range map[string]any{path: results, apath: answers} {
				b, _ := json.MarshalIndent(v, "", "  ")
				if err := atomicfile.WriteFile(p, append(b, '\n'), 0o644); err != nil {
					return err
				}
			}
		}
	}
	if opts.Plot != "" {
		return plotLoad(results, opts.Plot)
	}
	return nil
}

// levelRequests is the requests a level of c clients sends (0: the whole
// workload once).
func (opts *loadtestOptions) levelRequests(c int) int {
	if opts.Requests <= 0 && len(opts.Suites) == 0 {
		return max(16, 4*c)
	}
	return opts.Requests
}

// writtenRequest is a line of --write-requests: the request (--requests-file's
// fields), its key in loadtest-answers.json and its turn.
type writtenRequest struct {
	Key  string `json:"key"`
	Turn int    `json:"turn,omitempty"`
	verifyRequest
}

// writeRequests writes the requests of the largest level to
// opts.WriteRequests as JSON Lines, in the order the clients take them
// (every level sends the first of them; one client sends them in this
// order).
func (opts *loadtestOptions) writeRequests(units [][]loadRequest) error {
	n := 0
	for _, c := range opts.Clients {
		k := opts.levelRequests(c)
		if k <= 0 { // the whole workload at every level
			n = 0
			break
		}
		n = max(n, k)
	}
	todo, _ := levelUnits(units, n)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, u := range todo {
		for _, r := range u {
			if err := enc.Encode(writtenRequest{r.Key, r.Turn, r.verifyRequest}); err != nil {
				return err
			}
		}
	}
	return atomicfile.WriteFile(opts.WriteRequests, b.Bytes(), 0o644)
}

// mergeLevels is a label's recorded levels with this run's: a client
// count run again replaces its old level; by client count.
func mergeLevels(old, now []loadLevel) []loadLevel {
	out := slices.DeleteFunc(slices.Clone(old), func(l loadLevel) bool {
		return slices.ContainsFunc(now, func(n loadLevel) bool { return n.Clients == l.Clients })
	})
	out = append(out, now...)
	slices.SortStableFunc(out, func(a, b loadLevel) int { return a.Clients - b.Clients })
	return out
}

func (opts *loadtestOptions) flags(fl *pflag.FlagSet) {
	fl.StringVar(&opts.URL, "url", "", "the server's base URL (required but for --plot or --write-requests alone)")
	fl.IntSliceVar(&opts.Clients, "clients", []int{1, 2, 4, 8, 16, 32}, "concurrent client counts, one level each")
	fl.IntVar(&opts.Requests, "requests", 0, "requests per level, the workload sent from its start (again where it has fewer; whole conversations with --turns); 0: with --suite the whole workload once, else 4 per client, at least 16")
	fl.StringVar(&opts.File, "requests-file", "builtin", "requests (without --suite): builtin, the held-out set of lut verify (system messages the suites' generators never produce, 4 questions each, and each suite's held-out samples; the default, as it keeps the runs recorded with it comparable), or a JSON Lines file of {system, user, answer, suite}")
	fl.IntVar(&opts.Groups, "groups", 40, "builtin: system messages (4 questions each), and held-out samples of each suite")
	opts.suiteSampling.add(fl, nil, 20, "; given, the requests are bench's workload on them (the same samples, questions and order for the same --limit, --questions-per-system, --seed, --filler-tokens and --turns) instead of --requests-file's, sent once per level unless --requests says")
	addTurnsFlag(fl, &opts.Turns, "the earlier questions each followed by the server's own answer to it, as a chat client sends them (needs --suite); a client sends a conversation's turns one after another, and the levels report each turn too (its accuracy against the question's exact answer)")
	fl.StringVar(&opts.Label, "label", "", "name of this run in --out (default: the server's method)")
	fl.StringVar(&opts.Out, "out", "", "directory keeping loadtest.json across runs (a label's levels by client count: a count run again replaces its level) and each level's answers in loadtest-answers.json")
	fl.StringVar(&opts.AgreeWith, "agree-with", "none", "with --out: compare each level's answers with this label's at the same client count there, request by request (the same workload: the same flags), e.g. a cache's with the same model's none")
	fl.StringVar(&opts.Plot, "plot", "", "draw every label in --out's loadtest.json to this PNG/SVG")
	fl.DurationVar(&opts.Timeout, "timeout", 10*time.Minute, "per-request time limit")
	fl.StringVar(&opts.WriteRequests, "write-requests", "", "write the requests to this JSON Lines file, one {key, turn, system, user, answer, suite} a line in the order sent (the largest level's: every level sends the first of them), before sending any (without --url: only write them); key is the request's in loadtest-answers.json, and with --turns user is the turn's question (the messages before it carry the server's answers); --requests-file reads it back")
}

// serverMethod reads the method from the server's /metrics (dlmcache_info).
func serverMethod(url string) string {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return "server"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, `dlmcache_info{method="`); ok {
			if m, _, ok := strings.Cut(rest, `"`); ok {
				return m
			}
		}
	}
	return "server"
}

func writeLoad(w io.Writer, label string, levels []loadLevel) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tclients\trequests\terrors\treq/s\ttokens/s\tlatency p50\tp99\tfirst block p50\tp99\t%s\t\n", label, servedHeader)
	for _, l := range levels {
		fmt.Fprintf(tw, "\t%d\t%d\t%d\t%.2f\t%.1f\t%.2fs\t%.2fs\t%.2fs\t%.2fs\t%s\t\n", l.Clients, l.Requests, l.Errors,
			l.RequestsPerS, l.TokensPerS, l.LatencyP50, l.LatencyP99, l.FirstP50, l.FirstP99, l.loadServed.columns(l.AgreeWith))
	}
	tw.Flush()
	for _, l := range levels {
		if len(l.Turns) > 0 {
			writeTurns(w, l)
		}
	}
	for _, l := range levels {
		if len(l.Methods) > 1 || (len(l.Methods) == 1 && l.Methods[label] == 0) {
			var ms []string
			for _, m := range slices.Sorted(maps.Keys(l.Methods)) {
				ms = append(ms, fmt.Sprintf("%s %d", m, l.Methods[m]))
			}
			fmt.Fprintf(w, "%d clients, served by: %s\n", l.Clients, strings.Join(ms, ", "))
		}
	}
}

// writeTurns prints a level of conversations turn by turn.
func writeTurns(w io.Writer, l loadLevel) {
	fmt.Fprintf(w, "%d clients, by turn:\n", l.Clients)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\tturn\trequests\tlatency p50\tp99\t%s\t\n", servedHeader)
	for _, t := range l.Turns {
		fmt.Fprintf(tw, "\t%d\t%d\t%.2fs\t%.2fs\t%s\t\n", t.Turn, t.Requests, t.LatencyP50, t.LatencyP99, t.loadServed.columns(l.AgreeWith))
	}
	tw.Flush()
}

// pairedDiff is the accuracy difference against --agree-with's answers on
// the paired requests, in points, with its 95% interval (lut verify's).
func (sv loadServed) pairedDiff() interval {
	d := make([]float64, sv.Paired)
	for i := range sv.Gained {
		d[i] = 1
	}
	for i := range sv.Lost {
		d[sv.Gained+i] = -1
	}
	return pairedDiff(d, 1.959964)
}

// servedHeader heads loadServed.columns.
const servedHeader = "accuracy\tsame answers as\tgeneration tokens/s a request\tprefix tokens found in the store"

// columns are the accuracy, agreement with agreeWith's answers, a
// request's generation tokens/s and prefix columns, tab-separated ("-": not known).
func (sv loadServed) columns(agreeWith string) string {
	acc, agree, gen, hits := "-", "-", "-", "-"
	if sv.Checked > 0 {
		acc = fmt.Sprintf("%.1f%% (%d/%d)", sv.Accuracy(), sv.Correct, sv.Checked)
	}
	if sv.Compared > 0 {
		agree = fmt.Sprintf("%s %.1f%% (%d/%d)", agreeWith, 100*float64(sv.Agree)/float64(sv.Compared), sv.Agree, sv.Compared)
		if sv.Paired > 0 {
			d := sv.pairedDiff()
			agree += fmt.Sprintf("; accuracy %+.1f points, 95%% [%+.1f, %+.1f] on %d", d.Mean, d.Low, d.High, sv.Paired)
		}
	}
	if sv.GenSeconds > 0 {
		gen = fmt.Sprintf("%.1f", float64(sv.AnswerSlots)/sv.GenSeconds)
	}
	if sv.PrefixTokens > 0 {
		hits = fmt.Sprintf("%d/%d", sv.PrefixHitTokens, sv.PrefixTokens)
	}
	return strings.Join([]string{acc, agree, gen, hits}, "\t")
}

// plotLoad draws tokens/s and p99 latency against clients, one line per
// label (the labels must share their client counts).
func plotLoad(results map[string][]loadLevel, path string) error {
	if len(results) == 0 {
		return fmt.Errorf("--plot: no results (run with --url and --out first)")
	}
	var x []float64
	tps, p99 := map[string][]float64{}, map[string][]float64{}
	for label, levels := range results {
		var xs []float64
		for _, l := range levels {
			xs = append(xs, float64(l.Clients))
			tps[label] = append(tps[label], l.TokensPerS)
			p99[label] = append(p99[label], l.LatencyP99)
		}
		if x == nil {
			x = xs
		} else if !slices.Equal(x, xs) {
			return fmt.Errorf("--plot: label %s has client counts %v, others %v", label, xs, x)
		}
	}
	a, err := plots.Lines(x, "concurrent clients", "answer slots / s", tps, "throughput")
	if err != nil {
		return err
	}
	b, err := plots.Lines(x, "concurrent clients", "p99 latency (s)", p99, "latency")
	if err != nil {
		return err
	}
	return plots.SaveStack([]*plot.Plot{a, b}, path, 8*vg.Inch, 6*vg.Inch)
}

func newCmdLoadtest(f *factory, runF func(*loadtestOptions) error) *cobra.Command {
	return newCommand(&loadtestOptions{f: f}, runF, &cobra.Command{
		Use:   "loadtest --url URL",
		Short: "Load a running dlmcache serve with concurrent streaming clients: tokens/s, latency, time to first block",
		Long: `Loadtest sends chat requests to a running server (dlmcache serve, or any
OpenAI-compatible one that streams) from 1, 2, 4, … concurrent clients,
each streaming (stream: true), and reports per level: requests/s, answer
slots decoded per second (the dlmcache object's gen_length; completion
tokens for other servers), p50/p99 latency and p50/p99 time to the first
block (the first chunk with text), and errors. --out DIR keeps the results
in DIR/loadtest.json under --label (the server's method by default), so runs
against servers with different methods add up (and a label's runs at other
client counts: a count run again replaces its level); --plot draws tokens/s
and p99 latency against clients for every label there. It keeps each
level's answers too (DIR/loadtest-answers.json), and compares each level's
answers, request by request, with those of the --agree-with label (none by
default) at the same client count: the same answers as the server without
a cache.

Against dlmcache serve it also reports, per level, what the server said of
each request: its generation time alone (no queue) as answer slots per
second, the method that served it (with a calibrated table, each
request's choice), and the shared-prefix tokens it found in the prefix
store; and, for the requests with a reference answer, the accuracy
(the held-out set carries them: compare a server with --lut against one
without on the same requests).

Requests: the held-out set of lut verify (--requests-file builtin, the
default: 4 questions per system message, and each suite's held-out
samples), a JSON Lines file of {"system", "user"} (with "answer" and
"suite", checked), or, with --suite, the workloads of dlmcache bench on the
held-out task suites: --questions-per-system Q asks each system message Q
questions of its suite, and --turns T makes each a conversation of T
turns. bench's flags give the same requests in the same order; with
--suite each level sends the whole workload once (--requests to change).
--write-requests FILE writes them, in the order sent, to a JSON Lines
file (without --url it only writes them): to send the same requests to
another program.
A client sends a conversation's turns one after another as a chat client
does: each turn's messages are the system message, the earlier questions
each followed by the server's own answer to it, and the new question, so
that a server with a block store (serve --store-answers) finds the
earlier turns there. The levels then report each turn too; its accuracy
is against the exact answer of its question (the earlier turns carry the
server's answers, right or wrong, where bench's carry the references).

A server keeps what a level stored for the next: to compare caches, give
each level a fresh server (one --clients count per run, the same --out).`,
		Example: `  dlmcache serve --addr 127.0.0.1:8080 & dlmcache loadtest --url http://127.0.0.1:8080 --out load
  dlmcache serve --lut calib/table.json --addr 127.0.0.1:8081 & dlmcache loadtest --url http://127.0.0.1:8081 --out load --plot docs/figures/loadtest.png
  dlmcache serve --model models/llada-tiny-block --addr 127.0.0.1:8082 & dlmcache loadtest --url http://127.0.0.1:8082 --suite all --limit 10 --questions-per-system 4 --clients 8
  dlmcache serve --model models/llada-tiny-block --store-answers --addr 127.0.0.1:8083 & dlmcache loadtest --url http://127.0.0.1:8083 --suite all --limit 10 --turns 4 --clients 8`,
		Args: cobra.NoArgs,
	})
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/plots"
)

type loadtestOptions struct {
	f *factory

	URL      string
	Clients  []int
	Requests int
	File     string
	Groups   int
	Label    string
	Out      string
	Plot     string
	Timeout  time.Duration
}

func newCmdLoadtest(f *factory, runF func(*loadtestOptions) error) *cobra.Command {
	opts := &loadtestOptions{f: f}
	cmd := &cobra.Command{
		Use:   "loadtest --url URL",
		Short: "Load a running dlmcache serve with concurrent streaming clients: tokens/s, latency, time to first block",
		Long: `Loadtest sends chat requests to a running server (dlmcache serve, or any
OpenAI-compatible one that streams) from 1, 2, 4, … concurrent clients,
each streaming (stream: true), and reports per level: requests/s, answer
slots decoded per second (the dlmcache object's gen_length; completion
tokens for other servers), p50/p99 latency and p50/p99 time to the first
block (the first chunk with text), and errors. --out DIR keeps the results
in DIR/loadtest.json under --label (the server's method by default), so runs
against servers with different methods add up; --plot draws tokens/s and
p99 latency against clients for every label there.

Requests: the held-out set of lut verify (--requests builtin: 4 questions
per system message) or a JSON Lines file of {"system", "user"}.`,
		Example: `  dlmcache serve --addr 127.0.0.1:8080 & dlmcache loadtest --url http://127.0.0.1:8080 --out load
  dlmcache serve --lut calib/table.json --addr 127.0.0.1:8081 & dlmcache loadtest --url http://127.0.0.1:8081 --out load --plot docs/figures/loadtest.png`,
		Args: cobra.NoArgs,
		RunE: runE(opts, runF, nil, func(ctx context.Context) error { return loadtestRun(ctx, opts) }),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.URL, "url", "", "the server's base URL (required)")
	fl.IntSliceVar(&opts.Clients, "clients", []int{1, 2, 4, 8, 16, 32}, "concurrent client counts, one level each")
	fl.IntVar(&opts.Requests, "requests", 0, "requests per level (0: 4 per client, at least 16)")
	fl.StringVar(&opts.File, "requests-file", "builtin", "requests: builtin (datasets.External) or a JSON Lines file")
	fl.IntVar(&opts.Groups, "groups", 40, "builtin: system messages (4 questions each)")
	fl.StringVar(&opts.Label, "label", "", "name of this run in --out (default: the server's method)")
	fl.StringVar(&opts.Out, "out", "", "directory keeping loadtest.json across runs")
	fl.StringVar(&opts.Plot, "plot", "", "draw every label in --out's loadtest.json to this PNG/SVG")
	fl.DurationVar(&opts.Timeout, "timeout", 10*time.Minute, "per-request time limit")
	return cmd
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
}

// oneRequest streams one chat request: latency, time to the first text,
// answer slots (or completion tokens).
func oneRequest(ctx context.Context, client *http.Client, url string, r verifyRequest) (lat, first float64, tokens int, err error) {
	body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "system", "content": r.System}, {"role": "user", "content": r.User}},
		"stream": true, "stream_options": map[string]bool{"include_usage": true}})
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return 0, 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<22)
	first = -1
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
			Dlmcache *struct {
				GenLength int `json:"gen_length"`
			} `json:"dlmcache"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return 0, 0, 0, err
		}
		if c.Error != nil {
			return 0, 0, 0, fmt.Errorf("stream error: %v", c.Error)
		}
		if first < 0 && len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			first = time.Since(start).Seconds()
		}
		if c.Dlmcache != nil {
			tokens = c.Dlmcache.GenLength
		} else if c.Usage != nil && tokens == 0 {
			tokens = c.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, err
	}
	lat = time.Since(start).Seconds()
	if first < 0 {
		first = lat
	}
	return lat, first, tokens, nil
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func loadtestRun(ctx context.Context, opts *loadtestOptions) error {
	if opts.URL == "" && opts.Plot == "" {
		return fmt.Errorf("--url is required (the base URL of a running dlmcache serve)")
	}
	results := map[string][]loadLevel{}
	path := filepath.Join(opts.Out, "loadtest.json")
	if opts.Out != "" {
		if b, err := os.ReadFile(path); err == nil {
			if err := json.Unmarshal(b, &results); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	if opts.URL != "" {
		url := strings.TrimRight(opts.URL, "/")
		reqs, err := readVerifyRequests(opts.File, opts.Groups, 11)
		if err != nil {
			return err
		}
		label := opts.Label
		if label == "" {
			label = serverMethod(url)
		}
		client := &http.Client{Timeout: opts.Timeout}
		var levels []loadLevel
		for _, c := range opts.Clients {
			if c < 1 {
				return fmt.Errorf("--clients: %d is not a client count", c)
			}
			n := opts.Requests
			if n <= 0 {
				n = max(16, 4*c)
			}
			lv := loadLevel{Clients: c, Requests: n}
			var mu sync.Mutex
			var lats, firsts []float64
			tokens := 0
			next := 0
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
						if i >= n || ctx.Err() != nil {
							return
						}
						lat, first, tok, err := oneRequest(ctx, client, url, reqs[i%len(reqs)])
						mu.Lock()
						if err != nil {
							lv.Errors++
							if lv.Errors == 1 {
								fmt.Fprintf(opts.f.ErrOut, "loadtest: %d clients: %v\n", c, err)
							}
						} else {
							lats, firsts = append(lats, lat), append(firsts, first)
							tokens += tok
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if err := ctx.Err(); err != nil {
				return err
			}
			lv.Seconds = time.Since(start).Seconds()
			lv.RequestsPerS = float64(len(lats)) / lv.Seconds
			lv.TokensPerS = float64(tokens) / lv.Seconds
			lv.LatencyP50, lv.LatencyP99 = quantile(lats, 0.5), quantile(lats, 0.99)
			lv.FirstP50, lv.FirstP99 = quantile(firsts, 0.5), quantile(firsts, 0.99)
			levels = append(levels, lv)
			fmt.Fprintf(opts.f.ErrOut, "loadtest %s: %d clients: %.2f req/s, %.1f tokens/s, p99 %.2fs\n", label, c, lv.RequestsPerS, lv.TokensPerS, lv.LatencyP99)
		}
		results[label] = levels
		writeLoad(opts.f.Out, label, levels)
		if opts.Out != "" {
			if err := os.MkdirAll(opts.Out, 0o755); err != nil {
				return err
			}
			b, _ := json.MarshalIndent(results, "", "  ")
			if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
				return err
			}
		}
	}
	if opts.Plot != "" {
		return plotLoad(results, opts.Plot)
	}
	return nil
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
	fmt.Fprintf(tw, "%s\tclients\trequests\terrors\treq/s\ttokens/s\tlatency p50\tp99\tfirst block p50\tp99\t\n", label)
	for _, l := range levels {
		fmt.Fprintf(tw, "\t%d\t%d\t%d\t%.2f\t%.1f\t%.2fs\t%.2fs\t%.2fs\t%.2fs\t\n", l.Clients, l.Requests, l.Errors,
			l.RequestsPerS, l.TokensPerS, l.LatencyP50, l.LatencyP99, l.FirstP50, l.FirstP99)
	}
	tw.Flush()
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

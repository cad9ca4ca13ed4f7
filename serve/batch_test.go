package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/load"
)

// panicPlan computes every row and panics when the forward asks for the
// rows of layer 1: a bug in a cache method.
type panicPlan struct{}

func (panicPlan) Rows(l int) []int32 {
	if l == 1 {
		panic("plan bug")
	}
	return nil
}
func (panicPlan) Hidden(int, []int32, backend.Tensor) error                            { return nil }
func (panicPlan) KV(int, []int32, backend.Tensor, backend.Tensor) error                { return nil }
func (panicPlan) Observe(int, []int32, backend.Tensor, backend.Tensor, backend.Tensor) {}

// TestBatcherSurvivesAPanic: a forward that panics inside the batcher's
// goroutine fails its own generation with an error; the others in its
// batch get their outputs, and the batcher goes on serving.
func TestBatcherSurvivesAPanic(t *testing.T) {
	m := loadTiny(t)
	b := newBatcher(m.Network, 8, nil)
	defer b.close()
	in := model.Input{Tokens: []int32{1, 2, 3, 4, 5}, LogitRows: []int32{4}}
	want, err := m.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	good, bad := join(b), join(b)
	var wg sync.WaitGroup
	var goodErr, badErr error
	var out *model.Output
	wg.Add(2)
	go func() { defer wg.Done(); defer good.end(); out, goodErr = good.Forward(in, nil) }()
	go func() { defer wg.Done(); defer bad.end(); _, badErr = bad.Forward(in, panicPlan{}) }()
	wg.Wait()
	if goodErr != nil || !closeTo(out.Logits, want.Logits, 1e-5) {
		t.Errorf("the good generation: err %v, or its logits differ from the forward alone", goodErr)
	}
	if badErr == nil || !strings.Contains(badErr.Error(), "plan bug") {
		t.Errorf("the panicking generation: err %v, want one naming the panic", badErr)
	}
	again := join(b)
	defer again.end()
	if _, err := again.Forward(in, nil); err != nil {
		t.Errorf("after the panic: %v", err)
	}
}

// TestBatcherWaitsForEveryGeneration: sessions that joined run their
// forwards as one batch, and the batch shrinks as they leave.
func TestBatcherWaitsForEveryGeneration(t *testing.T) {
	m := loadTiny(t)
	var mu sync.Mutex
	var sizes []int
	b := newBatcher(m.Network, 8, func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() })
	defer b.close()
	in := model.Input{Tokens: []int32{1, 2, 3, 4, 5}, LogitRows: []int32{4}}
	want, err := m.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	sess := make([]*session, n)
	for i := range sess {
		sess[i] = join(b)
	}
	// Session i runs i+1 forwards: batches of 4, 3, 2, 1.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			defer sess[i].end()
			for range i + 1 {
				out, err := sess[i].Forward(in, nil)
				if err != nil {
					errs[i] = err
					return
				}
				if !closeTo(out.Logits, want.Logits, 1e-5) {
					errs[i] = fmt.Errorf("session %d: logits differ from the forward alone", i)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if !slices.Equal(sizes, []int{4, 3, 2, 1}) {
		t.Errorf("batch sizes %v, want [4 3 2 1]", sizes)
	}
}

// TestBatchedAnswersMatchAlone: concurrent requests through a batching
// server get the answers each gets alone from an unbatched server, for
// every method (planners computing different rows share one forward).
func TestBatchedAnswersMatchAlone(t *testing.T) {
	prompts := []struct{ system, user string }{
		{"You are terse.", "Name a color."},
		{"You are terse.", "Count to three."},
		{"", "Hello there, how are you today?"},
		{"Answer in French.", "Say hi."},
		{"You are terse.", "Name a color."},
		{"", "x"},
	}
	// LLaDA, and the bidirectional architectures whose forward differs
	// the most: Dream (shifted logits, q/k/v biases), LLaDA-MoE (routing
	// over the batch's rows).
	for _, fx := range []string{"tiny-f32", "tiny-dream", "tiny-llada-moe"} {
		m := testmodel.Shared(t, fx)
		for _, method := range cache.Names() {
			if method == "exact-block" {
				continue // block-causal models only (TestExactBlockServe)
			}
			t.Run(fx+"/"+method, func(t *testing.T) { batchedMatchesAlone(t, m, method, prompts) })
		}
	}
}

// batchedMatchesAlone: method's answers to prompts on m, sent together to
// a server batching up to 4, equal those sent one at a time.
func batchedMatchesAlone(t *testing.T, m *load.Model, method string, prompts []struct{ system, user string }) {
	alone := newTestServerOn(t, m, method, 1<<30, func(c *Config) { c.MaxConcurrency = 1 })
	want := make([]string, len(prompts))
	for i, p := range prompts {
		want[i] = decodeChat(t, post(t, alone, "/v1/chat/completions", chatBody(p.system, p.user, ""))).Choices[0].Message.Content
	}
	batched := newTestServerOn(t, m, method, 1<<30, func(c *Config) { c.MaxConcurrency = 0; c.MaxBatch = 4 })
	got := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			if r := chatFrom(t, i, batched, chatBody(p.system, p.user, "")); r != nil {
				got[i] = r.Choices[0].Message.Content
			}
		})
	}
	wg.Wait()
	for i := range prompts {
		if got[i] != want[i] {
			t.Errorf("request %d batched: %q, alone: %q", i, got[i], want[i])
		}
	}
}

// closeTo: same length, and every element within tol·max|want|.
func closeTo(got, want []float32, tol float64) bool {
	if len(got) != len(want) {
		return false
	}
	var scale float64
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol*scale {
			return false
		}
	}
	return true
}

// TestQueueHoldsABurst: 32 clients sending 64 requests in all with a
// generous queue (the serve command's default 256) all get 200, each
// response id once, each answer the one its prompt gets alone — unbatched
// and batched. (With requests = 400 it passed too, under -race, in 128 s:
// too long for every run.)
func TestQueueHoldsABurst(t *testing.T) {
	const clients, requests = 32, 64
	prompts := []string{"Name a color.", "Count to three.", "Say hi.", "What now?"}
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("max-batch-%d", batch), func(t *testing.T) {
			s := newTestServer(t, "prefix-all", 1<<30, func(c *Config) {
				c.MaxConcurrency, c.MaxBatch, c.MaxQueue = 0, batch, 256
				if batch == 1 {
					c.MaxConcurrency = 2
				}
			})
			want := map[string]string{}
			for _, p := range prompts {
				want[p] = decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", p, ""))).Choices[0].Message.Content
			}
			var mu sync.Mutex
			ids := map[string]int{}
			next := make(chan int, requests)
			for i := range requests {
				next <- i
			}
			close(next)
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for i := range next {
						p := prompts[i%len(prompts)]
						r := chatFrom(t, i, s, chatBody("Be brief.", p, ""))
						if r == nil {
							continue
						}
						if got := r.Choices[0].Message.Content; got != want[p] {
							t.Errorf("request %d: %q, alone %q", i, got, want[p])
						}
						mu.Lock()
						ids[r.ID]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(ids) != requests {
				t.Errorf("%d distinct response ids for %d requests", len(ids), requests)
			}
		})
	}
}

// chatFrom posts chat request i from a client goroutine: the response, or
// nil with the failure reported.
func chatFrom(t *testing.T, i int, h http.Handler, body string) *chatResponse {
	rec := post(t, h, "/v1/chat/completions", body)
	if rec.Code != 200 {
		t.Errorf("request %d: status %d: %s", i, rec.Code, rec.Body)
		return nil
	}
	var r chatResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Errorf("request %d: %v", i, err)
		return nil
	}
	return &r
}

// join joins a session with no deadline (its end leaves) to the batch at
// once, as its first forward would.
// TestWorkersSpreadAndShare: generations go to the worker with the
// fewest; a worker's forwards run on every thread while it is the only
// one with generations in its batch and on threads/busy otherwise, with
// the logits of the model's own forward.
func TestWorkersSpreadAndShare(t *testing.T) {
	base := loadTiny(t)
	lm := *base.Network
	lm.Backend = base.Backend.(backend.Threaded).WithThreads(4)
	w, err := newWorkers(&lm, 3, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	threads := func() int { return w.model().Backend.(backend.Threaded).Threads() }
	worker := func(s *session) int { return slices.Index(w.bs, s.b) }
	open := func() (*session, func()) { return w.session(context.Background()) }
	s0, leave0 := open()
	s1, leave1 := open()
	s2, leave2 := open()
	if got := []int{worker(s0), worker(s1), worker(s2)}; !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("three generations went to workers %v, want [0 1 2]", got)
	}
	leave1()
	s3, leave3 := open()
	if worker(s3) != 1 {
		t.Errorf("after worker 1's generation left, the next went to worker %d, want 1", worker(s3))
	}
	// Busy workers: those with a generation joined (at its first forward).
	if threads() != 4 {
		t.Errorf("no worker busy: %d threads, want 4", threads())
	}
	joinNow(s0)
	if threads() != 4 {
		t.Errorf("one worker busy: %d threads, want 4", threads())
	}
	joinNow(s2)
	if threads() != 2 {
		t.Errorf("two workers busy: %d threads, want 2", threads())
	}
	joinNow(s3)
	if threads() != 1 {
		t.Errorf("three workers busy: %d threads, want 1 (4/3)", threads())
	}
	in := model.Input{Tokens: []int32{1, 2, 3, 4, 5}, LogitRows: []int32{4}}
	want, err := base.Forward(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*session{s0, s2, s3} {
		out, err := s.Forward(in, nil)
		if err != nil || !slices.Equal(out.Logits, want.Logits) {
			t.Errorf("worker %d's forward: err %v, or its logits differ from the model's forward", worker(s), err)
		}
	}
	leave2()
	leave3()
	if threads() != 4 {
		t.Errorf("one worker busy again: %d threads, want 4", threads())
	}
	leave0()
	if w.busy.Load() != 0 || !slices.Equal(w.sessions, []int{0, 0, 0}) {
		t.Errorf("all left: %d busy, sessions %v", w.busy.Load(), w.sessions)
	}
}

// Workers need a backend that divides its threads.
func TestWorkersNeedThreadedBackend(t *testing.T) {
	lm := *loadTiny(t).Network
	lm.Backend = hideThreads{lm.Backend}
	if _, err := newWorkers(&lm, 2, 8, nil); err == nil || !strings.Contains(err.Error(), "threads") {
		t.Errorf("two workers on a backend without WithThreads: %v", err)
	}
	if _, err := newWorkers(&lm, 1, 8, nil); err != nil {
		t.Errorf("one worker: %v", err)
	}
}

// hideThreads is a backend without backend.Threaded.
type hideThreads struct{ backend.Backend }

func join(b *batcher) *session {
	s, _ := b.session(context.Background())
	joinNow(s)
	return s
}

func joinNow(s *session) {
	s.b.mu.Lock()
	s.join()
	s.b.mu.Unlock()
}

// TestBatcherDropsCancelledSession: a generation whose request is
// cancelled while it is not at a forward (its goroutine busy or blocked
// elsewhere) leaves the batch at once: the others' forwards run without
// waiting for it, and its own next forward fails with the cause.
func TestBatcherDropsCancelledSession(t *testing.T) {
	m := loadTiny(t)
	b := newBatcher(m.Network, 8, nil)
	defer b.close()
	in := model.Input{Tokens: []int32{1, 2, 3, 4, 5}, LogitRows: []int32{4}}
	ctx, cancel := context.WithCancelCause(context.Background())
	stuck, leaveStuck := b.session(ctx)
	defer leaveStuck()
	joinNow(stuck) // it has run forwards before
	other := join(b)
	defer other.end()
	done := make(chan error, 1)
	go func() { _, err := other.Forward(in, nil); done <- err }()
	// The other's forward waits for the stuck session's, until the stuck
	// one's request is cancelled.
	select {
	case err := <-done:
		t.Fatalf("the forward ran before the stuck session left the batch: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	cause := errors.New("client_gone")
	cancel(cause)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := stuck.Forward(in, nil); !errors.Is(err, cause) {
		t.Errorf("the cancelled session's forward: %v, want its cause", err)
	}
}

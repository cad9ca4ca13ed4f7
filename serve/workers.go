package serve

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
)

// workers are the batchers a server runs side by side (Config.Workers):
// each generation is given to the one with the fewest, and each batches
// the forwards of its own. A worker's forward runs on all the backend's
// threads while no other worker has a generation in its batch, else on
// its share (threads / workers with generations), so one request alone
// is as fast as with one worker, and under load the workers' small
// forwards run side by side instead of one after the other on every
// thread — while one worker samples, streams and plans its generations'
// next step, the other computes (docs/serving.md, "Workers").
type workers struct {
	bs []*batcher
	// shares[k-1] is the model on the share of k busy workers: the same
	// weights, on threads/k threads.
	shares []*model.LLaDA

	mu       sync.Mutex
	sessions []int // generations given to each worker and not ended (under mu)
	busy     atomic.Int32
}

// newWorkers starts n batchers (n ≥ 1; more than one needs a
// backend.Threaded backend), each running up to maxBatch forwards as one.
func newWorkers(lm *model.LLaDA, n, maxBatch int, observe func(int)) (*workers, error) {
	w := &workers{shares: []*model.LLaDA{lm}, sessions: make([]int, max(1, n))}
	if n > 1 {
		th, ok := lm.Backend.(backend.Threaded)
		if !ok {
			return nil, fmt.Errorf("%d workers need a backend whose threads can be divided among them (%s's cannot): use 1", n, lm.Backend.Name())
		}
		for k := 2; k <= n; k++ {
			share := *lm
			share.Backend = th.WithThreads(ShareThreads(th.Threads(), k))
			w.shares = append(w.shares, &share)
		}
	}
	for range w.sessions {
		b := newBatcher(lm, maxBatch, observe)
		b.group = w
		w.bs = append(w.bs, b)
	}
	return w, nil
}

// ShareThreads is how many of threads a worker's forward runs on while
// busy workers have generations in their batches (at least 1).
func ShareThreads(threads, busy int) int { return max(1, threads/max(1, busy)) }

// model is the model a busy worker's forward runs on now.
func (w *workers) model() *model.LLaDA {
	k := int(w.busy.Load())
	return w.shares[min(max(k, 1), len(w.shares))-1]
}

// session gives a new generation to the worker with the fewest; leave
// must be called when it ends.
func (w *workers) session(ctx context.Context) (*session, func()) {
	w.mu.Lock()
	i := 0
	for j, n := range w.sessions {
		if n < w.sessions[i] {
			i = j
		}
	}
	w.sessions[i]++
	w.mu.Unlock()
	s, leave := w.bs[i].session(ctx)
	return s, func() {
		leave()
		w.mu.Lock()
		w.sessions[i]--
		w.mu.Unlock()
	}
}

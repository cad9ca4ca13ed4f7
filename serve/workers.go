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
	shares []*model.Network

	// gbs and gshares are the guide's batchers, one a worker, and its
	// model on the shares (addGuide; nil without a guide): a worker's
	// generations batch their guide forwards there, on the worker's share
	// of the threads as its diffusion forwards are.
	gbs     []*batcher
	gshares []*model.Network

	mu       sync.Mutex
	sessions []int // generations given to each worker and not ended (under mu)
	busy     atomic.Int32
}

// newWorkers starts n batchers (n ≥ 1; more than one needs a
// backend.Threaded backend), each running up to maxBatch forwards as one.
func newWorkers(lm *model.Network, n, maxBatch int, observe func(int)) (*workers, error) {
	if _, ok := lm.Backend.(backend.Threaded); n > 1 && !ok {
		return nil, fmt.Errorf("%d workers need a backend whose threads can be divided among them (%s's cannot): use 1", n, lm.Backend.Name())
	}
	w := &workers{shares: threadShares(lm, n), sessions: make([]int, max(1, n))}
	for range w.sessions {
		b := newBatcher(lm, maxBatch, observe)
		b.group, b.pick = w, w.model
		w.bs = append(w.bs, b)
	}
	return w, nil
}

// addGuide starts a batcher of the guided decoder's guide beside each
// worker's: a generation's guide forwards are batched with those of the
// worker's other generations verifying at the same time (a guide session
// is in its batch only while its generation verifies: batcher.idle).
// Its batches count no busy worker: a worker's guide and diffusion
// forwards take turns (every generation of a batch verifies after the
// step forward they shared), so the shares stay the diffusion batches'.
func (w *workers) addGuide(guide *model.Network, maxBatch int, observe func(int)) {
	w.gshares = threadShares(guide, len(w.shares))
	for range w.bs {
		b := newBatcher(guide, maxBatch, observe)
		b.pick = w.guideModel
		w.gbs = append(w.gbs, b)
	}
}

// threadShares is net on the share of k busy workers for k = 1 to n: the
// same weights, on threads/k threads (net alone where its backend's
// threads cannot be divided).
func threadShares(net *model.Network, n int) []*model.Network {
	shares := []*model.Network{net}
	th, ok := net.Backend.(backend.Threaded)
	if !ok {
		return shares
	}
	for k := 2; k <= n; k++ {
		share := *net
		share.Backend = th.WithThreads(ShareThreads(th.Threads(), k))
		shares = append(shares, &share)
	}
	return shares
}

// onShare is the one of shares (threadShares) for the workers busy now.
func (w *workers) onShare(shares []*model.Network) *model.Network {
	k := int(w.busy.Load())
	return shares[min(max(k, 1), len(shares))-1]
}

// guideModel is the guide on the share of the workers busy now.
func (w *workers) guideModel() *model.Network { return w.onShare(w.gshares) }

// ShareThreads is how many of threads a worker's forward runs on while
// busy workers have generations in their batches (at least 1).
func ShareThreads(threads, busy int) int { return max(1, threads/max(1, busy)) }

// model is the model a busy worker's forward runs on now.
func (w *workers) model() *model.Network { return w.onShare(w.shares) }

// session gives a new generation to the worker with the fewest; leave
// must be called when it ends.
func (w *workers) session(ctx context.Context) (*session, func()) {
	s, _, leave := w.sessions2(ctx)
	return s, leave
}

// sessions2 is session with the generation's session of the worker's
// guide batcher (nil without a guide).
func (w *workers) sessions2(ctx context.Context) (*session, *session, func()) {
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
	var g *session
	gleave := func() {}
	if w.gbs != nil {
		g, gleave = w.gbs[i].session(ctx)
	}
	return s, g, func() {
		leave()
		gleave()
		w.mu.Lock()
		w.sessions[i]--
		w.mu.Unlock()
	}
}

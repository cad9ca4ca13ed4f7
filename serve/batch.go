package serve

import (
	"context"
	"fmt"
	"sync"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// batcher runs the step forwards of the generations running at the same
// time as one model.ForwardBatch (continuous batching): each generation
// keeps its own loop, planner and schedule and hands its forward to a
// session; the batcher waits until every joined generation has a forward
// pending (or maxBatch are), runs them together and hands each its output.
// A generation joins at its first forward and leaves when it ends, so the
// batch changes between steps. Joining at the first forward, not when the
// generation starts, keeps a generation that waits before it (its planner
// waiting in Begin for another request's first step to store a shared
// prefix: cache.BlockStore) from holding up the batch that step runs in.
type batcher struct {
	lm       *model.Network
	maxBatch int
	// group, if not nil, is the workers this batcher is one of (its
	// sessions count the busy workers); pick, if not nil, gives the model
	// its forwards run on (a worker's share of the threads).
	group *workers
	pick  func() *model.Network

	mu      sync.Mutex
	cond    *sync.Cond
	active  int // joined sessions
	pending []*fwdJob
	closed  bool

	// observe, if not nil, sees the size of every batch run.
	observe func(size int)
}

type fwdJob struct {
	in   model.Input
	plan model.Plan
	out  *model.Output
	err  error
	done chan struct{}
}

func newBatcher(lm *model.Network, maxBatch int, observe func(int)) *batcher {
	b := &batcher{lm: lm, maxBatch: max(1, maxBatch), observe: observe}
	b.cond = sync.NewCond(&b.mu)
	go b.loop()
	return b
}

// close stops the loop once no forward is pending.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
}

// session is one generation's door into the batcher.
type session struct {
	b      *batcher
	ctx    context.Context
	joined bool // under b.mu: in the batch (the others wait for its forwards)
	ended  bool // under b.mu: left for good
}

// session opens a new generation's door; it joins the batch at its first
// forward (or join) and leaves when it ends or as soon as ctx is done:
// the others stop waiting for its forwards then, and its own generation
// stops at the next step boundary (its forwards fail from then on).
func (b *batcher) session(ctx context.Context) (*session, func()) {
	s := &session{b: b, ctx: ctx}
	stop := context.AfterFunc(ctx, s.end)
	return s, func() {
		stop()
		s.end()
	}
}

// join enters the batch: from now on a batch waits for this generation's
// forward (b.mu held). It reports false once the session has ended.
func (s *session) join() bool {
	if s.ended {
		return false
	}
	if !s.joined {
		s.joined = true
		s.b.active++
		if s.b.active == 1 && s.b.group != nil {
			s.b.group.busy.Add(1)
		}
	}
	return true
}

// Forward is a model.Forwarder: it queues the forward and waits for the
// batch that runs it.
func (s *session) Forward(in model.Input, plan model.Plan) (*model.Output, error) {
	j := &fwdJob{in: in, plan: plan, done: make(chan struct{})}
	b := s.b
	b.mu.Lock()
	if !s.join() {
		b.mu.Unlock()
		return nil, fmt.Errorf("the generation left the batch: %w", context.Cause(s.ctx))
	}
	b.pending = append(b.pending, j)
	b.cond.Broadcast()
	b.mu.Unlock()
	<-j.done
	return j.out, j.err
}

// idle leaves the batch until the session's next forward, which joins
// it again: the others stop waiting for this generation's forwards
// meanwhile. The guided decoder's guide sessions are idle between their
// generation's verifications (sample.GenOptions.GuideIdle), so a batch of
// guide forwards never waits for a generation that is in its diffusion
// step (which itself may wait for the guide batch's generations: a
// deadlock otherwise).
func (s *session) idle() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.leave()
}

// end leaves the batch; the others no longer wait for this generation.
func (s *session) end() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	s.leave()
}

// leave takes the session out of the batch (b.mu held).
func (s *session) leave() {
	b := s.b
	if s.joined {
		s.joined = false
		b.active--
		if b.active == 0 && b.group != nil {
			b.group.busy.Add(-1)
		}
		b.cond.Broadcast()
	}
}

func (b *batcher) loop() {
	for {
		b.mu.Lock()
		for !b.ready() {
			if b.closed && len(b.pending) == 0 {
				b.mu.Unlock()
				return
			}
			b.cond.Wait()
		}
		k := min(len(b.pending), b.maxBatch)
		jobs := append([]*fwdJob(nil), b.pending[:k]...)
		b.pending = append(b.pending[:0], b.pending[k:]...)
		b.mu.Unlock()
		b.run(jobs)
	}
}

// ready: a batch can run when every joined generation has its forward
// pending, or a full batch is.
func (b *batcher) ready() bool {
	n := len(b.pending)
	return n > 0 && (n >= b.active || n >= b.maxBatch || b.closed)
}

func (b *batcher) run(jobs []*fwdJob) {
	if b.observe != nil {
		b.observe(len(jobs))
	}
	ins := make([]model.Input, len(jobs))
	plans := make([]model.Plan, len(jobs))
	for i, j := range jobs {
		ins[i], plans[i] = j.in, j.plan
	}
	lm := b.lm
	if b.pick != nil {
		lm = b.pick()
	}
	var outs []*model.Output
	err := recovered(func() (err error) {
		outs, err = lm.ForwardBatch(ins, plans)
		return err
	})
	if err != nil && len(jobs) > 1 {
		// One bad request must not fail the others: run each alone.
		for _, j := range jobs {
			j.err = recovered(func() (err error) {
				j.out, err = lm.Forward(j.in, j.plan)
				return err
			})
			close(j.done)
		}
		return
	}
	for i, j := range jobs {
		if err != nil {
			j.err = err
		} else {
			j.out = outs[i]
		}
		close(j.done)
	}
}

// recovered runs f and turns a panic in it into an error: the batcher's
// goroutine serves every running generation, and a panic there would end
// the process, where a handler's panic ends only its request.
func recovered(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("forward panicked: %v", r)
		}
	}()
	return f()
}

// batched routes a generation's forwards through the batcher (when the
// server batches); leave must be called when the generation ends.
func (s *Server) batched(ctx context.Context, o sample.GenOptions) (sample.GenOptions, func()) {
	if s.batch == nil {
		return o, func() {}
	}
	sess, gsess, leave := s.batch.sessions2(ctx)
	o.Forward = sess.Forward
	if gsess != nil && o.Guide != nil {
		o.GuideForward, o.GuideIdle = gsess.Forward, gsess.idle
	}
	return o, leave
}

// MaxConcurrency is how many generations run at once (after defaults).
func (s *Server) MaxConcurrency() int { return s.cfg.MaxConcurrency }

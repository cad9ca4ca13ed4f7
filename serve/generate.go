package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// Generation: run takes a job through the queue (admit, queue.go) to
// cache.Run, on the batch workers when there are (batched) and with the
// guide when its method decodes guided (guided), then decodes the answer
// (answer: end-of-text, max_tokens, stop strings), stores the answered
// conversation (StoreAnswers) and fills the response's Stats and the
// generation metrics.

// run waits for a generation slot (admit) and generates.
func (s *Server) run(ctx context.Context, j *job) (*result, *apiError) {
	qstart := s.cfg.Now()
	release, e := s.admit(ctx)
	if e != nil {
		return nil, e
	}
	defer release()
	queued := s.cfg.Now().Sub(qstart)
	s.met.running.Inc()
	defer s.met.running.Dec()

	meth := j.meth
	s.checkRegime(j.gen)
	lm := s.cfg.Model
	g0, steps, e := s.guided(j)
	if e != nil {
		return nil, e
	}
	gen, leave := s.batched(ctx, g0)
	defer leave()
	// Count every forward, those of a generation cancelled midway too.
	forwards, forward := 0, gen.Forward
	if forward == nil {
		forward = lm.Network.Forward
	}
	gen.Forward = func(in model.Input, plan model.Plan) (*model.Output, error) {
		out, err := forward(in, plan)
		if err == nil {
			forwards++
		}
		return out, err
	}
	first, onBlock := true, gen.OnBlock
	gen.OnBlock = func(b, end int, canvas []int32) {
		if first {
			first = false
			s.met.firstBlock.Observe(s.cfg.Now().Sub(qstart).Seconds())
		}
		if onBlock != nil {
			onBlock(b, end, canvas)
		}
	}
	res, err := cache.Generate(ctx, lm.Network, meth, cache.Request{Prompt: j.ids, PrefixLen: j.prefixLen, Salt: j.salt, Positions: j.pos}, gen)
	if err != nil {
		s.met.nfe.Add(float64(forwards))
		if ctx.Err() != nil {
			return nil, s.ctxError(ctx)
		}
		return nil, internalError(fmt.Errorf("generation failed: %w", err))
	}
	g, info := res.Generation, res.Info
	text, n, finish := s.answer(g.Answer, j.maxTokens, j.stop)
	if s.cfg.StoreAnswers && j.conv != nil {
		if toks, err := j.conv.answered(ctx, lm.Tokenizer, text); err == nil {
			if _, _, err := cache.StorePrefix(lm.Network, meth, toks, j.salt); err != nil {
				return nil, internalError(fmt.Errorf("storing the answered conversation: %w", err))
			}
		}
	}
	st := Stats{Method: meth.Name(), Depth: info.Depth, Ratio: float64(j.prefixLen) / float64(len(j.ids)+j.gen.GenLength),
		Clamped: info.Clamped, PrefixTokens: j.prefixLen, PrefixHit: info.Hit, PrefixHitTokens: info.HitTokens, NFE: g.NFE,
		Regime:  j.gen.Regime,
		Seconds: g.Duration.Seconds(), QueueSeconds: queued.Seconds()}
	if g.RowsFull > 0 {
		st.RowsFraction = float64(g.RowsComputed) / float64(g.RowsFull)
	}
	if g.Duration > 0 {
		st.TokensPerSec = float64(j.gen.GenLength) / g.Duration.Seconds()
	}
	if steps != nil {
		gs := g.Guide
		st.Guide = &GuideStats{Model: s.cfg.Guide.Name(), NFE: gs.NFE, Steps: gs.Steps, Committed: gs.Committed, Accepted: gs.Accepted, Kept: gs.Kept,
			AcceptLen: gs.AcceptLen(), StepTokens: *steps, PrefixTokens: gs.PrefixTokens, PrefixHitTokens: gs.PrefixHitTokens,
			DLMSeconds: gs.DLMTime.Seconds(), GuideSeconds: gs.GuideTime.Seconds()}
		s.met.guided(gs)
	}
	s.met.generation(&st, len(j.ids), n, s.cfg.Now())
	s.met.rows(g.RowsComputed, g.RowsFull, g.FLOPs+info.PrefixFLOPs, g.FLOPsFull)
	cached := 0
	if info.Depth >= len(lm.Network.Blocks) {
		cached = info.HitTokens
	}
	return &result{text: text, finish: finish, completion: n, stats: st, promptTokens: len(j.ids), cachedTokens: cached}, nil
}

// guided gives a job whose method decodes guided the server's guide, its
// prefix store and a record of the tokens each step commits (steps; nil
// for another decoder).
func (s *Server) guided(j *job) (sample.GenOptions, *[]int, *apiError) {
	o := j.gen
	if !sample.DecodingOf(o).Guided() {
		return o, nil, nil
	}
	g := s.cfg.Guide
	if g == nil {
		return o, nil, internalError(fmt.Errorf("method %s decodes with the guided decoder, but the server holds no guide (serve --guide)", j.meth.Name()))
	}
	o.Guide = g.Network
	if st := s.cfg.GuideStore; st != nil {
		o.GuidePrefix = cache.GuidePrefix(st, g.Fingerprint, j.salt)
	}
	steps := new([]int)
	onStep := o.OnStep
	o.OnStep = func(st *sample.Step, committed []int32) {
		*steps = append(*steps, len(committed))
		s.met.guide.stepTokens.Observe(float64(len(committed)))
		if onStep != nil {
			onStep(st, committed)
		}
	}
	return o, steps, nil
}

// answer decodes the answer slots up to the first stop token, then applies
// the request's cap (maxTokens > 0) and stop strings. finish is "stop" when
// a stop token or string ended the answer, "length" when the slots or the
// cap did. n counts the tokens whose text is returned.
func (s *Server) answer(ids []int32, maxTokens int, stop []string) (text string, n int, finish string) {
	lm := s.cfg.Model
	n = lm.AnswerEnd(ids)
	finish = "length"
	if n < len(ids) {
		finish = "stop"
	}
	if maxTokens > 0 && n > maxTokens {
		n, finish = maxTokens, "length"
	}
	text = lm.Tokenizer.Decode(ids[:n])
	if cut, ok := cutAtStop(text, stop); ok {
		text, finish = cut, "stop"
		for n > 0 && len(lm.Tokenizer.Decode(ids[:n])) > len(cut) {
			n--
		}
	}
	return text, n, finish
}

// checkRegime warns, once per regime, when a request is generated in
// another regime than the one its method's table was profiled in (its
// depths were measured there), and counts it.
func (s *Server) checkRegime(o sample.GenOptions) {
	t := cache.TableOf(s.cfg.Method)
	if t == nil {
		return
	}
	g := o.Regime
	err := t.CheckRegime(g)
	if err == nil {
		return
	}
	s.met.regimeMismatch.Inc()
	if _, seen := s.warned.LoadOrStore(g, true); !seen && s.cfg.Log != nil {
		s.logMu.Lock()
		fmt.Fprintf(s.cfg.Log, "%s warning: a request at %s: %v; served with the table's depths anyway\n", s.cfg.Now().UTC().Format(time.RFC3339), g.Text(), err)
		s.logMu.Unlock()
	}
}

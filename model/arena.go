package model

import (
	"slices"
	"sync"

	"github.com/dlmcache/dlmcache/model/backend"
)

// arena holds the tensors a forward allocates. At the end of each layer
// the forward keeps only what the next layers read (the residual stream,
// the shared full-width K/V) and gives the rest back to the backend, whose
// pool hands the same storage to the next layer: a forward holds one
// layer's temporaries, not every layer's (3.6 GB for LLaDA-8B at sequence
// 512). Within a layer each temporary is released after its last reader
// (the norm after q/k/v, q/k/v after the attention, gate's and up's
// products after the down projection), so a layer holds its attention's
// operands or its MLP's, not both. alloc may be called from several
// goroutines.
type arena struct {
	b  backend.Backend
	mu sync.Mutex
	ts []backend.Tensor
}

// alloc returns a [r, cols] temporary. Its contents are unspecified where
// the backend has backend.Uninit: every temporary of a forward is the
// destination of an operation (or a plan's KV or Hidden) that writes it
// in full.
func (a *arena) alloc(r, cols int) backend.Tensor {
	t := backend.NewUninit(a.b, r, cols)
	a.mu.Lock()
	a.ts = append(a.ts, t)
	a.mu.Unlock()
	return t
}

// release frees the tensors ts of the arena now, temporaries whose last
// reader has run, so that the layer's next allocations reuse their
// storage; nil entries, and tensors the arena does not hold (views, a
// plan's buffers), are skipped.
func (a *arena) release(ts ...backend.Tensor) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range ts {
		if t == nil {
			continue
		}
		if i := slices.Index(a.ts, t); i >= 0 {
			a.ts = slices.Delete(a.ts, i, i+1)
			a.b.Free(t)
		}
	}
}

// keepOnly frees every tensor of the arena but keep (nil entries allowed).
func (a *arena) keepOnly(keep ...backend.Tensor) {
	a.mu.Lock()
	defer a.mu.Unlock()
	kept := a.ts[:0]
	for _, t := range a.ts {
		if slices.Contains(keep, t) {
			kept = append(kept, t)
		} else {
			a.b.Free(t)
		}
	}
	clear(a.ts[len(kept):])
	a.ts = kept
}

// free frees every tensor of the arena.
func (a *arena) free() { a.keepOnly() }

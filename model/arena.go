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
	// carved maps each tensor carve laid in one of ts to that tensor,
	// parts counts the carved tensors of each not yet released.
	carved map[backend.Tensor]backend.Tensor
	parts  map[backend.Tensor]int
}

// carve returns temporaries of the given [rows, cols] shapes; on a
// backend.Carver they are laid in one temporary, freed once each of them
// has been released (or with the arena), else each is its own. A layer's
// q, k and v come from here, so that the MLP's [r, hidden] product and
// the logits, each larger than one of them but not than the three, reuse
// their storage instead of memory beside it (l16-d2048 Q8_0 at 322 rows:
// 2.6 MB each, g 7.0 MB, the logits 7.5 MB).
func (a *arena) carve(shapes ...[2]int) []backend.Tensor {
	c, ok := a.b.(backend.Carver)
	if !ok {
		ts := make([]backend.Tensor, len(shapes))
		for i, s := range shapes {
			ts[i] = a.alloc(s[0], s[1])
		}
		return ts
	}
	all := a.alloc(1, c.CarveSize(shapes...))
	ts := c.Carve(all, shapes...)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.carved == nil {
		a.carved, a.parts = make(map[backend.Tensor]backend.Tensor), make(map[backend.Tensor]int)
	}
	for _, t := range ts {
		a.carved[t] = all
	}
	a.parts[all] = len(ts)
	return ts
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
// storage (a carved one's with the last of its kind); nil entries, and
// tensors the arena does not hold (views, a plan's buffers), are skipped.
func (a *arena) release(ts ...backend.Tensor) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range ts {
		if t == nil {
			continue
		}
		if all, ok := a.carved[t]; ok {
			delete(a.carved, t)
			if a.parts[all]--; a.parts[all] > 0 {
				continue
			}
			delete(a.parts, all)
			t = all
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
		if slices.Contains(keep, t) || a.holds(t, keep) {
			kept = append(kept, t)
		} else {
			a.b.Free(t)
		}
	}
	clear(a.ts[len(kept):])
	a.ts = kept
	for t, all := range a.carved {
		if !slices.Contains(a.ts, all) {
			delete(a.carved, t)
			delete(a.parts, all)
		}
	}
}

// holds reports whether a tensor carved in all is among keep (a.mu held).
func (a *arena) holds(all backend.Tensor, keep []backend.Tensor) bool {
	if a.parts[all] == 0 {
		return false
	}
	for _, t := range keep {
		if t != nil && a.carved[t] == all {
			return true
		}
	}
	return false
}

// free frees every tensor of the arena.
func (a *arena) free() { a.keepOnly() }

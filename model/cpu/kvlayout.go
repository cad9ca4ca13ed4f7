package cpu

import (
	"github.com/dlmcache/dlmcache/model/backend"
)

// kvLayout is the fused attention's layout of a pair of K/V buffers made by
// NewKV, kept across attentions over them: the keys [0, valid) are laid out
// from the buffers' present contents, and an attention lays out only the
// keys from there on (from the 16-key panel holding valid). Every write to
// either buffer (any operation's destination, CopyRows's rows) lowers
// valid to the first row it may touch. A planner that keeps a request's
// K/V across steps (the exact block cache) writes the rows it computes and
// reads the rest, so a step lays out its own rows instead of every key.
type kvLayout struct {
	buf        []float32 // pooled; nil until an attention lays it out
	rows       int       // the buffers' rows: room in the layout for every key
	hd, kvHead int       // the head size and kv heads buf is laid out for
	valid      int
}

// kvRole says which of NewKV's pair a tensor (or a view of it) is.
const (
	kvKeys   = 1
	kvValues = 2
)

// NewKV implements backend.KVAllocator: uninitialised [rows, cols] key and
// value buffers sharing one kept attention layout.
func (b *Backend) NewKV(rows, cols int) (k, v backend.Tensor) {
	l := &kvLayout{rows: rows}
	kt, vt := b.NewUninit(rows, cols).(*Tensor), b.NewUninit(rows, cols).(*Tensor)
	kt.kv, kt.kvRole = l, kvKeys
	vt.kv, vt.kvRole = l, kvValues
	return kt, vt
}

var _ backend.KVAllocator = (*Backend)(nil)

// written records a write to rows [from, …) of t: the layout of the keys
// from there on is stale.
func (t *Tensor) written(from int) {
	if t.kv != nil {
		t.kv.valid = min(t.kv.valid, t.kvRow0+from)
	}
}

// keptLayout returns the kept layout attention over keys ks and values vs
// (hd a head, kvHeads of them) can read and extend: both NewKV's pair from
// their first row, on the fused kernels, the layout within maxAttnPack
// floats. It (re)allocates the layout for this geometry; nil: lay out
// afresh as usual.
func (b *Backend) keptLayout(ks, vs *Tensor, hd, kvHeads int) *kvLayout {
	l := ks.kv
	if l == nil || vs.kv != l || ks.kvRole != kvKeys || vs.kvRole != kvValues || ks.kvRow0 != 0 || vs.kvRow0 != 0 ||
		b.attn == attnNone || ks.rows > l.rows {
		return nil
	}
	size := kvHeads * attnLayout(hd, l.rows)
	if size > maxAttnPack {
		return nil
	}
	if l.buf == nil || l.hd != hd || l.kvHead != kvHeads {
		if l.buf != nil {
			b.bufs.put(l.buf)
		}
		l.buf, l.hd, l.kvHead, l.valid = b.bufs.take(size, false), hd, kvHeads, 0
	}
	return l
}

// span is the keys an attention over the first nk must lay out, [lo, hi)
// (lo a whole 16-key panel: the panel is laid out again whole), and marks
// the first nk laid out. Keys past nk laid out before and not written
// since stay valid unless their panel is laid out again.
func (l *kvLayout) span(nk int) (lo, hi int) {
	if l.valid >= nk {
		return nk, nk
	}
	lo = l.valid &^ 15
	l.valid = nk
	return lo, nk
}

// free gives the layout's storage back (Free of either buffer).
func (l *kvLayout) free(b *Backend) {
	if l.buf != nil {
		b.bufs.put(l.buf)
		l.buf, l.valid = nil, 0
	}
}

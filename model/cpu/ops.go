package cpu

import (
	"fmt"
	"slices"

	"github.com/dlmcache/dlmcache/model/backend"
)

// minChunk is the fewest elements worth handing to another goroutine: below
// about this much work the start-up of a goroutine costs more than it saves.
const minChunk = 1 << 14

// rowGrain is the number of rows of width cols that make one minChunk.
func rowGrain(cols int) int {
	if cols <= 0 {
		return minChunk
	}
	return max(1, minChunk/cols)
}

func shapePanic(op string, format string, args ...any) {
	panic("cpu: " + op + ": " + fmt.Sprintf(format, args...))
}

// checked panics with the error of an operand check (backend.Check*), as
// every shape mismatch does.
func checked(err error) {
	if err != nil {
		panic("cpu: " + err.Error())
	}
}

// Embed: dst[i] = table[ids[i]]. table [vocab, d], dst [len(ids), d]; a
// BF16 or F16 table's picked rows are converted.
func (b *Backend) Embed(dst, table backend.Tensor, ids []int32) {
	d, t := writable(dst, "Embed"), anyTensor(table, "Embed")
	checked(backend.CheckEmbed(d, t, ids))
	b.parallel(len(ids), rowGrain(d.cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if t.bf16 != nil {
				bf16Rows(d.Row(i), t, int(ids[i]), int(ids[i])+1)
			} else if t.f16 != nil {
				f16Rows(d.Row(i), t, int(ids[i]), int(ids[i])+1)
			} else if t.q != nil {
				quantRows(d.Row(i), t, int(ids[i]), int(ids[i])+1)
			} else {
				copy(d.Row(i), t.Row(int(ids[i])))
			}
		}
	})
}

// RMSNorm: dst[i] = x[i] / sqrt(mean(x[i]²) + eps) * w. w [1, d].
// The mean of squares is accumulated in float64.
func (b *Backend) RMSNorm(dst, x, w backend.Tensor, eps float32) {
	d, xs, ws := writable(dst, "RMSNorm"), tensor(x, "RMSNorm"), tensor(w, "RMSNorm")
	checked(backend.CheckRMSNorm(d, xs, ws))
	cols := xs.cols
	if cols == 0 {
		return
	}
	b.parallel(xs.rows, rowGrain(cols), func(lo, hi int) {
		rmsNormRows(!b.scalarOps, d, xs, ws, lo, hi, eps)
	})
}

// RoPE rotates x [n, heads*headDim] in place, row i at position pos[i]
// (rotate-half form): for j < headDim/2, with θ_j = pos·theta^(-2j/headDim)
// computed in float64 (and cached per headDim and theta for positions
// below 16384),
//
//	x[j]           ← x[j]·cos θ_j − x[j+headDim/2]·sin θ_j
//	x[j+headDim/2] ← x[j+headDim/2]·cos θ_j + x[j]·sin θ_j
func (b *Backend) RoPE(x backend.Tensor, pos []int32, headDim int, theta float64) {
	xs := writable(x, "RoPE")
	checked(backend.CheckRoPE(xs, pos, headDim))
	rope := b.ropeFor(pos, headDim, theta)
	b.parallel(xs.rows, rowGrain(xs.cols), func(lo, hi int) { rope.rows(xs, lo, hi) })
}

// SiLUMul: dst = silu(gate) * up = gate/(1+e^-gate) * up. dst may alias gate.
func (b *Backend) SiLUMul(dst, gate, up backend.Tensor) {
	d, g, u := writable(dst, "SiLUMul"), tensor(gate, "SiLUMul"), tensor(up, "SiLUMul")
	checked(backend.CheckSiLUMul(d, g, u))
	cols := g.cols
	b.parallel(g.rows, rowGrain(cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			siluMul(d.Row(i), g.Row(i), u.Row(i))
		}
	})
}

// Add: dst += x, elementwise.
func (b *Backend) Add(dst, x backend.Tensor) {
	d, xs := writable(dst, "Add"), tensor(x, "Add")
	checked(backend.CheckAdd(d, xs))
	b.parallel(d.rows, rowGrain(d.cols), func(lo, hi int) {
		addRows(!b.scalarOps, d, xs, lo, hi)
	})
}

// CopyRows: dst[dstRows[i]] = src[srcRows[i]] for every i. A nil index list
// means 0, 1, 2, …; when both are nil, min(rows) rows are copied. When
// dstRows repeats a row, the last copy to it wins.
func (b *Backend) CopyRows(dst backend.Tensor, dstRows []int32, src backend.Tensor, srcRows []int32) {
	d, s := writableRows(dst, "CopyRows"), tensor(src, "CopyRows")
	n, err := backend.CheckCopyRows(d, dstRows, s, srcRows)
	checked(err)
	// Only NewKV's pairs track their writes: no scan of dstRows elsewhere.
	if d.kv != nil {
		if dstRows == nil {
			d.written(0)
		} else if n > 0 {
			d.written(int(slices.Min(dstRows)))
		}
	}
	grain := rowGrain(d.cols)
	if hasDuplicate(dstRows, d.rows) {
		grain = n // serial: the last copy to a row wins, as in a plain loop
	}
	b.parallel(n, grain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			di, si := i, i
			if dstRows != nil {
				di = int(dstRows[i])
			}
			if srcRows != nil {
				si = int(srcRows[i])
			}
			copy(d.Row(di), s.Row(si))
		}
	})
}

// hasDuplicate reports whether idx (values in [0, rows)) repeats a value.
func hasDuplicate(idx []int32, rows int) bool {
	if len(idx) < 2 {
		return false
	}
	seen := make([]uint64, (rows+63)/64)
	for _, r := range idx {
		w, bit := r/64, uint64(1)<<(r%64)
		if seen[w]&bit != 0 {
			return true
		}
		seen[w] |= bit
	}
	return false
}

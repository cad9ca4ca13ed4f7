package cpu

import (
	"fmt"
	"unsafe"

	"github.com/dlmcache/dlmcache/model/backend"
)

// PermuteRows implements backend.RowPermuter. A weight still in the
// memory map keeps its bytes where they are and records perm: MatMul then
// moves each product's output columns to the matrix's order (one pass
// over the output, against the product's pass over the weight), and
// ToHost its rows; its layouts made at load from the stored rows (for
// bf16mm.c, packed for oneDNN) are multiplied the same way. A weight the
// backend holds a copy of has the copy's rows reordered in place (and
// packed for oneDNN or laid out for the blocked panel kernel again, where
// it was). One laid out for the panel
// kernel, or a view, is declined.
func (b *Backend) PermuteRows(w backend.Tensor, perm []int32) bool {
	t := anyTensor(w, "PermuteRows")
	if err := checkPerm(perm, t.rows); err != nil {
		panic(fmt.Sprintf("cpu: PermuteRows of %v: %v", t, err))
	}
	if t.panels != nil || t.kv != nil || t.pooled || t.perm != nil || t.stride != t.cols || t.rows < 2 {
		return false
	}
	if t.readOnly {
		t.perm = append([]int32(nil), perm...)
		return true
	}
	// A copy's layouts (for oneDNN, the blocked panel kernel; the others
	// are made only of weights in the map) are made again from the
	// reordered rows.
	packed, packedBF16, laid := t.packed != nil, t.packed != nil && t.packed.bf16, t.wgl != nil
	b.dropLayout(t)
	defer func() {
		switch {
		case packedBF16:
			b.pack(t, true, unsafe.Pointer(&t.bf16[0]))
		case packed:
			b.pack(t, false, unsafe.Pointer(&t.data[0]))
		case laid:
			b.layOutWG(t)
		}
	}()
	switch {
	case t.q != nil:
		permuteRowsInPlace(t.q, t.qStride, perm)
	case t.bf16 != nil:
		permuteRowsInPlace(t.bf16, t.stride, perm)
	case t.f16 != nil:
		permuteRowsInPlace(t.f16, t.stride, perm)
	default:
		permuteRowsInPlace(t.data, t.stride, perm)
	}
	return true
}

var _ backend.RowPermuter = (*Backend)(nil)

// checkPerm reports whether perm is a permutation of 0..n-1.
func checkPerm(perm []int32, n int) error {
	if len(perm) != n {
		return fmt.Errorf("%d entries for %d rows", len(perm), n)
	}
	seen := make([]bool, n)
	for s, p := range perm {
		if p < 0 || int(p) >= n || seen[p] {
			return fmt.Errorf("entry %d (%d) is out of range or repeated: not a permutation", s, p)
		}
		seen[p] = true
	}
	return nil
}

// permuteRowsInPlace moves row s of s's rows (stride elements each) to
// row perm[s], following each cycle of perm with two rows of scratch.
func permuteRowsInPlace[T any](x []T, stride int, perm []int32) {
	carry, next := make([]T, stride), make([]T, stride)
	done := make([]bool, len(perm))
	for start := range perm {
		if done[start] {
			continue
		}
		copy(carry, x[start*stride:(start+1)*stride])
		for cur := start; !done[cur]; {
			done[cur] = true
			dst := int(perm[cur])
			row := x[dst*stride : (dst+1)*stride]
			copy(next, row)
			copy(row, carry)
			carry, next = next, carry
			cur = dst
		}
	}
}

// permuteCols puts the first len(perm) columns of d's first n rows in the
// matrix's order: column s (the product with stored row s of a permuted
// weight) moves to column perm[s].
func (b *Backend) permuteCols(d *Tensor, n int, perm []int32) {
	b.parallel(n, rowGrain(len(perm)), func(lo, hi int) {
		buf := b.bufs.scratch(len(perm))
		for r := lo; r < hi; r++ {
			row := d.data[r*d.stride : r*d.stride+len(perm)]
			copy(buf, row)
			for s, c := range perm {
				row[c] = buf[s]
			}
		}
		b.bufs.put(buf)
	})
}

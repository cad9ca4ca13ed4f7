package cpu

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// permuted returns raw's rows (rowBytes each) in stored order: stored row
// s is row perm[s] of raw.
func permuted(raw []byte, rowBytes int, perm []int32) []byte {
	out := make([]byte, len(raw))
	for s, p := range perm {
		copy(out[s*rowBytes:(s+1)*rowBytes], raw[int(p)*rowBytes:(int(p)+1)*rowBytes])
	}
	return out
}

// TestPermuteRows: a weight made from rows stored out of order and handed
// to PermuteRows multiplies and reads back exactly as the weight made from
// the rows in order — F32, F16, BF16, Q8_0 and Q4_0; in the memory map
// (aligned bytes: the bytes untouched, the product's columns moved) and
// copied (unaligned bytes: the copy reordered); a weight laid out for the
// panel kernel is declined, changing nothing.
func TestPermuteRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows = 48
	for _, cols := range []int{64, 1056} {
		perm := make([]int32, rows)
		for i, p := range rng.Perm(rows) {
			perm[i] = int32(p)
		}
		x := make([]float32, 9*cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		vals := make([]float32, rows*cols)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64())
		}
		for _, kind := range []string{"F32", "F16", "BF16", "Q8_0", "Q4_0"} {
			var raw []byte
			var make func(b *Backend, raw []byte) (backend.Tensor, error)
			switch kind {
			case "F32":
				raw = safetensors.F32ToBytes(vals)
				make = func(b *Backend, raw []byte) (backend.Tensor, error) { return b.Weight(backend.F32, rows, cols, raw) }
			case "F16", "BF16":
				dt := backend.F16
				raw = safetensors.F32ToF16(vals)
				if kind == "BF16" {
					dt, raw = backend.BF16, safetensors.F32ToBF16(vals)
				}
				make = func(b *Backend, raw []byte) (backend.Tensor, error) { return b.Weight(dt, rows, cols, raw) }
			default:
				typ := map[string]backend.QuantType{"Q8_0": backend.Q8_0, "Q4_0": backend.Q4_0}[kind]
				raw, _ = quantWeight(t, rng, typ, rows, cols)
				make = func(b *Backend, raw []byte) (backend.Tensor, error) { return b.WeightQuant(typ, rows, cols, raw) }
			}
			rowBytes := len(raw) / rows
			for _, panel := range []bool{false, true} {
				for _, aligned := range []bool{true, false} {
					name := strings.Join([]string{kind, map[bool]string{true: "panels", false: "no panels"}[panel],
						map[bool]string{true: "mapped", false: "copied"}[aligned]}, ", ")
					b := New(2)
					b.panel = b.panel && panel
					// The weight in order, held as the stored one is (a BF16
					// one in place is laid out for bf16mm.c, a copy not), so
					// that both multiply on the same kernel.
					in := raw
					if !aligned {
						in = append([]byte{0}, raw...)[1:]
					}
					ref, err := make(b, in)
					if err != nil {
						t.Fatal(err)
					}
					stored := permuted(raw, rowBytes, perm)
					if !aligned {
						stored = append([]byte{0}, stored...)[1:]
					}
					kept := slices.Clone(stored)
					w, err := make(b, stored)
					if err != nil {
						t.Fatal(err)
					}
					laid := w.(*Tensor).panels != nil
					if !b.PermuteRows(w, perm) {
						if !laid {
							t.Fatalf("%s, %d columns: declined a weight not laid out", name, cols)
						}
						if w.(*Tensor).perm != nil || !slices.Equal(stored, kept) {
							t.Fatalf("%s, %d columns: declined but changed the weight", name, cols)
						}
						continue
					}
					if laid {
						t.Fatalf("%s, %d columns: permuted a weight laid out for the panel kernel", name, cols)
					}
					if mapped := w.(*Tensor).readOnly; mapped != w.(*Tensor).Permuted() || mapped && !slices.Equal(stored, kept) {
						t.Fatalf("%s, %d columns: in the map %v, permuted %v, bytes kept %v", name, cols, mapped, w.(*Tensor).Permuted(), slices.Equal(stored, kept))
					}
					if !equalF32(b.ToHost(w, nil), b.ToHost(ref, nil)) {
						t.Fatalf("%s, %d columns: ToHost differs from the weight in order", name, cols)
					}
					xs := b.FromHost(9, cols, x)
					got, want := b.New(9, rows), b.New(9, rows)
					b.MatMul(got, xs, w)
					b.MatMul(want, xs, ref)
					if !equalF32(b.ToHost(got, nil), b.ToHost(want, nil)) {
						t.Fatalf("%s, %d columns: products differ from the weight in order's", name, cols)
					}
					if w.(*Tensor).readOnly && b.PermuteRows(w, perm) {
						t.Fatalf("%s, %d columns: permuted twice", name, cols)
					}
				}
			}
		}
	}
}

// TestPermuteRowsChecks: a table that is not a permutation of the rows
// panics naming it; a row view of a permuted weight panics (its rows are
// not the matrix's); permuteRowsInPlace follows every cycle.
func TestPermuteRowsChecks(t *testing.T) {
	b := New(1)
	w, err := b.Weight(backend.F32, 3, 1100, make([]byte, 4*3*1100))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]int32{{0, 1}, {0, 1, 1}, {0, 1, 3}, {-1, 0, 1}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "PermuteRows") {
					t.Errorf("%v: recovered %v", bad, r)
				}
			}()
			b.PermuteRows(w, bad)
		}()
	}
	if !b.PermuteRows(w, []int32{2, 0, 1}) {
		t.Fatal("declined")
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "out of order") {
				t.Errorf("RowView of a permuted weight: recovered %v", r)
			}
		}()
		b.RowView(w, 0, 1)
	}()
	x := []int{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}
	permuteRowsInPlace(x, 2, []int32{3, 0, 1, 2, 5, 4})
	if want := []int{12, 13, 14, 15, 16, 17, 10, 11, 20, 21, 18, 19}; !slices.Equal(x, want) {
		t.Errorf("permuteRowsInPlace: %v, want %v", x, want)
	}
}

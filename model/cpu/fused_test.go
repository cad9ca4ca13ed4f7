package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/dlmcache/dlmcache/model/backend"
)

// TestFusedHalvesEqualTheOpsOneByOne runs the fused layer halves on every backend configuration
// against the operations they fuse, called one after the other on the same
// backend: where a backend fuses (its weights laid out for the panel
// kernel) every value must be identical, since each element goes through
// the same kernels in the same order; elsewhere the call must decline and
// leave its outputs alone. Row counts cover one row, part of a block, a
// whole block, a block and one row and several blocks with a tail (split
// over goroutines on the two-thread backends); positions include ones past
// the cached RoPE angles and a negative one.
func TestFusedHalvesEqualTheOpsOneByOne(t *testing.T) {
	const d, heads, kvHeads, hd, hidden = 64, 4, 2, 16, 192
	const eps = 1e-5
	r := rand.New(rand.NewPCG(7, 7))
	wq, wk, wv := randMat(r, d, d, 0.2), randMat(r, kvHeads*hd, d, 0.2), randMat(r, kvHeads*hd, d, 0.2)
	wo, gate, up, down := randMat(r, d, d, 0.2), randMat(r, hidden, d, 0.2), randMat(r, hidden, d, 0.2), randMat(r, d, hidden, 0.1)
	an, fn := randMat(r, 1, d, 1), randMat(r, 1, d, 1)
	for _, nb := range backends() {
		b := nb.b
		w := func(rows, cols int, v []float32) backend.Tensor { return weightF32(t, b, rows, cols, v) }
		Wq, Wk, Wv, Wo := w(d, d, wq), w(kvHeads*hd, d, wk), w(kvHeads*hd, d, wv), w(d, d, wo)
		G, U, D := w(hidden, d, gate), w(hidden, d, up), w(d, hidden, down)
		AN, FN := b.FromHost(1, d, an), b.FromHost(1, d, fn)
		fuses := Wq.(*Tensor).panels != nil
		for _, rows := range []int{1, 7, fusedRows, fusedRows + 1, 3*fusedRows + 10} {
			t.Run(fmt.Sprintf("%s/rows%d", nb.name, rows), func(t *testing.T) {
				xv := randMat(r, rows, d, 1)
				pos := make([]int32, rows)
				for i := range pos {
					pos[i] = int32(r.IntN(600))
				}
				pos[rows-1] = maxRopePositions + 3
				if rows > 2 {
					pos[1] = -5
				}

				// AttnInput against RMSNorm, three products and RoPE.
				x := b.FromHost(rows, d, xv)
				nrm, q, k, v := b.New(rows, d), b.New(rows, d), b.New(rows, kvHeads*hd), b.New(rows, kvHeads*hd)
				b.RMSNorm(nrm, x, AN, eps)
				b.MatMul(q, nrm, Wq)
				b.MatMul(k, nrm, Wk)
				b.MatMul(v, nrm, Wv)
				b.RoPE(q, pos, hd, 10000)
				b.RoPE(k, pos, hd, 10000)
				fq, fk, fv := b.New(rows, d), b.New(rows, kvHeads*hd), b.New(rows, kvHeads*hd)
				if got := b.AttnInput(fq, fk, fv, x, AN, Wq, Wk, Wv, pos, hd, 10000, eps); got != fuses {
					t.Fatalf("AttnInput ran: %v, want %v (weights laid out for the panel kernel: %v)", got, fuses, fuses)
				}
				if !fuses {
					for _, z := range []backend.Tensor{fq, fk, fv} {
						if slices.ContainsFunc(b.ToHost(z, nil), func(f float32) bool { return f != 0 }) {
							t.Fatal("AttnInput declined but wrote its outputs")
						}
					}
				} else {
					for _, c := range []struct {
						name      string
						got, want backend.Tensor
					}{{"q", fq, q}, {"k", fk, k}, {"v", fv, v}} {
						if g, w := b.ToHost(c.got, nil), b.ToHost(c.want, nil); !slices.Equal(g, w) {
							i := testutil.FirstDiff(g, w)
							t.Fatalf("AttnInput %s[%d] = %g, the operations give %g", c.name, i, g[i], w[i])
						}
					}
				}

				// BlockOutput against the output projection, the residual
				// adds, RMSNorm, the MLP's products and SiLU.
				att := b.FromHost(rows, d, randMat(r, rows, d, 1))
				want := b.FromHost(rows, d, xv)
				o, mm, g, u, y := b.New(rows, d), b.New(rows, d), b.New(rows, hidden), b.New(rows, hidden), b.New(rows, d)
				b.MatMul(o, att, Wo)
				b.Add(want, o)
				b.RMSNorm(mm, want, FN, eps)
				b.MatMul(g, mm, G)
				b.MatMul(u, mm, U)
				b.SiLUMul(g, g, u)
				b.MatMul(y, g, D)
				b.Add(want, y)
				got := b.FromHost(rows, d, xv)
				if ran := b.BlockOutput(got, att, Wo, FN, G, U, D, eps); ran != fuses {
					t.Fatalf("BlockOutput ran: %v, want %v", ran, fuses)
				}
				gv, wv := b.ToHost(got, nil), b.ToHost(want, nil)
				if !fuses {
					wv = xv
				}
				if !slices.Equal(gv, wv) {
					i := testutil.FirstDiff(gv, wv)
					t.Fatalf("BlockOutput x[%d] = %g, want %g", i, gv[i], wv[i])
				}
			})
		}
	}
}

// BenchmarkFused: the bundled model's layer halves over the rows of a
// batched forward (16 canvases of ≈ 263 rows), fused against the same
// operations one after the other, GFLOP/s of their products. Each
// iteration runs the 8 layers' halves, each with weights of its own, as a
// forward does (one layer's weights stay in cache from call to call; a
// forward's do not).
//
//	go test ./model/cpu -run '^$' -bench Fused -benchtime 20x
func BenchmarkFused(b *testing.B) {
	const d, hd, hidden, rows, layers = 128, 32, 384, 4208, 8
	r := rand.New(rand.NewPCG(1, 1))
	bk := New(0)
	w := func(rows, cols int, scale float64) backend.Tensor {
		return weightF32(b, bk, rows, cols, randMat(r, rows, cols, scale))
	}
	type layer struct{ q, k, v, o, g, u, d, an, fn backend.Tensor }
	var ls []layer
	for range layers {
		ls = append(ls, layer{w(d, d, 0.1), w(d, d, 0.1), w(d, d, 0.1), w(d, d, 0.1), w(hidden, d, 0.1), w(hidden, d, 0.1),
			w(d, hidden, 0.05), bk.FromHost(1, d, randMat(r, 1, d, 1)), bk.FromHost(1, d, randMat(r, 1, d, 1))})
	}
	x, att := bk.FromHost(rows, d, randMat(r, rows, d, 1)), bk.FromHost(rows, d, randMat(r, rows, d, 1))
	pos := make([]int32, rows)
	for i := range pos {
		pos[i] = int32(i % 263)
	}
	q, k, v, nrm := bk.New(rows, d), bk.New(rows, d), bk.New(rows, d), bk.New(rows, d)
	o, g, u := bk.New(rows, d), bk.New(rows, hidden), bk.New(rows, hidden)
	in := map[bool]func(l layer){
		true: func(l layer) { bk.AttnInput(q, k, v, x, l.an, l.q, l.k, l.v, pos, hd, 1e4, 1e-5) },
		false: func(l layer) {
			bk.RMSNorm(nrm, x, l.an, 1e-5)
			bk.MatMul(q, nrm, l.q)
			bk.MatMul(k, nrm, l.k)
			bk.MatMul(v, nrm, l.v)
			bk.RoPE(q, pos, hd, 1e4)
			bk.RoPE(k, pos, hd, 1e4)
		},
	}
	out := map[bool]func(l layer){
		true: func(l layer) { bk.BlockOutput(x, att, l.o, l.fn, l.g, l.u, l.d, 1e-5) },
		false: func(l layer) {
			bk.MatMul(o, att, l.o)
			bk.Add(x, o)
			bk.RMSNorm(nrm, x, l.fn, 1e-5)
			bk.MatMul(g, nrm, l.g)
			bk.MatMul(u, nrm, l.u)
			bk.SiLUMul(g, g, u)
			bk.MatMul(o, g, l.d)
			bk.Add(x, o)
		},
	}
	for _, fused := range []bool{false, true} {
		name := map[bool]string{false: "ops", true: "fused"}[fused]
		b.Run("AttnInput/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for _, l := range ls {
					in[fused](l)
				}
			}
			gflops(b, layers*2*rows*d*3*d)
		})
		b.Run("BlockOutput/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for _, l := range ls {
					out[fused](l)
				}
			}
			gflops(b, layers*2*rows*d*(d+3*hidden))
		})
	}
}

// TestAttentionBatch: the attentions of a batch (of different query and
// key counts, one request a single row, one computing part of its rows)
// as one operation give, on every backend configuration, exactly what
// Attention gives for each: each query row goes through the same kernel
// whatever block it falls in.
func TestAttentionBatch(t *testing.T) {
	checkAttentionBatch(t, 4, 2, 16, rand.New(rand.NewPCG(3, 3)), []attnSize{{37, 37}, {1, 20}, {150, 150}, {60, 203}, {6, 6}})
}

// attnSize is one attention's query and key counts.
type attnSize struct{ nq, nk int }

// checkAttentionBatch runs random attentions of the sizes as one batch on
// every backend configuration and checks each against Attention, bit for
// bit.
func checkAttentionBatch(t *testing.T, heads, kvHeads, hd int, r *rand.Rand, sizes []attnSize) {
	t.Helper()
	for _, nb := range backends() {
		t.Run(nb.name, func(t *testing.T) {
			b := nb.b
			var dst, q, k, v []backend.Tensor
			for _, s := range sizes {
				dst = append(dst, b.New(s.nq, heads*hd))
				q = append(q, b.FromHost(s.nq, heads*hd, randMat(r, s.nq, heads*hd, 1)))
				k = append(k, b.FromHost(s.nk, kvHeads*hd, randMat(r, s.nk, kvHeads*hd, 1)))
				v = append(v, b.FromHost(s.nk, kvHeads*hd, randMat(r, s.nk, kvHeads*hd, 1)))
			}
			b.AttentionBatch(dst, q, k, v, heads, kvHeads)
			for i := range sizes {
				want := b.New(sizes[i].nq, heads*hd)
				b.Attention(want, q[i], k[i], v[i], heads, kvHeads)
				if g, w := b.ToHost(dst[i], nil), b.ToHost(want, nil); !slices.Equal(g, w) {
					j := testutil.FirstDiff(g, w)
					t.Fatalf("attention %d (nq %d, nk %d): element %d = %g, Attention gives %g", i, sizes[i].nq, sizes[i].nk, j, g[j], w[j])
				}
			}
		})
	}
}

// TestAttentionBatchSharedKeys: attentions over leading rows of the same
// keys and values (a block-causal request's attention blocks, each over
// the key prefix through its block), in a batch with another request's,
// share one layout of those keys and give exactly what Attention gives
// for each, the longest listed first or last.
func TestAttentionBatchSharedKeys(t *testing.T) {
	const heads, kvHeads, hd, nk = 4, 2, 32, 100 // hd 32: v in two column panels
	r := rand.New(rand.NewPCG(6, 6))
	for _, nb := range backends() {
		t.Run(nb.name, func(t *testing.T) {
			b := nb.b
			K := b.FromHost(nk, kvHeads*hd, randMat(r, nk, kvHeads*hd, 1))
			V := b.FromHost(nk, kvHeads*hd, randMat(r, nk, kvHeads*hd, 1))
			other := attnSize{10, 30}
			oK := b.FromHost(other.nk, kvHeads*hd, randMat(r, other.nk, kvHeads*hd, 1))
			oV := b.FromHost(other.nk, kvHeads*hd, randMat(r, other.nk, kvHeads*hd, 1))
			for _, sizes := range [][]attnSize{{{32, 40}, {20, 100}, {7, 64}, other}, {{20, 100}, other, {32, 40}, {7, 64}, {5, 100}}} {
				var dst, q, k, v []backend.Tensor
				for _, s := range sizes {
					dst = append(dst, b.New(s.nq, heads*hd))
					q = append(q, b.FromHost(s.nq, heads*hd, randMat(r, s.nq, heads*hd, 1)))
					if s == other {
						k, v = append(k, oK), append(v, oV)
					} else {
						k, v = append(k, b.RowView(K, 0, s.nk)), append(v, b.RowView(V, 0, s.nk))
					}
				}
				b.AttentionBatch(dst, q, k, v, heads, kvHeads)
				for i, s := range sizes {
					want := b.New(s.nq, heads*hd)
					b.Attention(want, q[i], k[i], v[i], heads, kvHeads)
					if g, w := b.ToHost(dst[i], nil), b.ToHost(want, nil); !slices.Equal(g, w) {
						j := testutil.FirstDiff(g, w)
						t.Fatalf("attention %d of %v: element %d = %g, Attention gives %g", i, sizes, j, g[j], w[j])
					}
				}
			}
		})
	}
}

// TestAttentionBatchMixedStrides: a batch whose attentions' key counts
// give the kernel's scratch its largest need at a middle stride (672 keys:
// 48 rows a block; 1,000 keys: 30) runs within the scratch the team
// allots, and each attention is what Attention gives.
func TestAttentionBatchMixedStrides(t *testing.T) {
	checkAttentionBatch(t, 4, 4, 16, rand.New(rand.NewPCG(4, 4)), []attnSize{{48, 1000}, {48, 672}, {48, 672}})
}

// TestTeamConcurrentPosters: goroutines posting fused operations and
// batched attentions at once (one gets the team, the others run their
// tasks alone on their own threads) get what each gets alone.
func TestTeamConcurrentPosters(t *testing.T) {
	if !simd {
		t.Skip("no AVX2: no panel kernel, the fused operations decline")
	}
	const d, hidden, rows, heads, hd = 64, 192, 200, 4, 16
	b := NewWithOptions(Options{Threads: 2, GEMM: GEMMOpenBLAS})
	b.panel = true
	r := rand.New(rand.NewPCG(5, 5))
	w := func(rows, cols int) backend.Tensor { return weightF32(t, b, rows, cols, randMat(r, rows, cols, 0.2)) }
	Wo, G, U, D := w(d, d), w(hidden, d), w(hidden, d), w(d, hidden)
	FN := b.FromHost(1, d, randMat(r, 1, d, 1))
	xv, av := randMat(r, rows, d, 1), randMat(r, rows, d, 1)
	q, k, v := b.FromHost(rows, d, randMat(r, rows, d, 1)), b.FromHost(rows, d, randMat(r, rows, d, 1)), b.FromHost(rows, d, randMat(r, rows, d, 1))
	run := func() ([]float32, []float32) {
		x, att := b.FromHost(rows, d, xv), b.FromHost(rows, d, av)
		if !b.BlockOutput(x, att, Wo, FN, G, U, D, 1e-5) {
			t.Error("BlockOutput declined")
		}
		o := b.New(rows, d)
		b.AttentionBatch([]backend.Tensor{o}, []backend.Tensor{q}, []backend.Tensor{k}, []backend.Tensor{v}, heads, heads)
		return b.ToHost(x, nil), b.ToHost(o, nil)
	}
	wantX, wantO := run()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 5 {
				x, o := run()
				if !slices.Equal(x, wantX) || !slices.Equal(o, wantO) {
					t.Errorf("poster %d: results differ from the sequential run", g)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestAttentionKeptLayout: attention over NewKV's pair, whose layout is
// kept across calls and laid out again only from the rows written since
// (CopyRows's rows, any other operation's whole destination, a view's from
// its first row), gives bit for bit what attention over the same values in
// plain tensors gives, on every backend config: keys after a write in the
// middle of a 16-key panel, a write before the keys laid out, to the
// values alone, through a view, an attention over fewer keys than laid
// out, and batches whose attentions share the pair's layout beside a plain
// one. hd 32: v in two column panels.
func TestAttentionKeptLayout(t *testing.T) {
	const heads, kvHeads, hd, n = 4, 2, 32, 100
	cols := kvHeads * hd
	for _, nb := range backends() {
		t.Run(nb.name, func(t *testing.T) {
			b := nb.b
			r := rand.New(rand.NewPCG(7, 7))
			K, V := b.NewKV(n, cols)
			defer b.Free(K)
			defer b.Free(V)
			rk, rv := b.New(n, cols), b.New(n, cols) // the same values, plain
			other, oV := b.FromHost(30, cols, randMat(r, 30, cols, 1)), b.FromHost(30, cols, randMat(r, 30, cols, 1))
			// write puts random values in rows (nil: all) of the pair's
			// keys and values (which) and of the plain copies.
			write := func(rows []int32, which ...backend.Tensor) {
				m := n
				if rows != nil {
					m = len(rows)
				}
				src := b.FromHost(m, cols, randMat(r, m, cols, 1))
				for _, w := range which {
					ref := rk
					if w == V {
						ref = rv
					}
					b.CopyRows(w, rows, src, nil)
					b.CopyRows(ref, rows, src, nil)
				}
			}
			check := func(step string, nks ...int) {
				t.Helper()
				var dst, q, k, v, want []backend.Tensor
				for _, nk := range append(nks, 0) {
					kk, vv := other, oV // 0: a plain attention beside the pair's
					if nk > 0 {
						kk, vv = b.RowView(K, 0, nk), b.RowView(V, 0, nk)
					}
					nq := 9 + nk%7
					dst, q, k, v = append(dst, b.New(nq, heads*hd)), append(q, b.FromHost(nq, heads*hd, randMat(r, nq, heads*hd, 1))), append(k, kk), append(v, vv)
					w := b.New(nq, heads*hd)
					if nk > 0 {
						kk, vv = b.RowView(rk, 0, nk), b.RowView(rv, 0, nk)
					}
					b.Attention(w, q[len(q)-1], kk, vv, heads, kvHeads)
					want = append(want, w)
				}
				if len(nks) == 1 {
					b.Attention(dst[0], q[0], k[0], v[0], heads, kvHeads)
					dst, want = dst[:1], want[:1]
				} else {
					b.AttentionBatch(dst, q, k, v, heads, kvHeads)
				}
				for i := range dst {
					if g, w := b.ToHost(dst[i], nil), b.ToHost(want[i], nil); !slices.Equal(g, w) {
						j := testutil.FirstDiff(g, w)
						t.Fatalf("%s, attention %d of %v: element %d = %g, plain tensors give %g", step, i, nks, j, g[j], w[j])
					}
				}
				// On the fused kernels the pair's attentions went through
				// its kept layout.
				if l := K.(*Tensor).kv; b.attn != attnNone && (l.buf == nil || l.valid < slices.Max(nks)) {
					t.Fatalf("%s: the kept layout was not used (%d keys laid out)", step, l.valid)
				}
			}
			write(nil, K, V)
			check("all written", 40)
			check("more keys", 70, 50)
			write(iota32(37, 70), K, V)
			check("rows 37..69 written", 70, 50, 100)
			check("fewer keys than laid out", 30)
			write([]int32{5}, K)
			check("one key before those laid out", 60)
			write(iota32(80, 90), V)
			check("values alone", 100)
			x := b.FromHost(10, cols, randMat(r, 10, cols, 1))
			b.Add(b.RowView(K, 20, 30), x)
			b.Add(b.RowView(rk, 20, 30), x)
			check("an Add through a view", 100, 25)
		})
	}
}

// iota32 is lo, lo+1, …, hi-1.
func iota32(lo, hi int) []int32 {
	r := make([]int32, 0, hi-lo)
	for i := lo; i < hi; i++ {
		r = append(r, int32(i))
	}
	return r
}

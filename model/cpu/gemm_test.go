package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model/backend"
)

func TestParseGEMM(t *testing.T) {
	for _, c := range []struct {
		in   string
		want GEMMLib
		ok   bool
	}{
		{"", GEMMAuto, true}, {"auto", GEMMAuto, true}, {"OpenBLAS", GEMMOpenBLAS, true},
		{" onednn ", GEMMOneDNN, true}, {"mkl", "", false}, {"blis", "", false},
	} {
		got, err := ParseGEMM(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseGEMM(%q) = %q, %v; want %q (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestNewFromEnvGEMM(t *testing.T) {
	t.Setenv(GEMMEnv, "mkl")
	if _, err := NewFromEnv(1); err == nil || !strings.Contains(err.Error(), GEMMEnv) {
		t.Fatalf("%s=mkl: err %v, want one naming the variable", GEMMEnv, err)
	}
	t.Setenv(GEMMEnv, "openblas")
	b, err := NewFromEnv(1)
	if err != nil {
		t.Fatal(err)
	}
	if b.dnnl || b.dnnlBF16 || !strings.Contains(b.GEMM(), "OpenBLAS") {
		t.Fatalf("openblas: dnnl %v, bf16 %v, %q", b.dnnl, b.dnnlBF16, b.GEMM())
	}
	t.Setenv(GEMMEnv, "onednn")
	b, err = NewFromEnv(1)
	if s := dnnlProbe(); s.err != nil {
		if err == nil {
			t.Fatalf("onednn without oneDNN (%v): no error", s.err)
		}
		t.Skipf("oneDNN: %v", s.err)
	} else if s.isa < dnnlISAAVX512Core {
		if err == nil {
			t.Fatalf("onednn without AVX-512 kernels: no error")
		}
		t.Skipf("SKIPPED: oneDNN: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !b.dnnl || !strings.HasPrefix(b.GEMM(), "oneDNN") || b.dnnlBF16 != (dnnlProbe().bf16Err == nil) {
		t.Fatalf("onednn: dnnl %v, bf16 %v, %q", b.dnnl, b.dnnlBF16, b.GEMM())
	}
	t.Logf("%s", b.GEMM())
}

// TestToBF16 checks the activations' rounding against a Go reference:
// to nearest, ties to even, NaN kept NaN, infinities and overflow to ∞.
func TestToBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.00390625, 1.01171875, // ties: to 1, to 1.015625
		math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40}
	for range 1000 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	const cols = 7
	rows := (len(src) + cols - 1) / cols
	src = append(src, make([]float32, rows*cols-len(src))...)
	got := make([]uint16, len(src))
	toBF16(got, src, rows, cols, cols)
	for i, v := range src {
		want := refBF16(v)
		if math.IsNaN(float64(v)) {
			if g := math.Float32frombits(uint32(got[i]) << 16); !math.IsNaN(float64(g)) {
				t.Fatalf("%g → %#04x, want a NaN", v, got[i])
			}
			continue
		}
		if got[i] != want {
			t.Fatalf("%g (%#08x) → %#04x, want %#04x", v, math.Float32bits(v), got[i], want)
		}
	}
}

// refBF16 rounds v to the nearest BF16 (ties to even) with float64
// arithmetic: of the two BF16 values around v, the nearer.
func refBF16(v float32) uint16 {
	bits := math.Float32bits(v)
	lo := bits &^ 0xffff
	hi := lo + 0x10000
	dl := math.Abs(float64(v) - float64(math.Float32frombits(lo)))
	if math.IsInf(float64(math.Float32frombits(hi)), 0) && (hi>>23)&0xff == 0xff && (lo>>23)&0xff != 0xff {
		// Rounding up overflows to ∞: compare against 2¹²⁸ as if representable.
		dh := math.Abs(math.Ldexp(math.Copysign(1, float64(v)), 128) - float64(v))
		if dh < dl || dh == dl && (lo>>16)&1 == 1 {
			return uint16(hi >> 16)
		}
		return uint16(lo >> 16)
	}
	dh := math.Abs(float64(math.Float32frombits(hi)) - float64(v))
	if dh < dl || dh == dl && (lo>>16)&1 == 1 {
		return uint16(hi >> 16)
	}
	return uint16(lo >> 16)
}

// TestPackedWeights multiplies by F32 weights that Weight packed for
// oneDNN (in place in their bytes and copied from unaligned ones), and by
// views of them (which multiply the unpacked layout), against a float64
// reference; weights whose products run elsewhere (the panel kernel's,
// those too small for oneDNN: laid out for the blocked panel kernel
// instead) are not packed.
func TestPackedWeights(t *testing.T) {
	b, err := NewChecked(Options{Threads: 2, GEMM: GEMMOneDNN, PackWeights: true})
	if err != nil {
		t.Skip(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, s := range []struct{ in, out int }{{256, 96}, {1040, 2}} {
		w, err := b.Weight(backend.F32, s.out, s.in, make([]byte, 4*s.out*s.in))
		if err != nil {
			t.Fatal(err)
		}
		if w.(*Tensor).packed != nil {
			t.Errorf("[%d, %d] weight packed (panel kernel %v): its products do not run on oneDNN", s.out, s.in, b.panel)
		}
		if wide := s.in > panelMaxK; b.panel && wide != (w.(*Tensor).wgl != nil) {
			t.Errorf("[%d, %d] weight: laid out for the blocked panel kernel %v", s.out, s.in, w.(*Tensor).wgl != nil)
		}
	}
	for _, s := range []struct{ n, in, out int }{{1, 1040, 96}, {37, 1100, 65}, {300, 1056, 512}, {600, 1088, 384}} {
		wf := randMat(r, s.out, s.in, 1)
		raw := make([]byte, 4*len(wf)+1)
		for _, off := range []int{0, 1} { // aligned: in place; unaligned: copied
			buf := raw[off : off+4*len(wf)]
			for i, v := range wf {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
			}
			wt, err := b.Weight(backend.F32, s.out, s.in, buf)
			if err != nil {
				t.Fatal(err)
			}
			if wt.(*Tensor).packed == nil || wt.(*Tensor).AliasesRaw() {
				t.Fatalf("%v: weight not packed, or its bytes still read (%s)", s, b.GEMM())
			}
			x := randMat(r, s.n, s.in, 1)
			got := b.New(s.n, s.out)
			b.MatMul(got, b.FromHost(s.n, s.in, x), wt)
			closeTo(t, fmt.Sprintf("%v packed", s), b.ToHost(got, nil), refMatMul(x, wf, s.n, s.in, s.out), 1e-5*math.Sqrt(float64(s.in)), 1e-5)
			// A view: rows [3, out) and columns [0, in-1) of w.
			v := b.ColView(b.RowView(wt, 3, s.out), 0, s.in-1)
			xv := b.FromHost(s.n, s.in-1, randMat(r, s.n, s.in-1, 1))
			gv := b.New(s.n, s.out-3)
			b.MatMul(gv, xv, v)
			fv := b.New(s.n, s.out-3)
			b.MatMul(fv, xv, b.FromHost(s.out-3, s.in-1, b.ToHost(v, nil)))
			closeTo(t, fmt.Sprintf("%v view", s), b.ToHost(gv, nil), f64(b.ToHost(fv, nil)), 1e-5*math.Sqrt(float64(s.in)), 1e-5)
		}
	}
	if !strings.Contains(b.GEMM(), "weights packed") {
		t.Errorf("GEMM %q does not say the weights are packed", b.GEMM())
	}
}

func TestWeightsEnv(t *testing.T) {
	t.Setenv(WeightsEnv, "heap")
	if _, err := NewFromEnv(1); err == nil || !strings.Contains(err.Error(), WeightsEnv) {
		t.Fatalf("%s=heap: err %v", WeightsEnv, err)
	}
	for _, c := range []struct {
		env  string
		pack bool
	}{{"", true}, {"packed", true}, {"mapped", false}} {
		t.Setenv(WeightsEnv, c.env)
		b, err := NewFromEnv(1)
		if err != nil || b.packWeights != c.pack { // auto's pick, lazy: packing waits for a weight oneDNN takes
			t.Fatalf("%s=%q: %v, packWeights %v", WeightsEnv, c.env, err, b.packWeights)
		}
		if want := map[bool]WeightsForm{true: WeightsPacked, false: WeightsMapped}[c.pack]; !strings.HasPrefix(b.Weights(), string(want)+" (") {
			t.Errorf("%s=%q: Weights %q", WeightsEnv, c.env, b.Weights())
		}
	}
	t.Setenv(WeightsEnv, "packed")
	t.Setenv(GEMMEnv, "openblas")
	b, err := NewFromEnv(1)
	if err != nil || b.packWeights {
		t.Fatalf("packed on OpenBLAS: %v, packWeights %v (nothing to pack for)", err, b.packWeights)
	}
}

// TestGEMMSaysAttention: GEMM names the fused attention kernel when
// Attention runs on it, and not otherwise.
func TestGEMMSaysAttention(t *testing.T) {
	fused := NewWithOptions(Options{Threads: 1, GEMM: GEMMOpenBLAS})
	gemm := NewWithOptions(Options{Threads: 1, GEMM: GEMMOpenBLAS, Attention: AttentionGEMM})
	if want := "attention on the fused " + bestAttn.String() + " kernel"; bestAttn != attnNone && !strings.Contains(fused.GEMM(), want) {
		t.Errorf("fused, best kernel %v: %q", bestAttn, fused.GEMM())
	}
	if strings.Contains(gemm.GEMM(), "fused") {
		t.Errorf("gemm: %q", gemm.GEMM())
	}
	t.Setenv(AttentionEnv, "flash")
	if _, err := NewFromEnv(1); err == nil || !strings.Contains(err.Error(), AttentionEnv) || !strings.Contains(err.Error(), "fused or gemm") {
		t.Errorf("%s=flash: %v", AttentionEnv, err)
	}
	t.Setenv(AttentionEnv, "GEMM")
	if b, err := NewFromEnv(1); err != nil || b.attn != attnNone {
		t.Errorf("%s=GEMM: %v, fused %v", AttentionEnv, err, b != nil && b.attn != attnNone)
	}
}

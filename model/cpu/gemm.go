package cpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"
)

// GEMMEnv is the environment variable New reads to pick the library behind
// the backend's matrix products (ParseGEMM): "auto" (or unset), "openblas"
// or "onednn".
const GEMMEnv = "DLMCACHE_CPU_GEMM"

// GEMMLib names a library for the backend's matrix products.
type GEMMLib string

// The libraries a backend's products can run on.
const (
	// GEMMAuto uses oneDNN where it loads, passes its check against a
	// float64 reference, and has AVX-512 kernels for this CPU; OpenBLAS
	// otherwise. oneDNN is loaded and checked when a product first may
	// run on it, not at New (gemmPick.lazy). Where OpenBLAS runs AVX-512 kernels too (no
	// OPENBLAS_CORETYPE pin; Cooperlake's on a Zen 4) oneDNN still
	// measured faster: its matmul 201 against 166 GFLOP/s for the
	// backend's 512×2048×2048 product, the l16-d2048 step 4.57–4.82 s
	// against 4.99–5.09, and it has the AVX512-BF16 products OpenBLAS
	// lacks (docs/performance.md). make bench measures both. On a CPU
	// with AVX2 but no AVX-512 (oneDNN's products there measured no
	// faster than OpenBLAS's at a forward's usual sizes), the products
	// whose F32 weight has at most panelMaxK columns run on the panel
	// kernel (attn.c) instead, the weight laid out for it at load:
	// the bundled model's [6912 × 128]·[128 × 384] at 101–125 GFLOP/s
	// against OpenBLAS's 81–88 (Zen 3, 2 cores), where OpenBLAS spent a
	// fifth of a batched forward packing x and clearing the output.
	GEMMAuto GEMMLib = "auto"
	// GEMMOpenBLAS keeps every product on OpenBLAS's cblas_sgemm.
	GEMMOpenBLAS GEMMLib = "openblas"
	// GEMMOneDNN puts the products with weights on oneDNN's matmul
	// primitive (libdnnl.so.2, loaded at run time) and fails where it
	// cannot, or where it has no AVX-512 kernels (its AVX2 kernels give
	// each row a result that depends on the batch). Products with BF16
	// weights go to oneDNN's BF16 matmul too, where GEMMAuto runs them on
	// bf16mm.c's vdpbf16ps kernel.
	GEMMOneDNN GEMMLib = "onednn"
)

// ParseGEMM parses a GEMMLib; "" is GEMMAuto.
func ParseGEMM(s string) (GEMMLib, error) {
	return parseChoice("GEMM library", s, GEMMAuto, GEMMOpenBLAS, GEMMOneDNN)
}

// dnnlMinFlops is the smallest product (2·m·n·k FLOPs) put on oneDNN: its
// matmul primitive is set up again at every call (≈ 7–13 µs with its
// primitive cache warm). BenchmarkGEMMLibs (one thread, Zen 5) still
// measured oneDNN ahead at the smallest size it sweeps, 16×128×128
// (0.5 MFLOP: 73 GFLOP/s against OpenBLAS's 65; 64×384×128: 135 against
// 83); smaller products, unmeasured, stay on OpenBLAS.
var dnnlMinFlops = 1 << 19

// dnnlState is what loading and checking oneDNN found, once per process.
type dnnlState struct {
	version string
	isa     int
	// implF32 and implBF16 name the implementations oneDNN picks for a
	// model-sized product, 64×512×512 (e.g. "brg:avx512_core").
	implF32, implBF16 string
	// err says why oneDNN cannot be used at all; bf16Err why its BF16
	// products cannot (no AVX512-BF16, or the check failed).
	err, bf16Err error
}

var (
	dnnlOnce  sync.Once
	dnnlFound dnnlState
	// dnnlFailed holds the first error a oneDNN call returned after the
	// check passed; that product, and every later one, ran on OpenBLAS.
	dnnlFailed atomic.Pointer[error]
)

// dnnlProbe loads oneDNN and checks it against a float64 reference, once.
func dnnlProbe() *dnnlState {
	dnnlOnce.Do(func() {
		s := &dnnlFound
		if s.version, s.isa, s.err = dnnlOpen(); s.err != nil {
			return
		}
		if s.implF32, s.err = checkGEMM(false); s.err != nil {
			return
		}
		if s.isa < dnnlISAAVX512CoreBF16 {
			s.bf16Err = errors.New("oneDNN has no AVX512-BF16 kernels for this CPU")
		} else {
			s.implBF16, s.bf16Err = checkGEMM(true)
		}
	})
	return &dnnlFound
}

// checkGEMM runs oneDNN's products on small odd shapes with padded
// leading dimensions and a scale, and compares each element with a
// float64 sum: BF16 inputs are rounded first, so both paths must agree to
// float32 accumulation error (1e-5 of Σ|a·b|). It returns the name of the
// implementation a model-sized product gets.
func checkGEMM(bf16 bool) (impl string, err error) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, c := range []struct {
		m, n, k int
		bt      bool
		alpha   float32
	}{{37, 45, 67, true, 0.5}, {29, 33, 41, false, 1}, {130, 70, 300, true, 1}} {
		lda, ldb, ldc := c.k+3, c.k+1, c.n+2
		brows := c.n
		if !c.bt {
			ldb, brows = c.n+1, c.k
		}
		a := make([]float32, c.m*lda)
		b := make([]float32, brows*ldb)
		for i := range a {
			a[i] = rng.Float32()*2 - 1
		}
		for i := range b {
			b[i] = rng.Float32()*2 - 1
		}
		var ap, bp unsafe.Pointer
		if bf16 {
			ah, bh := make([]uint16, len(a)), make([]uint16, len(b))
			toBF16(ah, a, 1, len(a), len(a))
			toBF16(bh, b, 1, len(b), len(b))
			for i := range a {
				a[i] = math.Float32frombits(uint32(ah[i]) << 16)
			}
			for i := range b {
				b[i] = math.Float32frombits(uint32(bh[i]) << 16)
			}
			ap, bp = unsafe.Pointer(&ah[0]), unsafe.Pointer(&bh[0])
		} else {
			ap, bp = unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
		}
		got := make([]float32, c.m*ldc)
		name, err := dnnlMatMul(bf16, c.bt, c.m, c.n, c.k, c.alpha, ap, lda, bp, ldb, got, ldc, true)
		if err != nil {
			return "", err
		}
		for i := range c.m {
			for j := range c.n {
				var sum, mag float64
				for l := range c.k {
					bv := b[j*ldb+l]
					if !c.bt {
						bv = b[l*ldb+j]
					}
					p := float64(a[i*lda+l]) * float64(bv)
					sum += p
					mag += math.Abs(p)
				}
				sum *= float64(c.alpha)
				if d := math.Abs(float64(got[i*ldc+j]) - sum); !(d <= 1e-5*mag*float64(c.alpha)+1e-30) {
					return "", fmt.Errorf("oneDNN %s (bf16 %v) %d×%d×%d: element (%d, %d) = %g, want %g", name, bf16, c.m, c.n, c.k, i, j, got[i*ldc+j], sum)
				}
			}
		}
	}
	// The implementation a model-sized product gets (the small shapes
	// above may get another).
	const m, n, k = 64, 512, 512
	a, b := make([]uint16, m*k*2), make([]uint16, n*k*2)
	return dnnlMatMul(bf16, true, m, n, k, 1, unsafe.Pointer(&a[0]), k, unsafe.Pointer(&b[0]), k, make([]float32, m*n), n, true)
}

// gemmPick is the product libraries a backend uses.
type gemmPick struct {
	// dnnl puts F32 products of at least dnnlMinFlops on oneDNN.
	dnnl bool
	// dnnlBF16 multiplies BF16 weights with oneDNN's BF16 matmul
	// (activations rounded to BF16, F32 accumulation) instead of
	// converting them to float32 panels for OpenBLAS.
	dnnlBF16 bool
	// dotBF16 runs those products on bf16mm.c's vdpbf16ps kernel instead
	// (GEMMAuto on AVX512-BF16), the weights laid out for it at load.
	dotBF16 bool
	desc    string
	// lazy (GEMMAuto): oneDNN is loaded and checked when a product
	// first asks whether it may run there, not at New; dnnl, dnnlBF16
	// and desc are then autoPick's (Backend.dnnlPick). A model whose
	// products all run on dlmcache's own kernels (BF16 and F16 weights
	// laid out, Q8_0 and Q4_0, the fused attention) never maps oneDNN's
	// library nor compiles its check's kernels: 13 MB less peak RSS on
	// l16-d2048's Q8_0 file (936 against 923 MB with oneDNN off, Zen 5).
	lazy bool
}

// pickGEMM picks lib's libraries on this machine: GEMMAuto's lazily
// (only dotBF16 now, which needs no oneDNN; Options.PackWeights then
// resolves it at the first F32 weight that would run on oneDNN), the
// others at once.
func pickGEMM(lib GEMMLib) (gemmPick, error) {
	if lib == GEMMAuto {
		return gemmPick{lazy: true, dotBF16: bf16Dot}, nil
	}
	return resolveGEMM(lib)
}

// autoPick is GEMMAuto resolved, oneDNN loaded and checked: once per
// process, at the first product that asks (autoPicked says it has).
var (
	autoPick = sync.OnceValue(func() *gemmPick {
		p, _ := resolveGEMM(GEMMAuto) // GEMMAuto falls back, never fails
		autoPicked.Store(true)
		return &p
	})
	autoPicked atomic.Bool
)

// dnnlPick is the backend's libraries with oneDNN's part resolved:
// autoPick for a lazy pick (loading oneDNN on the first call).
func (b *Backend) dnnlPick() *gemmPick {
	if b.lazy {
		return autoPick()
	}
	return &b.gemmPick
}

// ProbeGEMM resolves a lazy pick now (oneDNN loaded and checked), so
// that GEMM describes what products will run on rather than that oneDNN
// waits for the first one that needs it: for dlmcache version.
func (b *Backend) ProbeGEMM() { b.dnnlPick() }

// resolveGEMM resolves lib on this machine.
func resolveGEMM(lib GEMMLib) (gemmPick, error) {
	blas := BLAS()
	if lib == GEMMOpenBLAS {
		return gemmPick{desc: blas}, nil
	}
	s := dnnlProbe()
	dot := lib == GEMMAuto && bf16Dot
	if s.err != nil {
		if lib == GEMMOneDNN {
			return gemmPick{}, fmt.Errorf("cpu: %s=%s: %w", GEMMEnv, lib, s.err)
		}
		return gemmPick{dotBF16: dot, desc: blas + "; oneDNN unused: " + s.err.Error()}, nil
	}
	if s.isa < dnnlISAAVX512Core {
		// Its AVX2 kernels pick their blocking by the row count, so a
		// row's result would depend on the batch (TestMatMulRowsInvariant),
		// and OpenBLAS's are as fast.
		why := "no AVX-512 kernels for this CPU"
		if isaCap < ISAAVX512 {
			why = fmt.Sprintf("no AVX-512 kernels under %s=%s", ISAEnv, isaCap)
		}
		if lib == GEMMOneDNN {
			return gemmPick{}, fmt.Errorf("cpu: %s=%s: %s %s", GEMMEnv, lib, s.version, why)
		}
		return gemmPick{dotBF16: dot, desc: blas + "; " + s.version + " unused: " + why}, nil
	}
	p := gemmPick{dnnl: true, dnnlBF16: s.bf16Err == nil}
	p.dotBF16 = lib == GEMMAuto && bf16Dot
	p.desc = fmt.Sprintf("%s (F32 %s", s.version, s.implF32)
	switch {
	case p.dotBF16:
		p.desc += "; BF16 weights on dlmcache's AVX512-BF16 kernel, laid out at load (" + GEMMEnv + "=onednn: on " + s.implBF16 + ")"
	case p.dnnlBF16:
		p.desc += "; BF16 " + s.implBF16
	default:
		p.desc += "; BF16 weights as F32 panels: " + s.bf16Err.Error()
	}
	p.desc += fmt.Sprintf("; F32 weights whose product with %d rows is under %d KFLOP, and any oneDNN fails: %s)", dnnlWeightRows, dnnlMinFlops>>10, blas)
	return p, nil
}

// GEMM describes the libraries the backend's matrix products run on (and
// says when attention runs on the fused kernel instead), e.g.
// "oneDNN 2.6.3 (F32 brg:avx512_core; BF16 brg:avx512_core_bf16; …)" or
// "OpenBLAS … (kernel Haswell); oneDNN unused: …".
func (b *Backend) GEMM() string {
	desc := b.gemmDesc
	if b.lazy {
		// Described as it stands, without loading oneDNN to say more.
		if autoPicked.Load() {
			desc = autoPick().desc
		} else {
			desc = BLAS() + "; oneDNN not loaded: loaded and checked at the first product that may run on it (F32 weights, converted panels)"
		}
	}
	if b.packWeights && (!b.lazy || autoPicked.Load()) && b.dnnlPick().dnnl {
		desc += fmt.Sprintf("; weights packed for oneDNN at load: %.1f MB so far (%s=mapped keeps them in the memory map)", float64(b.packedBytes.Load())/1e6, WeightsEnv)
		if e := b.packErr.Load(); e != nil {
			desc += ", some left as mapped: " + (*e).Error()
		}
	}
	if e := dnnlFailed.Load(); e != nil && (!b.lazy || autoPicked.Load()) && b.dnnlPick().dnnl {
		desc += "; oneDNN failed, OpenBLAS since: " + (*e).Error()
	}
	if b.panel {
		desc += fmt.Sprintf("; F32 weights of ≤ %d columns (16-bit and quantized ones of ≤ %d, decoded) on the panel kernel's %s tiles (%.1f MB laid out), the others off oneDNN on its blocked form (%.1f MB of F32, F16 and BF16 ones laid out for it at load)", panelMaxK, halfPanelMaxK, panelTiles, float64(b.panelBytes.Load())/1e6, float64(b.wgLaidOut.Load())/1e6)
	}
	if b.dotBF16 {
		desc += fmt.Sprintf("; %.1f MB of BF16 weights laid out for the AVX512-BF16 kernel", float64(b.bf16LaidOut.Load())/1e6)
	}
	if n := b.q8LaidOut.Load(); n > 0 {
		desc += fmt.Sprintf("; %.1f MB of Q8_0 weights laid out for the AVX512-VNNI product (%s=mapped packs them per product)", float64(n)/1e6, WeightsEnv)
	}
	if b.f16BF16 {
		desc += "; F16 weights rounded to BF16 at load (" + F16Env + "=f16 keeps them F16)"
	}
	if b.attn != attnNone {
		desc += "; attention on the fused " + b.attn.String() + " kernel"
	}
	return desc
}

// dnnlOK reports whether oneDNN may take a product of m·n·k.
func (b *Backend) dnnlOK(m, n, k int) bool {
	return m > 0 && n > 0 && k > 0 && 2*m*n*k >= dnnlMinFlops && dnnlFailed.Load() == nil && b.dnnlPick().dnnl
}

// dnnlFail records a oneDNN error; products go back to OpenBLAS.
func dnnlFail(err error) { dnnlFailed.CompareAndSwap(nil, &err) }

// gemmNT computes c = alpha·a·bᵀ: a [m,k] (lda), b [n,k] (ldb), c [m,n]
// (ldc), on oneDNN when the backend uses it and the product is large
// enough, else on OpenBLAS.
func (b *Backend) gemmNT(m, n, k int, alpha float32, a []float32, lda int, w []float32, ldw int, c []float32, ldc int) {
	b.gemm(true, m, n, k, alpha, a, lda, w, ldw, c, ldc)
}

// gemmNN computes c = alpha·a·b: a [m,k], b [k,n], c [m,n], as gemmNT.
func (b *Backend) gemmNN(m, n, k int, alpha float32, a []float32, lda int, w []float32, ldw int, c []float32, ldc int) {
	b.gemm(false, m, n, k, alpha, a, lda, w, ldw, c, ldc)
}

// gemm is gemmNT (bt) or gemmNN.
func (b *Backend) gemm(bt bool, m, n, k int, alpha float32, a []float32, lda int, w []float32, ldw int, c []float32, ldc int) {
	if b.dnnlOK(m, n, k) {
		checkSpans(bt, m, n, k, a, lda, w, ldw, c, ldc)
		_, err := dnnlMatMul(false, bt, m, n, k, alpha, unsafe.Pointer(&a[0]), lda, unsafe.Pointer(&w[0]), ldw, c, ldc, false)
		if err == nil {
			return
		}
		dnnlFail(err)
	}
	if bt {
		sgemmNT(m, n, k, alpha, a, lda, w, ldw, 0, c, ldc)
	} else {
		sgemmNN(m, n, k, alpha, a, lda, w, ldw, 0, c, ldc)
	}
}

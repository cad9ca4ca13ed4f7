// Package cpu is the CPU implementation of backend.Backend.
//
// Activations are row-major float32 matrices (*Tensor). Weights in F32 are
// used in place when the memory-mapped checkpoint bytes are 4-byte aligned
// (those tensors are read-only).
//
// BF16 weight matrices stay BF16, in place in the memory map (a BF16
// *Tensor: no copy, half the memory of float32; LLaDA-8B's 16 GB fit a
// 24 GB machine), and only MatMul (as w), Embed (as the table), ToHost
// and the views accept one. MatMul cuts w's rows into one range per
// goroutine, as for a float32 w, and each goroutine converts its range a
// panel at a time (up to 16 MB of float32) into a buffer
// of its own and calls sgemm on the panel: F32 activations, F32
// accumulation, the same results as converting w first (the conversion,
// a 16-bit shift, is exact; a small C loop, AVX2 where present) — on
// OpenBLAS; see below for oneDNN. A small w
// under a tall x is converted whole, once per product. BF16 norm vectors
// ([1, d]) are converted at load. Options.DecodeBF16, or
// DLMCACHE_CPU_BF16=f32 for New, converts every BF16 weight at load
// instead, as before: twice the memory, no conversion per product.
//
// F16 weight matrices stay F16 in the memory map too (an F16 *Tensor), and
// MatMul (as w), Embed, ToHost and the views accept one as they do a BF16
// one. Products convert w a panel at a time as for BF16 (convertedMatMul;
// a small w under a tall x whole, once per product) with F16C's vcvtph2ps
// where the AVX2 kernels run, a branch-free C loop the compiler
// vectorises elsewhere (DLMCACHE_CPU_ISA=generic); the conversion is
// exact, so a product equals the one with the widened weight on the same
// library up to its blocking along w's rows. They run on OpenBLAS at
// every row count, wherever the F32 weights run: oneDNN's F32 matmul on
// converted panels measured slower than OpenBLAS at a 10%-rows step's 52
// rows (BenchmarkMatMulF16), and oneDNN's own F16 matmul is not tried
// (oneDNN 2 has CPU F16 kernels only for AVX512-FP16, which neither this
// machine's Zen 4 nor the start-up check covers). An F16 weight of at most halfPanelMaxK columns, where
// the backend runs the panel kernel, is laid out for it at load from a
// float32 copy that is then dropped (a small model's weights: its
// products, and the fused halves, are the F32 weights'). F16 vectors are
// converted at load. Options.F16 (F16Form; DLMCACHE_CPU_F16 for New)
// picks another form: F16Widen converts every F16 weight to float32 at
// load; F16AsBF16 rounds each to BF16 at load and multiplies it as a
// BF16 weight — what New's default, F16Auto, picks wherever oneDNN's
// AVX512-BF16 kernels run. Where bf16mm.c's kernel runs too, a weight in
// the memory map is rounded straight into that kernel's layout, 64 rows
// at a time (layOutBF16: the F16 halves stay mapped for views, Embed and
// ToHost); elsewhere into a BF16 copy for oneDNN's BF16 matmul. The
// loader releases the file's pages of either (RawAliaser).
//
// Matrix products with F32 weights of at most panelMaxK columns (a small
// model's) run, wherever the CPU has AVX2 and FMA, on the backend's own
// panel kernel (attn.c: each such weight laid out at load as 16-row
// k-major panels, a 12 × 32 AVX-512 tile over them where AVX-512F runs,
// else a 6 × 16 AVX2 one — the same bits, each element the same chain of
// FMAs —, x read in place and the
// output written once, none of OpenBLAS's packing and clearing, which
// took a fifth of a batched forward of the bundled model). Every output
// element is one pass over k in a fixed order, so a row's result does
// not depend on the other rows of the product or on the thread count.
// Larger F32 weights, and F16 and BF16 ones, that do not go to oneDNN run
// there on the blocked form of that kernel (wgMatMul): 64 of the weight's
// rows × 512 of its columns packed at a time per task (converted to
// float32 as they are packed), each tile's sums going on from what the
// previous columns left, so still one chain of FMAs per element in k's
// order; an F32 one is laid out in those panels at load instead
// (Options.PackWeights, wgLayout: the same values in the same memory, the
// file's pages released), so its products pack nothing. The other products run on one of two libraries, picked once per
// process (GEMMLib; $DLMCACHE_CPU_GEMM for New and NewFromEnv), each
// called so that a row's result is the same at every row count
// (TestMatMulRowsInvariant): the libraries pick kernels by the product's
// shape, and a server multiplies each request's rows in batches of
// varying composition.
//
//   - OpenBLAS's cblas_sgemm through cgo (link with -lopenblas; Debian:
//     libopenblas-dev). A product with a weight is never handed to it
//     with m·n·k ≤ 100³ or a single row (blasWeightNT pads x with zero
//     rows instead): OpenBLAS runs such products on small-matrix kernels
//     or gemv, whose summation order differs from its general kernel's,
//     and always in whole tiles of 16 rows (the rest on a padded copy):
//     its tail kernels sum in another order too (its SSE kernels, what
//     0.3.21 runs on processors it does not know). Where even whole tiles
//     give a row different bits at different places (its Haswell and Zen
//     kernels, on AVX2 processors: rows 6–11 of every 12), a start-up
//     probe says so (blasRowsInvariant, BLAS) and every product with a
//     weight runs on the panel kernel instead, the weight laid out for it
//     per call.
//     New sets OpenBLAS to one thread, process-wide,
//     and splits each product over its own goroutines: with OpenBLAS's
//     thread pool next to Go's, the two oversubscribe the cores and
//     OpenBLAS's idle threads spin while Go code runs. bench_test.go
//     records the measurements behind the choice. Some machines pin its
//     kernel with OPENBLAS_CORETYPE (Haswell's AVX2 kernels on AVX-512
//     processors, because older builds miscompute or crash on new ones);
//     the backend never changes that variable.
//   - oneDNN's matmul primitive (onednn.c, onednn.go), where it has AVX-512 kernels
//     for this CPU (also where OpenBLAS runs AVX-512 kernels of its own:
//     on a Zen 4 with OpenBLAS's Cooperlake kernels oneDNN's product
//     still measured 1.2× faster, and the step 1.06×). The shim is compiled
//     against oneDNN 2's headers when they are present at build time
//     (Debian libdnnl-dev; make deps installs it) and loads libdnnl.so.2
//     with dlopen at run time, so neither building nor running needs it
//     (Go's build cache does not see system headers: a build made before
//     libdnnl-dev was installed needs `go clean -cache` to pick it up).
//     Before its first product the backend checks oneDNN's F32 and BF16
//     products on odd shapes against float64 sums and uses it only if
//     every element agrees to float32 accumulation error; under auto
//     that first product is the first one that may run on oneDNN (an
//     F32 weight's, converted panels), so a model whose products all run
//     on dlmcache's own kernels never loads it (ProbeGEMM loads it for a
//     description). A product on oneDNN is one
//     call threaded by oneDNN (OpenMP) over the backend's threads;
//     products inside attention run one per goroutine on one thread. An
//     F32 weight goes to oneDNN at every row count when its product with
//     dnnlWeightRows rows reaches dnnlMinFlops (the choice is the
//     weight's, never the batch's); products inside attention under
//     dnnlMinFlops stay on OpenBLAS. oneDNN is used only where it has
//     AVX-512 kernels: its AVX2 kernels block by the row count. BF16 weights, where
//     the CPU has AVX512-BF16 (and oneDNN's BF16 matmul passes the check),
//     are multiplied with the activations rounded to BF16 (to nearest,
//     ties to even) and F32 accumulation: no conversion pass, about twice
//     the F32 product's speed, and results that differ from the F32-panel
//     path by that rounding (0.1% of the largest logit on the bundled
//     model, the same answers: TestBF16Weights). Under auto they run on
//     bf16mm.c's vdpbf16ps kernel, each weight laid out at load in blocks
//     of 64 rows with pairs of values interleaved (dlmc_bf16_pack; the
//     checkpoint's pages are released, so the layout takes the memory the
//     mapped weight did; an untied embedding, only gathered from, drops
//     its layout: MarkTable); under GEMMOneDNN on oneDNN's BF16 matmul, in
//     place in the memory map. A oneDNN error after the
//     check sends that product and every later one back to OpenBLAS, and
//     GEMM says so. Built without the headers, a oneDNN 2 library absent
//     at run time, or a failed check: OpenBLAS alone, and GEMM says why.
//     oneDNN's own DNNL_MAX_CPU_ISA caps its kernels (AVX2 makes auto
//     keep OpenBLAS); CGO_CFLAGS=-DDLMCACHE_NO_DNNL builds without it.
//
// Options.PackWeights (New's default; $DLMCACHE_CPU_WEIGHTS=mapped turns
// it off) reorders each F32 weight matrix that oneDNN multiplies at load
// into the blocked layout its matmul wants, in 2 MB pages of its own (the
// layout does not depend on the row count: checked from 1 to 6912 rows),
// so that products neither repack the weight at every call nor walk the
// memory map's 4 KB pages: the l16-d2048 step 1.14× faster on Zen 5, its
// 10%-rows step 1.1–1.3×, the results bit for bit the mapped weight's.
// The loader then releases the weight's pages of the file, so the layout
// takes the memory the mapped weight did; what it costs is the reordering
// pass at load and the file's pages no longer shared with other processes
// mapping it. BF16 and F16 weights stay on bf16mm.c's layout where that
// kernel runs (packed for oneDNN under GEMMOneDNN). Views of a packed
// weight, and any product oneDNN declines it for, read the mapped bytes
// (their pages come back from the file).
//
// Attention, where the CPU has AVX-512F or AVX2+FMA, runs a fused kernel
// (attn.c, Options.Attention, $DLMCACHE_CPU_ATTENTION=fused|gemm): kᵀ
// and v of each kv head are laid out once per call, then each task of
// (head, block of query rows) takes its query rows through the scores,
// the softmax and the product with v in one C call: eight rows at a time
// on one 8×32 register tile with AVX-512, their score rows in L1; with
// AVX2 up to 48 rows a stage on 6×16 tiles (16 registers of 8 lanes), kᵀ
// and v both in panels of 16 and the stage's query rows copied side by
// side (each tile reads contiguous runs, spread over L1's sets), the
// scores in units of log₂e and the softmax in base 2 (see below). Against the
// GEMM library's two products per head, BenchmarkAttention measured the
// AVX-512 kernel 1.2–1.9× faster at the bundled model's head size (32)
// and 1.05–1.1× at 128 (Zen 4), the AVX2 one 1.7–2.0× at 32 and
// 0.9–1.05× at 64–128 (Zen 3). Elsewhere attention runs on the GEMM
// library as below.
//
// The team (team.c): worker threads of C's own that run one job at a
// time beside the thread that posts it, a job being one cgo call whose
// tasks each thread claims as it comes free. The batched server's work
// runs as such jobs: on this project's shared 2-core VM, Go's goroutines
// around long cgo calls left a core idle 15–18% of a batched forward (a
// fixed half each, a goroutine started per operation, parked threads woken
// late), where the team keeps both busy to the last task. A poster waits
// only for the workers inside its job: once every task is claimed it
// closes the job, and a worker that comes later (asleep, or its core taken
// by another process) waits for the next one. A job under 1 MFLOP
// (minTeamFlops) runs on the poster alone; the products split over
// goroutines keep their 8 MFLOP bound (minSplitFlops), a goroutine's start
// costing far more than a spinning worker's. Three operations run on it:
//
//   - The layer's row-wise halves (backend.Fuser), where the weights are
//     laid out for the panel kernel: AttnInput (RMSNorm, the q/k/v
//     products, RoPE) and BlockOutput (the output projection, the
//     residual, RMSNorm, gate and up, SiLU, down, the residual), 48 rows a
//     task, each block's intermediates in L2. Every value equals the
//     operations one after the other (the same kernels, each element
//     summed in the same order; TestFusedHalvesEqualTheOpsOneByOne checks bit for bit).
//   - Attention on the fused kernels: each kv head's layout is a task,
//     each block of query rows of a head another that waits for its
//     layout, claimed kv head by kv head (a layout one head ahead of its
//     rows, so it is read while still in cache); AttentionBatch
//     (backend.AttentionBatcher) makes one job of a batch's requests, so
//     that tasks balance across requests.
//
// While one job runs, a second poster runs its tasks alone on its own
// thread; where no thread can be started the poster runs them all.
//
// $DLMCACHE_CPU_ISA (ISALevel: generic, avx2, avx512, native) caps the
// instruction sets of the backend's own kernels and of oneDNN's, read
// once per process: an AVX-512 machine capped at avx2 computes as an
// AVX2-only processor does (the panel kernel, the AVX2 attention and
// int8 products, OpenBLAS), so make test runs the model and kernel tests
// once per level the machine has. OpenBLAS's own kernel is not capped.
//
// PeakF32 and PeakBF16 measure the processor's FMA and vdpbf16ps
// throughput, the ceilings make bench divides by; SgemmRaw the linked
// OpenBLAS's own sgemm, the reference of the serving benchmark's ratio.
//
// The row-wise operations (RMSNorm, RoPE, Add; rowops.c) run over each
// thread's range of rows in one C call, with AVX2+FMA where the CPU has it
// (checked at start-up), plain C loops elsewhere; Embed and CopyRows are Go
// copies, split over the backend's threads when the input is large enough
// to pay for the goroutines. The two that evaluate e^x for every element,
// the softmax inside attention and SiLU, call small C kernels (vec.c):
// a float32 e^x accurate to about 1 ulp, vectorised with AVX2+FMA or
// AVX-512F, scalar elsewhere; with AVX2, SiLU and the fused attention's
// softmax take 2^x instead (Cephes' exp2f polynomial, n rounded by the
// 1.5·2²³ shift: within 8·10⁻⁸, five operations an element fewer). A scalar Go e^x ran at 6 ns, as slow as
// math.Exp, and made both ops the bottleneck of attention. RMSNorm
// accumulates in float64; RoPE computes its angles in float64.
package cpu

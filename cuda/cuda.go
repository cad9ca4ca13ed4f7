//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/dlmcache/dlmcache/cuda/kernels"
	"github.com/dlmcache/dlmcache/model/backend"
)

// Options configure a Backend.
type Options struct {
	// Device is the CUDA device ordinal.
	Device int
	// F32 keeps every weight in float32 on the device (BF16 and F16 are
	// widened at upload) and runs matrix products and attention in FP32
	// without tensor cores. It doubles weight memory and is several times
	// slower; it agrees with the CPU backend to float32 rounding. The
	// default (false) is the fast path: BF16/F16 weights stay as they are,
	// activations are rounded to the weight's type for each product, and
	// attention's two products use TF32 tensor cores.
	F32 bool
	// KernelAttention runs attention with the one-block-per-(row, head)
	// kernel instead of cuBLAS products around a softmax kernel, when its
	// scores fit in shared memory. It is the simple reference path: slow
	// (every block rereads all of K and V) but free of tensor-core rounding.
	KernelAttention bool
}

// Backend is the CUDA implementation of backend.Backend on one device.
//
// Tensors live in device memory: activations are float32, weights keep
// their checkpoint's type (see Options.F32). Every operation is queued on
// the legacy default stream and returns before the device finishes it;
// ToHost and ArgmaxConf wait. CUDA errors inside an operation panic, like
// shape errors: the interface has no error returns, and a failed launch
// leaves the context unusable anyway.
//
// A Backend is safe for concurrent use: operations are serialised by a
// mutex, each running on a locked OS thread with the device's primary
// context made current.
type Backend struct {
	mu   sync.Mutex
	opts Options

	dev  cu.Device
	ctx  cu.CUContext
	name string // device name
	cc   [2]int // compute capability
	arch string // NVRTC target
	mod  cu.Module
	fn   map[string]cu.Function
	blas *blasHandle

	pool    map[int64][]cu.DevicePtr // free device blocks by size
	cached  int64                    // bytes held in pool
	idx     [8]idxEntry              // recently uploaded index lists
	idxNext int
	closed  bool
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ Argmaxer        = (*Backend)(nil)
)

// Argmaxer is an optional interface of a backend that can propose tokens
// without copying whole logit rows to the host.
type Argmaxer interface {
	// ArgmaxConf returns, for each row of logits [r, E], the index of its
	// first maximum and that entry's softmax probability under the row.
	ArgmaxConf(logits backend.Tensor) (ids []int32, conf []float64)
}

// New returns a backend on device 0 with default options. The environment
// variable DLMCACHE_CUDA_PRECISION=f32 selects Options.F32.
func New() (backend.Backend, error) {
	f32, err := backend.EnvSwitch("cuda", "DLMCACHE_CUDA_PRECISION", "bf16", "f32")
	if err != nil {
		return nil, err
	}
	b, err := NewWithOptions(Options{F32: f32})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// NewWithOptions starts a backend: it retains the device's primary
// context, compiles the kernels with NVRTC for the device's architecture,
// loads them and creates a cuBLAS handle.
func NewWithOptions(o Options) (*Backend, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: counting devices: %w", err)
	}
	if o.Device < 0 || o.Device >= n {
		return nil, fmt.Errorf("cuda: device %d requested, %d present", o.Device, n)
	}
	dev, err := cu.GetDevice(o.Device)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: compute capability: %w", o.Device, err)
	}
	name, _ := dev.Name()
	if !o.F32 && major < 8 {
		return nil, fmt.Errorf("cuda: %s has compute capability %d.%d; BF16 tensor cores need 8.0 or later (A100, H100): set DLMCACHE_CUDA_PRECISION=f32 or use a newer GPU", name, major, minor)
	}
	if major < 6 {
		return nil, fmt.Errorf("cuda: %s has compute capability %d.%d; dlmcache needs 6.0 or later", name, major, minor)
	}
	b := &Backend{opts: o, dev: dev, name: name, cc: [2]int{major, minor}, pool: map[int64][]cu.DevicePtr{}}
	// NVRTC 11.8 knows architectures up to compute_90; PTX for it is
	// JIT-compiled by the driver on newer devices.
	b.arch = fmt.Sprintf("compute_%d%d", major, minor)
	if major*10+minor > 90 {
		b.arch = "compute_90"
	}
	b.ctx, err = dev.RetainPrimaryCtx()
	if err != nil {
		return nil, fmt.Errorf("cuda: %s: retaining the primary context: %w", name, err)
	}
	ok := false
	defer func() {
		if !ok {
			dev.ReleasePrimaryCtx()
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		return nil, fmt.Errorf("cuda: %s: making the context current: %w", name, err)
	}
	ptx, err := kernels.Compile(b.arch)
	if err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", name, err)
	}
	b.mod, err = cu.LoadData(ptx)
	if err != nil {
		return nil, fmt.Errorf("cuda: %s: loading the %s kernels: %w", name, b.arch, err)
	}
	b.fn = make(map[string]cu.Function, len(kernels.Names))
	for _, k := range kernels.Names {
		f, err := b.mod.Function(k)
		if err != nil {
			return nil, fmt.Errorf("cuda: %s: kernel %s: %w", name, k, err)
		}
		b.fn[k] = f
	}
	if b.blas, err = newBLAS(); err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", name, err)
	}
	ok = true
	return b, nil
}

// Name returns "cuda".
func (b *Backend) Name() string { return "cuda" }

// Device describes the GPU: name, compute capability, NVRTC target, mode.
func (b *Backend) Device() string {
	mode := "bf16"
	if b.opts.F32 {
		mode = "f32"
	}
	return fmt.Sprintf("%s (sm_%d%d, kernels %s, %s)", b.name, b.cc[0], b.cc[1], b.arch, mode)
}

// Close frees the cached device memory, the cuBLAS handle and the module
// and releases the primary context. Tensors still alive must not be used.
func (b *Backend) Close() error {
	defer b.enter()()
	if b.closed {
		return nil
	}
	b.closed = true
	b.trimLocked()
	b.blas.destroy()
	var err error
	if e := b.mod.Unload(); e != nil {
		err = fmt.Errorf("cuda: unloading kernels: %w", e)
	}
	if e := b.dev.ReleasePrimaryCtx(); e != nil && err == nil {
		err = fmt.Errorf("cuda: releasing the context: %w", e)
	}
	return err
}

// Synchronize waits for every queued operation and reports a failed one.
func (b *Backend) Synchronize() error {
	defer b.enter()()
	if err := cu.Synchronize(); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// MemInfo returns the device's free and total memory in bytes, and the
// bytes this backend holds in its free-block cache.
func (b *Backend) MemInfo() (free, total, cached int64, err error) {
	defer b.enter()()
	free, total, err = cu.MemInfo()
	return free, total, b.cached, err
}

// Trim returns the cached free blocks to the driver.
func (b *Backend) Trim() {
	defer b.enter()()
	b.trimLocked()
}

// enter locks the backend and makes its context current on a locked OS
// thread; the returned function undoes both.
func (b *Backend) enter() func() {
	b.mu.Lock()
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		runtime.UnlockOSThread()
		b.mu.Unlock()
		panic(fmt.Sprintf("cuda: making the context current: %v", err))
	}
	return func() {
		runtime.UnlockOSThread()
		b.mu.Unlock()
	}
}

// ---- tensors and memory ----

// Tensor is a contiguous row-major matrix in device memory.
type Tensor struct {
	rows, cols int
	dtype      backend.DType
	ptr        cu.DevicePtr
	size       int64 // bytes allocated (a pool bucket for activations)
	pooled     bool  // from the block cache (activations, scratch)
	freed      bool
}

// Rows is the number of rows.
func (t *Tensor) Rows() int { return t.rows }

// Cols is the number of columns.
func (t *Tensor) Cols() int { return t.cols }

// DType is the element type: F32 for activations, the stored type for
// weights.
func (t *Tensor) DType() backend.DType { return t.dtype }

// Ptr is the device address of element (0, 0) (0 for an empty matrix).
func (t *Tensor) Ptr() cu.DevicePtr { return t.ptr }

func (t *Tensor) String() string {
	return fmt.Sprintf("cuda.Tensor[%d, %d] %v", t.rows, t.cols, t.dtype)
}

func (t *Tensor) bytes() int64 { return int64(t.rows) * int64(t.cols) * int64(t.dtype.Size()) }

// elems is rows·cols as an int64.
func (t *Tensor) elems() int64 { return int64(t.rows) * int64(t.cols) }

// at is the device address of row i.
func (t *Tensor) at(i int) cu.DevicePtr {
	return t.ptr + cu.DevicePtr(int64(i)*int64(t.cols)*int64(t.dtype.Size()))
}

// alloc takes a block of at least n bytes from the cache or the driver.
// Reusing a freed block needs no synchronisation: every operation runs on
// the one stream, in order.
func (b *Backend) alloc(n int64) (cu.DevicePtr, int64) {
	if n == 0 {
		return 0, 0
	}
	sz := bucket(n)
	if l := b.pool[sz]; len(l) > 0 {
		p := l[len(l)-1]
		b.pool[sz] = l[:len(l)-1]
		b.cached -= sz
		return p, sz
	}
	p, err := cu.MemAlloc(sz)
	if err != nil {
		b.trimLocked()
		if p, err = cu.MemAlloc(sz); err != nil {
			free, total, _ := cu.MemInfo()
			panic(fmt.Sprintf("cuda: allocating %d bytes: %v (device: %d of %d bytes free)", sz, err, free, total))
		}
	}
	return p, sz
}

func (b *Backend) release(p cu.DevicePtr, sz int64) {
	if p == 0 {
		return
	}
	b.pool[sz] = append(b.pool[sz], p)
	b.cached += sz
}

func (b *Backend) trimLocked() {
	if b.cached == 0 {
		return
	}
	if err := cu.Synchronize(); err != nil {
		panic(fmt.Sprintf("cuda: %v", err))
	}
	for sz, l := range b.pool {
		for _, p := range l {
			cu.MemFree(p)
		}
		delete(b.pool, sz)
	}
	b.cached = 0
}

// newF32 allocates an uninitialised float32 matrix from the cache.
func (b *Backend) newF32(rows, cols int) *Tensor {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("cuda: New: negative shape [%d, %d]", rows, cols))
	}
	t := &Tensor{rows: rows, cols: cols, dtype: backend.F32, pooled: true}
	t.ptr, t.size = b.alloc(t.bytes())
	return t
}

// Weight uploads checkpoint bytes. BF16 and F16 stay as they are (widened
// to float32 with Options.F32); F32 stays float32.
func (b *Backend) Weight(dtype backend.DType, rows, cols int, raw []byte) (backend.Tensor, error) {
	if rows < 0 || cols < 0 {
		return nil, fmt.Errorf("cuda: weight shape [%d, %d] is negative", rows, cols)
	}
	n := int64(rows) * int64(cols)
	switch dtype {
	case backend.F32, backend.F16, backend.BF16:
	default:
		return nil, fmt.Errorf("cuda: weight [%d, %d]: unsupported dtype %v", rows, cols, dtype)
	}
	if want := n * int64(dtype.Size()); int64(len(raw)) != want {
		return nil, fmt.Errorf("cuda: weight [%d, %d] %v needs %d bytes, got %d", rows, cols, dtype, want, len(raw))
	}
	defer b.enter()()
	store := dtype
	if b.opts.F32 {
		store = backend.F32
	}
	t := &Tensor{rows: rows, cols: cols, dtype: store}
	if n == 0 {
		return t, nil
	}
	t.size = t.bytes()
	var err error
	if t.ptr, err = cu.MemAlloc(t.size); err != nil {
		free, total, _ := cu.MemInfo()
		return nil, fmt.Errorf("cuda: weight [%d, %d] %v: allocating %d bytes: %w (device: %d of %d bytes free)", rows, cols, store, t.size, err, free, total)
	}
	if store == dtype {
		if err := cu.MemcpyHtoD(t.ptr, unsafe.Pointer(&raw[0]), int64(len(raw))); err != nil {
			cu.MemFree(t.ptr)
			return nil, fmt.Errorf("cuda: weight [%d, %d]: upload: %w", rows, cols, err)
		}
		return t, nil
	}
	// Widen on the device: upload the half-precision bytes to scratch.
	tmp, tsz := b.alloc(int64(len(raw)))
	defer b.release(tmp, tsz)
	if err := cu.MemcpyHtoD(tmp, unsafe.Pointer(&raw[0]), int64(len(raw))); err != nil {
		cu.MemFree(t.ptr)
		return nil, fmt.Errorf("cuda: weight [%d, %d]: upload: %w", rows, cols, err)
	}
	k := kernels.CvtBF16F32
	if dtype == backend.F16 {
		k = kernels.CvtF16F32
	}
	b.elementwise(k, n, t.ptr, tmp, n)
	return t, nil
}

// New returns a zeroed float32 matrix.
func (b *Backend) New(rows, cols int) backend.Tensor {
	defer b.enter()()
	t := b.newF32(rows, cols)
	if t.ptr != 0 {
		if err := cu.MemsetD32(t.ptr, 0, t.elems()); err != nil {
			panic(fmt.Sprintf("cuda: New: memset: %v", err))
		}
	}
	return t
}

// FromHost copies data into a new float32 matrix.
func (b *Backend) FromHost(rows, cols int, data []float32) backend.Tensor {
	checked(backend.CheckFromHost(rows, cols, len(data)))
	defer b.enter()()
	t := b.newF32(rows, cols)
	if t.ptr != 0 {
		if err := cu.MemcpyHtoD(t.ptr, unsafe.Pointer(&data[0]), t.bytes()); err != nil {
			panic(fmt.Sprintf("cuda: FromHost: %v", err))
		}
	}
	return t
}

// ToHost copies t into dst (allocated when nil), waiting for the device.
// A half-precision weight is widened on the host.
func (b *Backend) ToHost(t backend.Tensor, dst []float32) []float32 {
	x := tensor(t, "ToHost")
	dst, err := backend.HostDst(x, dst)
	checked(err)
	if len(dst) == 0 {
		return dst
	}
	defer b.enter()()
	if x.dtype == backend.F32 {
		if err := cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), x.ptr, x.bytes()); err != nil {
			panic(fmt.Sprintf("cuda: ToHost: %v", err))
		}
		return dst
	}
	h := make([]uint16, len(dst))
	if err := cu.MemcpyDtoH(unsafe.Pointer(&h[0]), x.ptr, x.bytes()); err != nil {
		panic(fmt.Sprintf("cuda: ToHost: %v", err))
	}
	for i, v := range h {
		if x.dtype == backend.BF16 {
			dst[i] = math.Float32frombits(uint32(v) << 16)
		} else {
			dst[i] = f16ToF32(v)
		}
	}
	return dst
}

// Free releases t: activations go back to the block cache, weights to the
// driver.
func (b *Backend) Free(t backend.Tensor) {
	x := tensor(t, "Free")
	defer b.enter()()
	if x.pooled {
		b.release(x.ptr, x.size)
	} else if x.ptr != 0 {
		if err := cu.MemFree(x.ptr); err != nil {
			panic(fmt.Sprintf("cuda: Free: %v", err))
		}
	}
	x.ptr, x.size, x.freed = 0, 0, true
	x.rows, x.cols = 0, 0
}

// tensor asserts that t is a live CUDA tensor.
func tensor(t backend.Tensor, op string) *Tensor {
	x, ok := t.(*Tensor)
	if !ok || x == nil {
		panic(fmt.Sprintf("cuda: %s: tensor %T is not a cuda tensor", op, t))
	}
	if x.freed {
		panic(fmt.Sprintf("cuda: %s: tensor used after Free", op))
	}
	return x
}

// act asserts that t is a live float32 (activation) tensor.
func act(t backend.Tensor, op string) *Tensor {
	x := tensor(t, op)
	if x.dtype != backend.F32 {
		panic(fmt.Sprintf("cuda: %s: %v is not a float32 activation", op, x))
	}
	return x
}

func shapePanic(op, format string, args ...any) {
	panic("cuda: " + op + ": " + fmt.Sprintf(format, args...))
}

// checked panics with the error of an operand check (backend.Check*), as
// every shape mismatch does.
func checked(err error) {
	if err != nil {
		panic("cuda: " + err.Error())
	}
}

// ---- index lists ----

// idxEntry is an index list already on the device. RoPE uploads the same
// positions for q and k, and a plan's row lists repeat across layers, so
// the last few uploads are kept.
type idxEntry struct {
	host []int32
	ptr  cu.DevicePtr
	size int64
}

// indices returns a device copy of idx (0 for nil).
func (b *Backend) indices(idx []int32) cu.DevicePtr {
	if idx == nil {
		return 0
	}
	if len(idx) == 0 {
		return 0
	}
	for i := range b.idx {
		e := &b.idx[i]
		if e.ptr != 0 && slices.Equal(e.host, idx) {
			return e.ptr
		}
	}
	e := &b.idx[b.idxNext]
	b.idxNext = (b.idxNext + 1) % len(b.idx)
	b.release(e.ptr, e.size)
	e.host = append(e.host[:0], idx...)
	e.ptr, e.size = b.alloc(int64(4 * len(idx)))
	if err := cu.MemcpyHtoD(e.ptr, unsafe.Pointer(&e.host[0]), int64(4*len(idx))); err != nil {
		panic(fmt.Sprintf("cuda: uploading %d indices: %v", len(idx), err))
	}
	return e.ptr
}

// ---- launching ----

// launch runs kernel name on a grid (gx, gy) of blocks of bx threads with
// shared bytes of dynamic shared memory. Arguments are cu.DevicePtr, int,
// int64 or float64; each is passed as the kernel's 8-byte parameter.
func (b *Backend) launch(name string, gx, gy, bx, shared int, args ...any) {
	vals := make([]uint64, len(args))
	params := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case cu.DevicePtr:
			vals[i] = uint64(v)
		case int:
			vals[i] = uint64(int64(v))
		case int64:
			vals[i] = uint64(v)
		case float64:
			vals[i] = math.Float64bits(v)
		default:
			panic(fmt.Sprintf("cuda: launch %s: argument %d has type %T", name, i, a))
		}
		params[i] = unsafe.Pointer(&vals[i])
	}
	if err := b.fn[name].Launch(gx, gy, 1, bx, 1, 1, shared, cu.NoStream, params); err != nil {
		panic(fmt.Sprintf("cuda: launching %s (grid %d×%d, block %d): %v", name, gx, gy, bx, err))
	}
}

// elementwise launches a grid-stride kernel over n elements.
func (b *Backend) elementwise(name string, n int64, args ...any) {
	if n <= 0 {
		return
	}
	blocks := (n + kernels.ElemThreads - 1) / kernels.ElemThreads
	blocks = min(blocks, 1<<16)
	b.launch(name, int(blocks), 1, kernels.ElemThreads, 0, args...)
}

// byType picks the kernel variant for a weight's element type.
func byType(dt backend.DType, f32, bf16, f16 string) string {
	switch dt {
	case backend.BF16:
		return bf16
	case backend.F16:
		return f16
	}
	return f32
}

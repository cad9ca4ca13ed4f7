// onednn.c: the shim to oneDNN 2's matmul, for the products where it has
// AVX-512 and AVX512-BF16 kernels. Compiled against oneDNN's headers when
// they are there at build time (Debian libdnnl-dev), it loads the library
// with dlopen at run time, so the binary neither needs oneDNN to build nor
// to run; CGO_CFLAGS=-DDLMCACHE_NO_DNNL builds the stub, as a machine
// without the headers would.
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h"

#if defined(__has_include) && !defined(DLMCACHE_NO_DNNL)
#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#endif
#endif

// The shim is compiled against oneDNN 2's C API when its headers are there
// at build time (Debian libdnnl-dev) and loads the library with dlopen at
// run time, so the binary neither needs oneDNN to build nor to run.
#if defined(DNNL_VERSION_MAJOR) && DNNL_VERSION_MAJOR == 2
#define HAVE_DNNL 1
#else
#define HAVE_DNNL 0
#endif

static char dnnl_why[512];

const char *dlmc_dnnl_reason(void) { return dnnl_why; }

#if HAVE_DNNL
#define DNNL_FNS(X) \
	X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_stream_wait) \
	X(dnnl_stream_destroy) X(dnnl_memory_desc_init_by_strides) \
	X(dnnl_matmul_desc_init) X(dnnl_primitive_attr_create) \
	X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_output_scales) \
	X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_destroy) \
	X(dnnl_primitive_desc_query) X(dnnl_primitive_create) \
	X(dnnl_primitive_destroy) X(dnnl_memory_create) X(dnnl_memory_destroy) \
	X(dnnl_primitive_execute) X(dnnl_get_effective_cpu_isa) X(dnnl_version) \
	X(dnnl_memory_desc_init_by_tag) X(dnnl_primitive_desc_query_md) \
	X(dnnl_memory_desc_equal) X(dnnl_memory_desc_get_size) \
	X(dnnl_reorder_primitive_desc_create)
#define DNNL_DECL(f) static __typeof__(&f) p_##f;
DNNL_FNS(DNNL_DECL)
static void (*p_omp_set_num_threads)(int);
static dnnl_engine_t dnnl_eng;

// dlmc_dnnl_open loads libdnnl.so.2, caps its kernels at max_isa (a
// dnnl_cpu_isa_t; 0: no cap) and creates the CPU engine: 0 on success,
// else -1 with the reason in dnnl_why.
int dlmc_dnnl_open(int max_isa) {
	char name[32];
	snprintf(name, sizeof name, "libdnnl.so.%d", DNNL_VERSION_MAJOR);
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(dnnl_why, sizeof dnnl_why, "%s", dlerror());
		return -1;
	}
#define DNNL_LOAD(f) \
	if (!(p_##f = (__typeof__(p_##f))dlsym(h, #f))) { \
		snprintf(dnnl_why, sizeof dnnl_why, "%s lacks %s", name, #f); \
		return -1; \
	}
	DNNL_FNS(DNNL_LOAD)
	// OpenMP builds: each call runs on the calling thread alone (the Go
	// side splits products over its goroutines, as it does OpenBLAS's).
	p_omp_set_num_threads = (void (*)(int))dlsym(h, "omp_set_num_threads");
	if (max_isa) {
		// Before any primitive is made: oneDNN fixes the cap at its first use.
		dnnl_status_t (*set_isa)(dnnl_cpu_isa_t) = (dnnl_status_t (*)(dnnl_cpu_isa_t))dlsym(h, "dnnl_set_max_cpu_isa");
		if (!set_isa || set_isa((dnnl_cpu_isa_t)max_isa) != dnnl_success) {
			snprintf(dnnl_why, sizeof dnnl_why, "%s: could not cap its kernels (dnnl_set_max_cpu_isa)", name);
			return -1;
		}
	}
	if (p_dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) != dnnl_success) {
		snprintf(dnnl_why, sizeof dnnl_why, "%s: no CPU engine", name);
		return -1;
	}
	return 0;
}

int dlmc_dnnl_isa(void) { return (int)p_dnnl_get_effective_cpu_isa(); }

void dlmc_dnnl_describe(char *buf, int n) {
	const dnnl_version_t *v = p_dnnl_version();
	snprintf(buf, n, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
}

// matmul_pd creates the matmul for a[m,k] (row stride lda) · B[k,n] (its
// layout bmd) into c[m,n] (row stride ldc, F32), a and B of type t, with
// attr (NULL: none); amd and cmd receive a's and c's descriptors.
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, dnnl_data_type_t t, long m, long n, long k,
		const dnnl_memory_desc_t *bmd, dnnl_memory_desc_t *amd, dnnl_memory_desc_t *cmd, long lda, long ldc,
		const_dnnl_primitive_attr_t attr) {
	dnnl_dims_t ad = {m, k}, as = {lda, 1}, cd = {m, n}, cs = {ldc, 1};
	dnnl_status_t s;
	if ((s = p_dnnl_memory_desc_init_by_strides(amd, 2, ad, t, as))) return s;
	if ((s = p_dnnl_memory_desc_init_by_strides(cmd, 2, cd, dnnl_f32, cs))) return s;
	dnnl_matmul_desc_t md;
	if ((s = p_dnnl_matmul_desc_init(&md, amd, bmd, NULL, cmd))) return s;
	return p_dnnl_primitive_desc_create(pd, &md, attr, dnnl_eng, NULL);
}

// exec_once creates pd's primitive and a memory object for each of its n
// (at most 3) arguments — kind[i], described by md[i], its data at
// data[i] — runs it once on a stream of its own, waits for it, and frees
// all it created (not pd).
static dnnl_status_t exec_once(const_dnnl_primitive_desc_t pd, int n, const int *kind,
		const dnnl_memory_desc_t *const *md, void *const *data) {
	dnnl_status_t s;
	dnnl_primitive_t p = NULL;
	dnnl_memory_t mem[3] = {NULL, NULL, NULL};
	dnnl_exec_arg_t args[3];
	dnnl_stream_t st = NULL;
	if ((s = p_dnnl_primitive_create(&p, pd))) goto out;
	for (int i = 0; i < n; i++) {
		if ((s = p_dnnl_memory_create(&mem[i], md[i], dnnl_eng, data[i]))) goto out;
		args[i] = (dnnl_exec_arg_t){kind[i], mem[i]};
	}
	if ((s = p_dnnl_stream_create(&st, dnnl_eng, dnnl_stream_default_flags))) goto out;
	if (!(s = p_dnnl_primitive_execute(p, st, n, args))) s = p_dnnl_stream_wait(st);
out:
	if (st) p_dnnl_stream_destroy(st);
	for (int i = n - 1; i >= 0; i--)
		if (mem[i]) p_dnnl_memory_destroy(mem[i]);
	if (p) p_dnnl_primitive_destroy(p);
	return s;
}

// exec_matmul runs pd's matmul once on a, b and c (their descriptors amd,
// bmd, cmd).
static dnnl_status_t exec_matmul(const_dnnl_primitive_desc_t pd,
		const dnnl_memory_desc_t *amd, const void *a, const dnnl_memory_desc_t *bmd, const void *b,
		const dnnl_memory_desc_t *cmd, float *c) {
	const int kind[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
	const dnnl_memory_desc_t *md[3] = {amd, bmd, cmd};
	void *data[3] = {(void *)a, (void *)b, c};
	return exec_once(pd, 3, kind, md, data);
}

// dlmc_dnnl_mm: c[m,n] = alpha · a[m,k] · B, with B = b[n,k]ᵀ (bt) or b[k,n],
// row-major with leading dimensions; a and b both F32 or both BF16
// (bf16), c F32; on threads OpenMP threads. impl, when not NULL, receives
// the implementation's name. Returns a dnnl_status_t (-2: not loaded).
int dlmc_dnnl_mm(int bf16, int bt, long m, long n, long k, float alpha,
		const void *a, long lda, const void *b, long ldb, float *c, long ldc,
		char *impl, int implLen, int threads) {
	if (!dnnl_eng) return -2;
	if (p_omp_set_num_threads) p_omp_set_num_threads(threads);
	dnnl_data_type_t t = bf16 ? dnnl_bf16 : dnnl_f32;
	dnnl_memory_desc_t amd, bmd, cmd;
	dnnl_dims_t bd = {k, n}, bs = {ldb, 1};
	if (bt) { bs[0] = 1; bs[1] = ldb; }
	dnnl_status_t s;
	if ((s = p_dnnl_memory_desc_init_by_strides(&bmd, 2, bd, t, bs))) return s;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	if (alpha != 1.0f) {
		if ((s = p_dnnl_primitive_attr_create(&attr))) return s;
		if ((s = p_dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha))) goto out;
	}
	if ((s = matmul_pd(&pd, t, m, n, k, &bmd, &amd, &cmd, lda, ldc, attr))) goto out;
	if (impl) {
		const char *name = NULL;
		p_dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
		snprintf(impl, implLen, "%s", name ? name : "?");
	}
	s = exec_matmul(pd, &amd, a, &bmd, b, &cmd, c);
out:
	if (pd) p_dnnl_primitive_desc_destroy(pd);
	if (attr) p_dnnl_primitive_attr_destroy(attr);
	return s;
}

// dlmc_dnnl_packed is a weight reordered once into the blocked layout oneDNN's
// matmul picks for it (format "any"), in its own 2 MB-page mapping.
struct dlmc_dnnl_packed {
	dnnl_memory_desc_t md;
	void *data;
	size_t bytes;
};

// dlmc_dnnl_pack reorders the weight w[n,k] (row stride ldw; F32 or BF16) into
// the layout oneDNN's matmul picks for B = wᵀ, on threads threads, and
// returns it; NULL with *status set when it cannot (status 1: the layout
// picked is w's own, nothing to gain).
dlmc_dnnl_packed *dlmc_dnnl_pack(int bf16, long n, long k, const void *w, long ldw, int threads, int *status) {
	if (!dnnl_eng) { *status = -2; return NULL; }
	if (p_omp_set_num_threads) p_omp_set_num_threads(threads);
	dnnl_data_type_t t = bf16 ? dnnl_bf16 : dnnl_f32;
	dnnl_dims_t bd = {k, n}, bs = {1, ldw};
	dnnl_memory_desc_t plain, any, amd, cmd;
	dnnl_status_t s;
	dnnl_primitive_desc_t pd = NULL, rpd = NULL;
	dlmc_dnnl_packed *pk = NULL;
	if ((s = p_dnnl_memory_desc_init_by_strides(&plain, 2, bd, t, bs))) goto out;
	if ((s = p_dnnl_memory_desc_init_by_tag(&any, 2, bd, t, dnnl_format_tag_any))) goto out;
	// The layout does not depend on m (checked for 1 to 6912 rows).
	if ((s = matmul_pd(&pd, t, 512, n, k, &any, &amd, &cmd, k, n, NULL))) goto out;
	pk = calloc(1, sizeof *pk);
	pk->md = *p_dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	if (p_dnnl_memory_desc_equal(&pk->md, &plain)) { s = 1; goto out; }
	pk->bytes = p_dnnl_memory_desc_get_size(&pk->md);
	// Whole 2 MB pages for a weight of 1 MB or more; 4 KB ones below,
	// where a huge page would mostly be padding.
	size_t huge = pk->bytes >= (1u << 20) ? 2u << 20 : 4096, len = (pk->bytes + huge - 1) / huge * huge;
	pk->data = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pk->data == MAP_FAILED) { pk->data = NULL; s = dnnl_out_of_memory; goto out; }
	if (huge > 4096) madvise(pk->data, len, MADV_HUGEPAGE);
	pk->bytes = len;
	if ((s = p_dnnl_reorder_primitive_desc_create(&rpd, &plain, dnnl_eng, &pk->md, dnnl_eng, NULL))) goto out;
	const int kind[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
	const dnnl_memory_desc_t *md[2] = {&plain, &pk->md};
	void *data[2] = {(void *)w, pk->data};
	s = exec_once(rpd, 2, kind, md, data);
out:
	if (rpd) p_dnnl_primitive_desc_destroy(rpd);
	if (pd) p_dnnl_primitive_desc_destroy(pd);
	*status = s;
	if (s != dnnl_success && pk) {
		if (pk->data) munmap(pk->data, pk->bytes);
		free(pk);
		pk = NULL;
	}
	return pk;
}

void dlmc_dnnl_packed_free(dlmc_dnnl_packed *pk) {
	if (!pk) return;
	if (pk->data) munmap(pk->data, pk->bytes);
	free(pk);
}

// dlmc_dnnl_mm_packed: c[m,n] = a[m,k] · Bᵀ-packed, on threads threads.
// Returns 1 (nothing written) when the matmul picked for this m wants
// another layout than the packed one.
int dlmc_dnnl_mm_packed(int bf16, long m, long n, long k, const void *a, long lda,
		const dlmc_dnnl_packed *pk, float *c, long ldc, int threads) {
	if (!dnnl_eng) return -2;
	if (p_omp_set_num_threads) p_omp_set_num_threads(threads);
	dnnl_data_type_t t = bf16 ? dnnl_bf16 : dnnl_f32;
	dnnl_dims_t bd = {k, n};
	dnnl_memory_desc_t any, amd, cmd;
	dnnl_status_t s;
	dnnl_primitive_desc_t pd = NULL;
	if ((s = p_dnnl_memory_desc_init_by_tag(&any, 2, bd, t, dnnl_format_tag_any))) return s;
	if ((s = matmul_pd(&pd, t, m, n, k, &any, &amd, &cmd, lda, ldc, NULL))) return s;
	if (p_dnnl_memory_desc_equal(p_dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &pk->md)) {
		s = exec_matmul(pd, &amd, a, &pk->md, pk->data, &cmd, c);
	} else {
		s = 1;
	}
	p_dnnl_primitive_desc_destroy(pd);
	return s;
}
#else
struct dlmc_dnnl_packed {
	size_t bytes;
};
dlmc_dnnl_packed *dlmc_dnnl_pack(int bf16, long n, long k, const void *w, long ldw, int threads, int *status) {
	(void)bf16, (void)n, (void)k, (void)w, (void)ldw, (void)threads;
	*status = -1;
	return NULL;
}
void dlmc_dnnl_packed_free(dlmc_dnnl_packed *pk) { (void)pk; }
int dlmc_dnnl_mm_packed(int bf16, long m, long n, long k, const void *a, long lda,
		const dlmc_dnnl_packed *pk, float *c, long ldc, int threads) {
	(void)bf16, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)pk, (void)c, (void)ldc, (void)threads;
	return -1;
}
int dlmc_dnnl_open(int max_isa) {
	(void)max_isa;
	snprintf(dnnl_why, sizeof dnnl_why, "built without oneDNN 2 headers (Debian: libdnnl-dev)");
	return -1;
}
int dlmc_dnnl_isa(void) { return 0; }
void dlmc_dnnl_describe(char *buf, int n) { snprintf(buf, n, "oneDNN (absent)"); }
int dlmc_dnnl_mm(int bf16, int bt, long m, long n, long k, float alpha,
		const void *a, long lda, const void *b, long ldb, float *c, long ldc,
		char *impl, int implLen, int threads) {
	(void)bf16, (void)bt, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
	(void)c, (void)ldc, (void)impl, (void)implLen, (void)threads;
	return -1;
}
#endif

size_t dlmc_dnnl_packed_bytes(const dlmc_dnnl_packed *pk) { return pk->bytes; }

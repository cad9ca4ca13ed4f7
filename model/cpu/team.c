// team.c: the thread team, and the jobs the backend runs on it: the
// fused layer halves (backend.Fuser), products on the panel kernel, and
// attention on the fused kernels for several requests at once.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define team_pause() _mm_pause()
#else
#define team_pause() ((void)0)
#endif

#include "kernels.h"

// The team: worker threads of C's own that run the tasks of one job at a
// time beside the thread that posts it, each task claimed by whichever
// thread is free first. A job is one cgo call: the Go scheduler neither
// starts nor parks anything inside it.
typedef void (*team_fn)(const void *arg, int task, float *scratch);

#define TEAM_MAX 256
// After a job a worker polls this many pauses for the next one before it
// sleeps: a forward posts its jobs back to back.
#define TEAM_SPIN 4000

static pthread_mutex_t team_busy = PTHREAD_MUTEX_INITIALIZER; // held by the poster of the running job
static pthread_mutex_t team_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t team_wake = PTHREAD_COND_INITIALIZER, team_idle = PTHREAD_COND_INITIALIZER;
static int team_started; // workers started (under team_mu)
static atomic_ulong team_gen; // bumped for each job
static team_fn team_job_fn;
static const void *team_job_arg;
static int team_job_tasks, team_job_want;
static size_t team_job_scratch;
static atomic_int team_next; // the next task
// team_active is the workers inside the posted job while it is open (≥ 0);
// once its poster has run out of tasks it closes the job by adding
// TEAM_CLOSED, and waits only for the workers inside: one that comes late
// (asleep, or its core taken by another process) finds the job closed and
// waits for the next, without the poster waiting for it.
#define TEAM_CLOSED (-(1 << 30))
static atomic_int team_active = TEAM_CLOSED;

static float *team_alloc(size_t n) {
	void *p = NULL;
	if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float))) abort();
	return p;
}

static void team_tasks(float *scratch) {
	for (;;) {
		int t = atomic_fetch_add(&team_next, 1);
		if (t >= team_job_tasks) return;
		team_job_fn(team_job_arg, t, scratch);
	}
}

typedef struct { int id; unsigned long seen; } team_start;

static void *team_worker(void *p) {
	team_start st = *(team_start *)p;
	free(p);
	float *scratch = NULL;
	size_t cap = 0;
	for (;;) {
		unsigned long g = atomic_load_explicit(&team_gen, memory_order_acquire);
		for (int i = 0; g == st.seen && i < TEAM_SPIN; i++) {
			team_pause();
			g = atomic_load_explicit(&team_gen, memory_order_acquire);
		}
		if (g == st.seen) {
			pthread_mutex_lock(&team_mu);
			while ((g = atomic_load_explicit(&team_gen, memory_order_acquire)) == st.seen)
				pthread_cond_wait(&team_wake, &team_mu);
			pthread_mutex_unlock(&team_mu);
		}
		st.seen = g;
		// Join the job if it is still open; its fields, written before it
		// opened, are then this job's until the worker leaves it.
		int a = atomic_load_explicit(&team_active, memory_order_acquire), joined = 0;
		while (a >= 0 && !(joined = atomic_compare_exchange_weak_explicit(&team_active, &a, a + 1,
			memory_order_acq_rel, memory_order_acquire)))
			;
		if (!joined) continue;
		if (st.id < team_job_want - 1) {
			if (cap < team_job_scratch) {
				free(scratch);
				cap = team_job_scratch;
				scratch = team_alloc(cap);
			}
			team_tasks(scratch);
		}
		if (atomic_fetch_sub_explicit(&team_active, 1, memory_order_acq_rel) == TEAM_CLOSED + 1) {
			pthread_mutex_lock(&team_mu);
			pthread_cond_signal(&team_idle);
			pthread_mutex_unlock(&team_mu);
		}
	}
	return NULL;
}

// team_run runs fn(arg, t, scratch) for t in [0, tasks) on up to workers
// threads, the caller's among them, each with scratch of scratch floats,
// and returns when all are done. While another job runs (another
// goroutine's), or where no thread can be started, the caller runs its
// tasks alone.
static void team_run(int workers, int tasks, team_fn fn, const void *arg, size_t scratch) {
	if (workers > tasks) workers = tasks;
	if (workers > TEAM_MAX) workers = TEAM_MAX;
	if (workers > 1 && pthread_mutex_trylock(&team_busy) == 0) {
		pthread_mutex_lock(&team_mu);
		while (team_started < workers - 1) {
			team_start *st = malloc(sizeof *st);
			pthread_t th;
			pthread_attr_t at;
			if (!st) break;
			st->id = team_started;
			st->seen = atomic_load(&team_gen);
			pthread_attr_init(&at);
			pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
			int err = pthread_create(&th, &at, team_worker, st);
			pthread_attr_destroy(&at);
			if (err) {
				free(st);
				break;
			}
			team_started++;
		}
		if (team_started > 0) {
			team_job_fn = fn;
			team_job_arg = arg;
			team_job_tasks = tasks;
			team_job_want = workers;
			team_job_scratch = scratch;
			atomic_store(&team_next, 0);
			atomic_store_explicit(&team_active, 0, memory_order_release); // open
			atomic_fetch_add_explicit(&team_gen, 1, memory_order_release);
			pthread_cond_broadcast(&team_wake);
			pthread_mutex_unlock(&team_mu);
			float *s = team_alloc(scratch);
			team_tasks(s);
			free(s);
			// Every task is claimed: close the job and wait for the workers
			// inside it (those running a task), not for those yet to come.
			atomic_fetch_add_explicit(&team_active, TEAM_CLOSED, memory_order_acq_rel);
			for (int i = 0; atomic_load_explicit(&team_active, memory_order_acquire) != TEAM_CLOSED && i < TEAM_SPIN; i++)
				team_pause();
			pthread_mutex_lock(&team_mu);
			while (atomic_load_explicit(&team_active, memory_order_acquire) != TEAM_CLOSED)
				pthread_cond_wait(&team_idle, &team_mu);
			pthread_mutex_unlock(&team_mu);
			pthread_mutex_unlock(&team_busy);
			return;
		}
		pthread_mutex_unlock(&team_mu);
		pthread_mutex_unlock(&team_busy);
	}
	float *s = team_alloc(scratch);
	for (int t = 0; t < tasks; t++) fn(arg, t, s);
	free(s);
}

// The fused layer halves (backend.Fuser), a block of at most FUSED_ROWS
// rows a task.
#define FUSED_ROWS DLMC_FUSED_ROWS

// fused_rows is the rows a task of a fused half takes: FUSED_ROWS, or
// fewer so that every worker gets as many rows as the others (64 rows on
// 2 threads in tasks of FUSED_ROWS would be 48 and 16: one thread idle
// for half the time). A row's result does not depend on its task.
static int fused_rows(int rows, int workers) {
	if (workers < 1) workers = 1;
	int tasks = (rows + FUSED_ROWS - 1) / FUSED_ROWS;
	tasks = (tasks + workers - 1) / workers * workers;
	int per = (rows + tasks - 1) / tasks;
	return per < 1 ? 1 : per;
}

typedef struct {
	int rows, per, d, nq, nk, nv, hd, npos, simd;
	float eps;
	const float *x, *norm, *pq, *pk, *pv, *cs;
	long ldx, ldq, ldk, ldv;
	float *q, *k, *v;
	const int32_t *pos;
} attn_input_job;

static void attn_input_task(const void *arg, int t, float *nb) {
	const attn_input_job *j = arg;
	int lo = t * j->per, m = j->rows - lo < j->per ? j->rows - lo : j->per;
	float *q = j->q + (long)lo * j->ldq, *k = j->k + (long)lo * j->ldk;
	dlmc_rms_norm_rows(j->simd, nb, j->d, j->x + (long)lo * j->ldx, j->ldx, j->norm, m, j->d, j->eps);
	dlmc_panel_gemm(m, j->nq, j->d, nb, j->d, j->pq, q, j->ldq);
	dlmc_panel_gemm(m, j->nk, j->d, nb, j->d, j->pk, k, j->ldk);
	dlmc_panel_gemm(m, j->nv, j->d, nb, j->d, j->pv, j->v + (long)lo * j->ldv, j->ldv);
	if (j->npos > 0) {
		dlmc_rope_rows(j->simd, q, j->ldq, m, j->nq / j->hd, j->hd, j->pos + lo, j->cs, j->npos);
		dlmc_rope_rows(j->simd, k, j->ldk, m, j->nk / j->hd, j->hd, j->pos + lo, j->cs, j->npos);
	}
}

void dlmc_attn_input(int workers, int rows, int d, int nq, int nk, int nv, int hd, int simd, float eps,
		const float *x, long ldx, const float *norm, const float *pq, const float *pk, const float *pv,
		float *q, long ldq, float *k, long ldk, float *v, long ldv, const int32_t *pos, const float *cs, int npos) {
	int per = fused_rows(rows, workers);
	attn_input_job j = {rows, per, d, nq, nk, nv, hd, npos, simd, eps, x, norm, pq, pk, pv, cs, ldx, ldq, ldk, ldv, q, k, v, pos};
	team_run(workers, (rows + per - 1) / per, attn_input_task, &j, (size_t)FUSED_ROWS * d);
}

typedef struct {
	int rows, per, d, na, h, simd, vsimd;
	float eps;
	float *x;
	long ldx, lda;
	const float *att, *norm, *po, *pg, *pu, *pd;
} block_output_job;

static void block_output_task(const void *arg, int t, float *buf) {
	const block_output_job *j = arg;
	int lo = t * j->per, m = j->rows - lo < j->per ? j->rows - lo : j->per;
	int d = j->d, h = j->h;
	float *x = j->x + (long)lo * j->ldx;
	float *o = buf, *nb = buf + FUSED_ROWS * d, *g = buf + 2 * FUSED_ROWS * d, *u = g + (long)FUSED_ROWS * h;
	dlmc_panel_gemm(m, d, j->na, j->att + (long)lo * j->lda, j->lda, j->po, o, d);
	dlmc_add_rows(j->simd, x, j->ldx, o, d, m, d);
	dlmc_rms_norm_rows(j->simd, nb, d, x, j->ldx, j->norm, m, d, j->eps);
	dlmc_panel_gemm(m, h, d, nb, d, j->pg, g, h);
	dlmc_panel_gemm(m, h, d, nb, d, j->pu, u, h);
	dlmc_silu_mul(j->vsimd, g, g, u, m * h);
	dlmc_panel_gemm(m, d, h, g, h, j->pd, o, d);
	dlmc_add_rows(j->simd, x, j->ldx, o, d, m, d);
}

void dlmc_block_output(int workers, int rows, int d, int na, int h, int simd, int vsimd, float eps,
		float *x, long ldx, const float *att, long lda, const float *norm,
		const float *po, const float *pg, const float *pu, const float *pd) {
	int per = fused_rows(rows, workers);
	block_output_job j = {rows, per, d, na, h, simd, vsimd, eps, x, ldx, lda, att, norm, po, pg, pu, pd};
	team_run(workers, (rows + per - 1) / per, block_output_task, &j,
		(size_t)FUSED_ROWS * (2 * d + 2 * h));
}

// A product on the panel kernel (c = a·wᵀ, w as panels p), tasks of
// FUSED_ROWS rows by cols columns (a multiple of 16: whole panels).
typedef struct {
	int m, n, k, cols, colTasks;
	const float *a, *p;
	float *c;
	long lda, ldc;
} panel_job;

static void panel_task(const void *arg, int t, float *unused) {
	(void)unused;
	const panel_job *j = arg;
	int r0 = (t / j->colTasks) * FUSED_ROWS, c0 = (t % j->colTasks) * j->cols;
	int m = j->m - r0 < FUSED_ROWS ? j->m - r0 : FUSED_ROWS, n = j->n - c0 < j->cols ? j->n - c0 : j->cols;
	dlmc_panel_gemm(m, n, j->k, j->a + (long)r0 * j->lda, j->lda, j->p + (long)c0 * j->k, j->c + (long)r0 * j->ldc + c0, j->ldc);
}

void dlmc_panel_matmul(int workers, int m, int n, int k, const float *a, long lda, const float *p, float *c, long ldc) {
	// Enough tasks for every thread several times over: columns cut in
	// panels' multiples where the rows alone make too few.
	int rowTasks = (m + FUSED_ROWS - 1) / FUSED_ROWS, panels = (n + 15) / 16;
	int colTasks = (8 * workers + rowTasks - 1) / rowTasks;
	if (colTasks > panels) colTasks = panels;
	if (colTasks < 1) colTasks = 1;
	int cols = (panels + colTasks - 1) / colTasks * 16;
	colTasks = (n + cols - 1) / cols;
	panel_job j = {m, n, k, cols, colTasks, a, p, c, lda, ldc};
	team_run(workers, rowTasks * colTasks, panel_task, &j, 0);
}

// A product on the blocked panel kernel, a task a block of DLMC_WG_NB
// columns over every row, each with its scratch for the packed panels.
typedef struct {
	int type, m, n, k;
	const float *a;
	const void *w;
	const void *laid;
	float *c;
	long lda, ldw, ldc;
} wg_job;

static void wg_task(const void *arg, int t, float *p) {
	const wg_job *j = arg;
	int c0 = t * DLMC_WG_NB, nc = j->n - c0 < DLMC_WG_NB ? j->n - c0 : DLMC_WG_NB;
	dlmc_wg_block(j->type, j->m, j->k, j->a, j->lda, j->w, j->ldw, c0, nc, j->c, j->ldc, p, j->laid);
}

void dlmc_wg_matmul(int workers, int type, int m, int n, int k, const float *a, long lda, const void *w, long ldw,
		const void *laid, float *c, long ldc) {
	wg_job j = {type, m, n, k, a, w, laid, c, lda, ldw, ldc};
	team_run(workers, (n + DLMC_WG_NB - 1) / DLMC_WG_NB, wg_task, &j, (size_t)DLMC_WG_KC * DLMC_WG_NB);
}

// Attention on the fused kernels, as one job for several parts: a part
// is the kv heads [g0, g0 + kvn) of one attention (one request's) and
// their query heads. A layout task lays out one kv head (kt, vp), a row
// task runs a block of query rows of one query head once its kv head is
// laid out. Tasks are claimed in the order of seq: kv head 0's layout,
// then for each kv head g the layout of g + 1 and g's row tasks, so every
// layout is under way before the first task that waits for it (and
// usually done), and a layout is read while it is still in the cache
// (all layouts first, a batch's 16 requests' 4.9 MB, went to memory and
// back: the batched attention ran at 0.8 of its requests one by one).
typedef struct {
	int avx2, hd, group, nparts;
	float scale;
	const dlmc_attn_part *parts;
	atomic_int *ready; // one a layout task
	const int *seq;    // task t is the layout of kv head −seq[t] − 1 or row task seq[t]
} attn_job;

// HD16: a kv head's room for v in the layouts, nk rows of HD16(hd).
#define HD16(hd) (((hd) + 15) & ~15)

static void attn_task(const void *arg, int t, float *s) {
	const attn_job *j = arg;
	int hd = j->hd, p = 0;
	t = j->seq[t];
	if (t < 0) {
		t = -t - 1;
		// The part that owns layout t (parts sharing it read it).
		while (!j->parts[p].own || t >= j->parts[p].pack0 + j->parts[p].kvn) p++;
		const dlmc_attn_part *a = &j->parts[p];
		int i = t - a->pack0, h = a->g0 + i;
		dlmc_attn_pack(j->avx2, a->plo, a->phi, a->pnk, hd, a->k + (long)h * hd, a->ldk, a->v + (long)h * hd, a->ldv,
			a->kt + (long)i * hd * a->ldt, a->ldt, a->vp + (long)i * a->pnk * HD16(hd));
		atomic_store_explicit(&j->ready[t], 1, memory_order_release);
		return;
	}
	while (p + 1 < j->nparts && j->parts[p + 1].row0 <= t) p++;
	const dlmc_attn_part *a = &j->parts[p];
	t -= a->row0;
	int hq = a->g0 * j->group + t / a->blocks, r0 = (t % a->blocks) * a->block;
	int i = hq / j->group - a->g0, m = a->nq - r0 < a->block ? a->nq - r0 : a->block;
	while (!atomic_load_explicit(&j->ready[a->pack0 + i], memory_order_acquire)) team_pause();
	// v: AVX-512's rows hd apart, AVX2's column panels 16·pnk apart.
	dlmc_attn_rows(j->avx2, m, a->nk, hd, j->scale, a->q + (long)r0 * a->ldq + (long)hq * hd, a->ldq,
		a->kt + (long)i * hd * a->ldt, a->ldt, a->vp + (long)i * a->pnk * HD16(hd), j->avx2 ? 16L * a->pnk : hd,
		a->o + (long)r0 * a->ldo + (long)hq * hd, a->ldo, s);
}

// dlmc_attn_parts runs the parts (their pack0 and row0 set) as one job; ldt is
// the largest of their ldt (a task's scratch is dlmc_attn_scratch(ldt, hd)
// floats). The parts that own layouts have pack0 0, kvn, 2·kvn, … in
// order, each before the parts that share its layouts.
void dlmc_attn_parts(int workers, int avx2, int hd, int group, float scale, const dlmc_attn_part *parts, int nparts, long ldt) {
	const dlmc_attn_part *last = &parts[nparts - 1];
	int packs = 0, rows = last->row0 + last->kvn * group * last->blocks;
	for (int p = 0; p < nparts; p++)
		if (parts[p].own) packs += parts[p].kvn;
	atomic_int *ready = calloc((size_t)packs, sizeof *ready);
	int *seq = malloc((size_t)(packs + rows) * sizeof *seq), n = 0, laid = 1;
	if (!ready || !seq) abort();
	// A layout goes into the order before the first task that reads it
	// (a part sharing layouts comes after the part that owns them).
	seq[n++] = -1;
	for (int p = 0; p < nparts; p++) {
		const dlmc_attn_part *a = &parts[p];
		int per = group * a->blocks;
		for (int i = 0; i < a->kvn; i++) {
			int g = a->pack0 + i;
			for (; laid <= g + 1 && laid < packs; laid++) seq[n++] = -(laid + 1);
			for (int r = 0; r < per; r++) seq[n++] = a->row0 + i * per + r;
		}
	}
	attn_job j = {avx2, hd, group, nparts, scale, parts, ready, seq};
	team_run(workers, packs + rows, attn_task, &j, (size_t)dlmc_attn_scratch(avx2, ldt, hd));
	free(seq);
	free(ready);
}

// sumexp.h: what sumexp.go binds of sumexp.c.
#ifndef DLMCACHE_SUMEXP_H
#define DLMCACHE_SUMEXP_H

// dlmc_sumexp_have_avx2: 1 where the AVX2 kernel runs.
int dlmc_sumexp_have_avx2(void);
// dlmc_sum_exp_avx2 returns Σ e^(x[i] − m) over x[0..n) (AVX2+FMA only).
double dlmc_sum_exp_avx2(const float *x, int n, double m);

#endif

# peaks.awk: the peaks BenchmarkPeak measured on t threads (awk -v t=N),
# the best of however many counts the output holds, one "name=value" word
# each (GFLOP/s, or GOP/s for int8) in the order they first appear:
# "f32=474.3 f32avx2=237.3 bf16=963.8 int8=1915.0". make bench and make
# bench-llamacpp both read their peaks through it.
/^BenchmarkPeak\// {
	split($1, p, "/"); sub(/-[0-9]+$/, "", p[3])
	if (p[3] == "threads" t) for (i = 1; i < NF; i++) if ($(i+1) == "GFLOP/s" || $(i+1) == "GOP/s") {
		if (!(p[2] in best)) order[n++] = p[2]
		if ($i + 0 > best[p[2]]) best[p[2]] = $i + 0
	}
}
END { for (j = 0; j < n; j++) printf "%s%s=%.1f", (j ? " " : ""), order[j], best[order[j]] }

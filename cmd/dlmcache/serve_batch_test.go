package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestServeRefusesMaxBatchBelowOne(t *testing.T) {
	opts := parseServe(t, io.Discard, "--model", serveFixture, "--max-batch", "0", "--addr", "127.0.0.1:0")
	if err := opts.run(context.Background()); err == nil || !strings.Contains(err.Error(), "--max-batch") {
		t.Fatalf("--max-batch 0: %v", err)
	}
}

// --max-concurrency 0 runs --max-batch generations for each worker at
// once when batching, else 2; a value given is kept.
func TestServeConcurrencyDefaultsToTheBatch(t *testing.T) {
	for _, tc := range []struct{ flag, batch, workers, want int }{
		{0, 1, 1, 2}, {0, 16, 1, 16}, {0, 16, 2, 32}, {3, 16, 2, 3}, {1, 1, 1, 1},
	} {
		if got := concurrency(tc.flag, tc.batch, tc.workers); got != tc.want {
			t.Errorf("concurrency(%d, %d, %d) = %d, want %d", tc.flag, tc.batch, tc.workers, got, tc.want)
		}
	}
}

// TestServeBatchesByDefault: with no flags, serve batches up to 16
// generations' forwards in each worker and runs 16 a worker at once.
func TestServeBatchesByDefault(t *testing.T) {
	opts := parseServe(t, io.Discard, "--model", serveFixture)
	if opts.MaxBatch != 16 || opts.Workers != 0 || concurrency(opts.MaxConcurrency, opts.MaxBatch, 2) != 32 {
		t.Errorf("defaults: --max-batch %d, --workers %d, %d generations at once for 2 workers; want 16, 0 and 32",
			opts.MaxBatch, opts.Workers, concurrency(opts.MaxConcurrency, opts.MaxBatch, 2))
	}
}

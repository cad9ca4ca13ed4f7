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

// --max-concurrency 0 runs --max-batch generations at once (over all
// workers) when batching, else 2; a value given is kept.
func TestServeConcurrencyDefaultsToTheBatch(t *testing.T) {
	for _, tc := range []struct{ flag, batch, want int }{
		{0, 1, 2}, {0, 16, 16}, {3, 16, 3}, {1, 1, 1},
	} {
		if got := concurrency(tc.flag, tc.batch); got != tc.want {
			t.Errorf("concurrency(%d, %d) = %d, want %d", tc.flag, tc.batch, got, tc.want)
		}
	}
}

// TestServeBatchesByDefault: with no flags, serve batches up to 16
// generations' forwards and runs 16 at once, over the default workers.
func TestServeBatchesByDefault(t *testing.T) {
	opts := parseServe(t, io.Discard, "--model", serveFixture)
	if opts.MaxBatch != 16 || opts.Workers != 0 || concurrency(opts.MaxConcurrency, opts.MaxBatch) != 16 {
		t.Errorf("defaults: --max-batch %d, --workers %d, %d generations at once; want 16, 0 and 16",
			opts.MaxBatch, opts.Workers, concurrency(opts.MaxConcurrency, opts.MaxBatch))
	}
}

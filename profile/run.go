package profile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// Request is one profiling request, already tokenized.
type Request struct {
	ID        string
	Source    string  // where the request came from (system prompt, data set)
	Prompt    []int32 // templated prompt tokens
	PrefixLen int     // shared prefix m
	// Suite and Answer, when the request comes from a task suite: its
	// reference answer, which the method search scores accuracy against.
	Suite, Answer string
}

// Ratio is r = m / (prompt tokens + gen length).
func (r Request) Ratio(genLength int) float64 {
	return float64(r.PrefixLen) / float64(len(r.Prompt)+genLength)
}

// Output files of a run directory.
const (
	SimilarityFile = "similarity.parquet"
	TableFile      = "table-cosine.json"
	// CrossTableFile is the table by the worst-row statistic, written next
	// to a whole-prefix table.json: the one to serve with a cross-request
	// deep source (docs/profiling.md, "Two statistics").
	CrossTableFile = "table-cosine-row-min.json"
	RunFile        = "run.json"
	PartialFile    = "similarity.partial.jsonl"
)

// Runner profiles a model over requests, writing OutDir/{similarity.parquet,
// table-cosine.json, table-cosine-row-min.json, run.json}. Every finished request is appended to
// similarity.partial.jsonl first, so an interrupted run resumes where it
// stopped.
type Runner struct {
	Model    *model.Network
	Gen      sample.GenOptions
	AllSteps bool
	Info     RunInfo // written with the results; Tau and Edges build the table
	OutDir   string
	Resume   bool
	// Progress, if set, is called after each request with the number done
	// (including those resumed) and the total.
	Progress func(done, total int)
}

// Result is what a finished run wrote.
type Result struct {
	Table *lut.Table
	// CrossTable is the worst-row table written as CrossTableFile (nil when
	// Table already is one, or when resumed records lack the statistic).
	CrossTable *lut.Table
	Records    []Record
	Resumed    int // requests taken from an earlier, interrupted run
}

type partialHeader struct {
	Run RunInfo `json:"run"`
}

type partialLine struct {
	ID      string   `json:"id"`
	Records []Record `json:"records"`
}

// Run measures every request not yet recorded, then writes the outputs.
func (r *Runner) Run(ctx context.Context, reqs []Request) (*Result, error) {
	start := time.Now()
	if err := lut.CheckTau(r.Info.Tau); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, errors.New("profile: no requests to run")
	}
	if err := os.MkdirAll(r.OutDir, 0o755); err != nil {
		return nil, err
	}
	partPath := filepath.Join(r.OutDir, PartialFile)
	done := map[string][]Record{}
	_, statErr := os.Stat(partPath)
	switch {
	case statErr == nil && !r.Resume:
		return nil, fmt.Errorf("%s holds an unfinished run (%s): pass --resume to continue it, or choose another --out", r.OutDir, PartialFile)
	case statErr == nil:
		var err error
		if done, err = readPartial(partPath, r.Info); err != nil {
			return nil, err
		}
	case r.Resume:
		// A finished run resumes to itself: its records are all there.
		if recs, info, err := ReadParquet(filepath.Join(r.OutDir, SimilarityFile)); err == nil {
			if err := info.sameResume(r.Info); err != nil {
				return nil, fmt.Errorf("--resume: %s was made with other settings (the run there vs this command): %w", r.OutDir, err)
			}
			for _, rec := range recs {
				done[rec.RequestID] = append(done[rec.RequestID], rec)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	resumed := 0
	for _, q := range reqs {
		if _, ok := done[q.ID]; ok {
			resumed++
		}
	}

	pf, err := openLog(partPath, partialHeader{Run: r.Info})
	if err != nil {
		return nil, err
	}
	defer pf.Close()

	n := resumed
	if r.Progress != nil {
		r.Progress(n, len(reqs))
	}
	for _, q := range reqs {
		if _, ok := done[q.ID]; ok {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sims, err := Measure(ctx, r.Model, q.Prompt, q.PrefixLen, r.Gen, r.AllSteps)
		if err != nil {
			return nil, fmt.Errorf("request %s: %w", q.ID, err)
		}
		recs := make([]Record, len(sims))
		total := len(q.Prompt) + r.Gen.GenLength
		for i, s := range sims {
			recs[i] = Record{RequestID: q.ID, Source: q.Source, PrefixTokens: int32(q.PrefixLen), TotalTokens: int32(total),
				Ratio: q.Ratio(r.Gen.GenLength), Layer: int32(s.Layer), Step: int32(s.Step), SimK: s.K, SimV: s.V, SimKV: s.KV, SimKVRowMin: s.KVRowMin}
		}
		if err := appendLine(pf, partialLine{ID: q.ID, Records: recs}); err != nil {
			return nil, fmt.Errorf("recording request %s: %w", q.ID, err)
		}
		done[q.ID] = recs
		n++
		if r.Progress != nil {
			r.Progress(n, len(reqs))
		}
	}

	// Outputs, in request order.
	var all []Record
	for _, q := range reqs {
		all = append(all, done[q.ID]...)
	}
	info := r.Info
	info.Requests = len(reqs)
	info.Seconds = time.Since(start).Seconds()
	t, err := BuildTable(all, info, info.Tau, info.Similarity)
	if err != nil {
		return nil, err
	}
	if err := WriteParquet(filepath.Join(r.OutDir, SimilarityFile), all, info); err != nil {
		return nil, err
	}
	if err := t.Write(filepath.Join(r.OutDir, TableFile)); err != nil {
		return nil, err
	}
	var cross *lut.Table
	if t.Similarity != string(SimRowMin) {
		// Skipped, not failed, when resumed records predate the statistic
		// (BuildTable then returns no table).
		if cross, _ = BuildTable(all, info, info.Tau, SimRowMin); cross != nil {
			if err := cross.Write(filepath.Join(r.OutDir, CrossTableFile)); err != nil {
				return nil, err
			}
		}
	}
	rj, _ := json.MarshalIndent(info, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(r.OutDir, RunFile), append(rj, '\n'), 0o644); err != nil {
		return nil, err
	}
	pf.Close()
	if err := os.Remove(partPath); err != nil {
		return nil, err
	}
	return &Result{Table: t, CrossTable: cross, Records: all, Resumed: resumed}, nil
}

// readPartial loads an interrupted run's records. A torn last line (the
// process died mid-write) is cut off the file; anything else malformed is an
// error.
func readPartial(path string, want RunInfo) (map[string][]Record, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	done := map[string][]Record{}
	good := 0 // bytes of well-formed, newline-terminated lines
	for off, first := 0, true; off < len(raw); first = false {
		nl := bytes.IndexByte(raw[off:], '\n')
		if nl < 0 {
			break // torn: no newline
		}
		ln := raw[off : off+nl]
		last := off+nl+1 == len(raw)
		if first {
			var h partialHeader
			if err := json.Unmarshal(ln, &h); err != nil {
				return nil, fmt.Errorf("%s: first line is not a run header: %w", path, err)
			}
			if err := h.Run.sameResume(want); err != nil {
				return nil, fmt.Errorf("--resume: %s was started with other settings (the run there vs this command): %w", path, err)
			}
		} else {
			var pl partialLine
			if err := json.Unmarshal(ln, &pl); err != nil {
				if last {
					break
				}
				return nil, fmt.Errorf("%s: malformed record at byte %d: %w", path, off, err)
			}
			done[pl.ID] = pl.Records
		}
		off += nl + 1
		good = off
	}
	if good < len(raw) {
		if err := os.Truncate(path, int64(good)); err != nil {
			return nil, err
		}
	}
	return done, nil
}

func appendLine(f *os.File, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return err
	}
	return f.Sync()
}

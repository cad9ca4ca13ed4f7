package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

func testRequests(t *testing.T, m *load.Model, n int) []Request {
	t.Helper()
	var reqs []Request
	for i := 0; i < n; i++ {
		sys := strings.Repeat(fmt.Sprintf("Rule %d: answer briefly. ", i%3), 1+i%4)
		user := strings.Repeat("Why? ", 1+(i*7)%9)
		ids, m0, err := m.Tokenizer.EncodeChat(sys, user)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, Request{ID: fmt.Sprintf("r%02d", i), Source: "test", Prompt: ids, PrefixLen: m0})
	}
	return reqs
}

// tinyRequests loads tiny-f32 and makes n of testRequests' requests for it.
func tinyRequests(t *testing.T, n int) (*load.Model, []Request) {
	t.Helper()
	m := testmodel.Load(t, "tiny-f32")
	return m, testRequests(t, m, n)
}

func testRunner(m *load.Model, dir string) *Runner {
	return &Runner{
		Model: m.Network, Gen: sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}}, OutDir: dir,
		Info: RunInfo{Model: lut.ModelID{Name: "tiny", NLayers: len(m.Blocks), Fingerprint: m.Fingerprint},
			Regime: regime.Regime{GenLength: 8, Steps: 4, BlockLength: 8}, Tau: 0.99, Ratios: "0.2:1:0.2", Edges: []float64{0.2, 0.4, 0.6, 0.8, 1}},
	}
}

func TestRunResumeEqualsUninterrupted(t *testing.T) {
	m, reqs := tinyRequests(t, 10)
	full, err := testRunner(m, t.TempDir()).Run(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	r := testRunner(m, dir)
	ctx, cancel := context.WithCancel(context.Background())
	r.Progress = func(done, total int) {
		if done == 4 {
			cancel() // interrupted after four requests
		}
	}
	if _, err := r.Run(ctx, reqs); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	// Tear the last line as a crash mid-write would.
	pf, _ := os.OpenFile(filepath.Join(dir, PartialFile), os.O_APPEND|os.O_WRONLY, 0)
	pf.WriteString(`{"id":"r09","records":[{"request_`)
	pf.Close()
	// Without --resume the unfinished run is refused, not overwritten.
	if _, err := testRunner(m, dir).Run(context.Background(), reqs); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("rerun without --resume: %v", err)
	}
	r = testRunner(m, dir)
	r.Resume = true
	res, err := r.Run(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 4 {
		t.Errorf("resumed %d requests, want 4", res.Resumed)
	}
	if !reflect.DeepEqual(res.Table.Bins, full.Table.Bins) {
		t.Errorf("resumed table %+v\nuninterrupted %+v", res.Table.Bins, full.Table.Bins)
	}
	if !reflect.DeepEqual(res.Records, full.Records) {
		t.Error("resumed records differ from the uninterrupted run's")
	}
	if _, err := os.Stat(filepath.Join(dir, PartialFile)); !os.IsNotExist(err) {
		t.Errorf("partial file left behind: %v", err)
	}
	// Resuming with other settings is refused.
	r = testRunner(m, dir)
	r.Resume, r.Info.GenLength, r.Gen.GenLength = true, 16, 16
	if _, err := r.Run(context.Background(), reqs); err == nil {
		t.Error("resume with another gen length: no error")
	}
}

func TestShardsMergeToOneTable(t *testing.T) {
	m, reqs := tinyRequests(t, 9)
	one, err := testRunner(m, t.TempDir()).Run(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for k := 0; k < 3; k++ {
		var part []Request
		for i := k; i < len(reqs); i += 3 {
			part = append(part, reqs[i])
		}
		dir := t.TempDir()
		r := testRunner(m, dir)
		r.Info.Shard = fmt.Sprintf("%d/3", k+1)
		if _, err := r.Run(context.Background(), part); err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.Join(dir, SimilarityFile))
	}
	recs, info, err := ReadAll(files)
	if err != nil {
		t.Fatal(err)
	}
	merged := buildTable(t, recs, info, 0.99, SimPrefix)
	if !reflect.DeepEqual(merged.Bins, one.Table.Bins) {
		t.Errorf("merged shards %+v\none run %+v", merged.Bins, one.Table.Bins)
	}
	// Another τ from the same files, without the model.
	if _, err := BuildTable(recs, info, 0.9, SimPrefix); err != nil {
		t.Error(err)
	}
	for _, tau := range []float64{0, -1, 1.5} {
		if _, err := BuildTable(recs, info, tau, SimPrefix); err == nil {
			t.Errorf("τ %v: no error", tau)
		}
	}
}

func TestReadParquetBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.parquet")
	os.WriteFile(junk, []byte("PAR1 this is not parquet"), 0o644)
	type other struct {
		A int64 `parquet:"a"`
	}
	wrong := filepath.Join(dir, "wrong.parquet")
	if err := parquet.WriteFile(wrong, []other{{1}}); err != nil {
		t.Fatal(err)
	}
	nometa := filepath.Join(dir, "nometa.parquet")
	if err := parquet.WriteFile(nometa, []Record{{RequestID: "x", Layer: 1, Step: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{junk, "not a readable parquet"},
		{wrong, "column \"request_id\" is missing"},
		{nometa, "not written by dlmcache"},
		{filepath.Join(dir, "absent.parquet"), "no such file"},
	} {
		_, _, err := ReadParquet(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), filepath.Base(tc.path)) {
			t.Errorf("%s: %v (want %q and the file name)", tc.path, err, tc.want)
		}
	}
	if _, _, err := ReadAll(nil); err == nil {
		t.Error("no files: no error")
	}
}

func TestConvergenceL1SettlesAsRequestsAccumulate(t *testing.T) {
	info := RunInfo{Model: lut.ModelID{NLayers: 4}, Edges: []float64{0, 0.5, 1}}
	var recs []Record
	add := func(id string, ratio float64, sims ...float64) {
		for l, s := range sims {
			recs = append(recs, Record{RequestID: id, Ratio: ratio, Layer: int32(l + 1), Step: 1, SimKV: s})
		}
	}
	// Bin 0: depths 1, 3, 2, 2, 2, 2 — the mean settles at 2.
	for i, d := range []int{1, 3, 2, 2, 2, 2} {
		sims := []float64{1, 1, 1, 1}
		if d < 4 {
			sims[d] = 0.5
		}
		add(fmt.Sprintf("a%d", i), 0.25, sims...)
	}
	pts, stable, err := Convergence(recs, info, 0.9, SimPrefix, lut.Mean, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []ConvergencePoint{{2, 1}, {3, 0}, {4, 0}, {5, 0}, {6, 0}} // N=1: 1, N=2: 2, then 2
	if !reflect.DeepEqual(pts, want) || stable != 3 {
		t.Errorf("Convergence = %v, stable %d; want %v, 3", pts, stable, want)
	}
	if _, _, err := Convergence(recs, info, 0.9, SimPrefix, lut.Mean, 6, 0); err == nil {
		t.Error("too few requests for one comparison: no error")
	}
}

func TestSuiteSamplesBenchmarkFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gsm8k.jsonl")
	os.WriteFile(p, []byte(`{"question":"1+1?","answer":"two #### 2"}`+"\n"+`{"question":"2+2?","answer":"#### 4"}`+"\n"), 0o644)
	got, err := SuiteSamples([]string{"lookup", "gsm8k=" + p}, 2, 1, datasets.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[1].Suite != "gsm8k" || got[1].Answer != "2" || got[3].Answer != "4" || got[0].Suite != "lookup" {
		t.Errorf("samples: %+v", got)
	}
	if _, err := SuiteSamples([]string{"gsm8k=" + p + ".missing"}, 2, 1, datasets.DefaultOptions()); err == nil {
		t.Error("missing benchmark file: no error")
	}
	if _, err := SuiteSamples([]string{"nosuch"}, 2, 1, datasets.DefaultOptions()); err == nil {
		t.Error("unknown suite: no error")
	}
}

// TestOverallPoolsFLOPs: the average line's FLOPs fraction pools the suites'
// FLOPs (a big suite weighs more), and its accuracy is the suites' mean.
func TestOverallPoolsFLOPs(t *testing.T) {
	rs := []SuiteResult{
		{Method: "bicache", Suite: "a", N: 10, Accuracy: 1, Seconds: 1, TokensPerSec: 160, FLOPs: 100, FLOPsFraction: 0.25},
		{Method: "bicache", Suite: "b", N: 10, Accuracy: 0.5, Seconds: 1, TokensPerSec: 160, FLOPs: 300, FLOPsFraction: 0.5},
	}
	o := Overall(rs)
	if o.FLOPs != 400 || math.Abs(o.FLOPsFraction-400.0/1000) > 1e-12 {
		t.Errorf("FLOPs %g, fraction %g: want 400, 0.4", o.FLOPs, o.FLOPsFraction)
	}
	if o.Accuracy != 0.75 || o.N != 20 || o.TokensPerSec != 160 {
		t.Errorf("accuracy %g, n %d, tokens/s %g: want 0.75, 20, 160", o.Accuracy, o.N, o.TokensPerSec)
	}
}

// TestEvaluateInterleavedEqualsSeparate: taking turns changes when each
// request runs, not what it computes: answers, forwards, rows and FLOPs equal
// each method's run on its own, and the progress counts every request.
func TestEvaluateInterleavedEqualsSeparate(t *testing.T) {
	m := testmodel.Load(t, "tiny-f32")
	samples, err := SuiteSamples([]string{"lookup", "sequence"}, 3, 1, datasets.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	gen := sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}}
	evals := func() []*Evaluator {
		var es []*Evaluator
		for _, name := range []string{"none", "prefix-all"} {
			meth, err := cache.New(name, cache.Options{Store: cache.NewStore(m.Backend, 1<<30, cache.FIFO), Fingerprint: m.Fingerprint})
			if err != nil {
				t.Fatal(err)
			}
			es = append(es, &Evaluator{Model: m, Method: meth, Gen: gen})
		}
		return es
	}
	calls := 0
	got, err := EvaluateInterleaved(context.Background(), evals(), samples, func(done, total int) {
		calls++
		if done != calls || total != 2*len(samples) {
			t.Errorf("progress %d/%d at call %d", done, total, calls)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2*len(samples) {
		t.Errorf("%d progress calls, want %d", calls, 2*len(samples))
	}
	for j, e := range evals() {
		want, err := e.Evaluate(context.Background(), samples)
		if err != nil {
			t.Fatal(err)
		}
		if len(got[j]) != len(want) {
			t.Fatalf("%s: %d suites, want %d", e.Method.Name(), len(got[j]), len(want))
		}
		for i := range want {
			g, w := got[j][i], want[i]
			if g.Method != w.Method || g.Suite != w.Suite || g.N != w.N || g.Correct != w.Correct || g.NFE != w.NFE ||
				g.RowsFraction != w.RowsFraction || g.FLOPs != w.FLOPs || g.HitTokens != w.HitTokens {
				t.Errorf("%s/%s interleaved %+v, alone %+v", w.Method, w.Suite, g, w)
			}
		}
	}
}

// TestRowMinStatistic: a profile run records the worst-row similarity and
// builds its table from it when asked; a file written before the column
// existed still builds the whole-prefix table and refuses the other, naming
// the fix.
func TestRowMinStatistic(t *testing.T) {
	m, reqs := tinyRequests(t, 6)
	dir := t.TempDir()
	r := testRunner(m, dir)
	r.Info.Similarity = SimRowMin
	res, err := r.Run(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Table.Similarity != string(SimRowMin) {
		t.Errorf("table similarity %q, want %q", res.Table.Similarity, SimRowMin)
	}
	recs, info, err := ReadAll([]string{filepath.Join(dir, SimilarityFile)})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range recs {
		if math.IsNaN(x.SimKVRowMin) || x.SimKVRowMin > 1+1e-9 || x.SimKVRowMin < -1-1e-9 {
			t.Fatalf("record %+v: worst-row similarity outside [-1, 1]", x)
		}
	}
	prefix := buildTable(t, recs, info, 0.99, SimPrefix)
	rowMin := buildTable(t, recs, info, 0.99, SimRowMin)
	if !reflect.DeepEqual(rowMin.Bins, res.Table.Bins) {
		t.Errorf("rebuilt row-min table %+v, run's %+v", rowMin.Bins, res.Table.Bins)
	}
	if _, err := BuildTable(recs, info, 0.99, "median"); err == nil || !strings.Contains(err.Error(), "median") {
		t.Errorf("unknown similarity: %v", err)
	}

	// The same records written by a version without the column.
	type oldRecord struct {
		RequestID    string  `parquet:"request_id,dict"`
		Source       string  `parquet:"source,dict"`
		PrefixTokens int32   `parquet:"prefix_tokens"`
		TotalTokens  int32   `parquet:"total_tokens"`
		Ratio        float64 `parquet:"ratio"`
		Layer        int32   `parquet:"layer"`
		Step         int32   `parquet:"step"`
		SimK         float64 `parquet:"sim_k"`
		SimV         float64 `parquet:"sim_v"`
		SimKV        float64 `parquet:"sim_kv"`
	}
	old := make([]oldRecord, len(recs))
	for i, x := range recs {
		old[i] = oldRecord{x.RequestID, x.Source, x.PrefixTokens, x.TotalTokens, x.Ratio, x.Layer, x.Step, x.SimK, x.SimV, x.SimKV}
	}
	meta, _ := json.Marshal(info)
	oldPath := filepath.Join(t.TempDir(), "old.parquet")
	f, err := os.Create(oldPath)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[oldRecord](f, parquet.KeyValueMetadata(MetaKey, string(meta)))
	if _, err := w.Write(old); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	oldRecs, oldInfo, err := ReadAll([]string{oldPath})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := BuildTable(oldRecs, oldInfo, 0.99, SimPrefix); err != nil || !reflect.DeepEqual(again.Bins, prefix.Bins) {
		t.Errorf("old file, whole-prefix table: %v, bins %+v want %+v", err, again, prefix.Bins)
	}
	if _, err := BuildTable(oldRecs, oldInfo, 0.99, SimRowMin); err == nil || !strings.Contains(err.Error(), "rerun dlmcache profile") {
		t.Errorf("old file, row-min table: %v, want an error naming the fix", err)
	}
}

// TestRunWritesCrossTable: a whole-prefix run also writes the worst-row
// table; a worst-row run writes only its own.
func TestRunWritesCrossTable(t *testing.T) {
	m, reqs := tinyRequests(t, 4)
	dir := t.TempDir()
	res, err := testRunner(m, dir).Run(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	cross, err := lut.Read(filepath.Join(dir, CrossTableFile))
	if err != nil {
		t.Fatal(err)
	}
	want := buildTable(t, res.Records, testRunner(m, dir).Info, 0.99, SimRowMin)
	if cross.Similarity != string(SimRowMin) || !reflect.DeepEqual(cross.Bins, want.Bins) || res.CrossTable == nil {
		t.Errorf("cross table %+v, want the worst-row bins %+v", cross, want.Bins)
	}
	dir2 := t.TempDir()
	r := testRunner(m, dir2)
	r.Info.Similarity = SimRowMin
	if res, err := r.Run(context.Background(), reqs); err != nil || res.CrossTable != nil {
		t.Fatalf("row-min run: %v, cross table %v", err, res.CrossTable)
	}
	if _, err := os.Stat(filepath.Join(dir2, CrossTableFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("row-min run wrote %s: %v", CrossTableFile, err)
	}
}

// TestReadPartialOldLines: a partial file written before the worst-row
// statistic resumes with it marked missing, not as 0.
func TestReadPartialOldLines(t *testing.T) {
	info := RunInfo{Model: lut.ModelID{Name: "tiny", NLayers: 2}, Edges: []float64{0, 1}}
	hdr, _ := json.Marshal(partialHeader{Run: info})
	path := filepath.Join(t.TempDir(), PartialFile)
	lines := string(hdr) + "\n" +
		`{"id":"a","records":[{"request_id":"a","layer":1,"step":1,"sim_kv":0.99}]}` + "\n" +
		`{"id":"b","records":[{"request_id":"b","layer":1,"step":1,"sim_kv":0.98,"sim_kv_row_min":0.5}]}` + "\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	done, err := readPartial(path, info)
	if err != nil {
		t.Fatal(err)
	}
	if a := done["a"][0]; !math.IsNaN(a.SimKVRowMin) || a.SimKV != 0.99 {
		t.Errorf("old line: %+v, want the worst row NaN", a)
	}
	if b := done["b"][0]; b.SimKVRowMin != 0.5 {
		t.Errorf("new line: %+v, want the worst row 0.5", b)
	}
}

// TestRunOutputsReadable: every file a profile writes is 0644 under the
// default umask (atomicfile applies the umask as os.WriteFile does), and
// similarity.parquet is zstd-compressed and reads back.
func TestRunOutputsReadable(t *testing.T) {
	m, reqs := tinyRequests(t, 3)
	dir := t.TempDir()
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	if _, err := testRunner(m, dir).Run(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want -rw-r--r--", e.Name(), fi.Mode().Perm())
		}
	}
	path := filepath.Join(dir, SimilarityFile)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	for _, rg := range pf.RowGroups() {
		for i, cc := range rg.ColumnChunks() {
			if codec := pf.Metadata().RowGroups[0].Columns[i].MetaData.Codec; codec != format.Zstd {
				t.Errorf("column %d (%T): codec %v, want zstd", i, cc, codec)
			}
		}
	}
	if recs, _, err := ReadParquet(path); err != nil || len(recs) == 0 {
		t.Errorf("reading it back: %d records, %v", len(recs), err)
	}
}

// A multi-turn workload on a block store that keeps answered
// conversations: results per turn, and from turn 2 on the request's whole
// conversation before its question is found stored but for the last
// partial block.
func TestEvaluateConversations(t *testing.T) {
	m := testmodel.Load(t, "tiny-f32")
	samples, err := SuiteSamples([]string{"lookup"}, 2, 1, datasets.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if samples, err = datasets.Conversations(samples, 3); err != nil {
		t.Fatal(err)
	}
	const B = 16
	meth, err := cache.New("prefix-all", cache.Options{Store: cache.NewBlockStore(m.Backend, B, 1<<30, true, nil), Fingerprint: m.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	e := &Evaluator{Model: m, Method: meth, Gen: sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}}, HistoryPrefix: true, StoreAnswers: true}
	rs, err := e.Evaluate(context.Background(), samples)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Suite != "lookup turn 1" || rs[2].Suite != "lookup turn 3" {
		t.Fatalf("results %+v", rs)
	}
	for _, r := range rs[1:] {
		if r.N != 2 || r.HitTokens < r.QueryTokens-int64(r.N*B) || r.HitTokens == 0 {
			t.Errorf("%s: %d of %d prefix tokens hit (n %d)", r.Suite, r.HitTokens, r.QueryTokens, r.N)
		}
	}
}

// Chat conversations have no reference answers: they are not scored, the
// average's accuracy is the scored suites', and every method's answers are
// compared with none's (a second none agrees with the first on all).
func TestEvaluateChatAgreement(t *testing.T) {
	m := testmodel.Load(t, "tiny-f32")
	samples, err := SuiteSamples([]string{"lookup"}, 1, 1, datasets.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ps, err := datasets.LoadConversations([]string{"builtin"}, datasets.WildChatFilter{MinTurns: 2, MaxConversationChars: 1500}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := datasets.ChatConversations(ps, "You are a helpful assistant.", 2)
	if err != nil {
		t.Fatal(err)
	}
	samples = append(samples, chat...)
	gen := sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 4}}
	var es []*Evaluator
	for _, name := range []string{"none", "none", "prefix-all"} {
		o := cache.Options{Fingerprint: m.Fingerprint}
		if name == "prefix-all" {
			o.Store = cache.NewStore(m.Backend, 1<<30, cache.FIFO)
		}
		meth, err := cache.New(name, o)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, &Evaluator{Model: m, Method: meth, Gen: gen})
	}
	res, err := EvaluateInterleaved(context.Background(), es, samples, nil)
	if err != nil {
		t.Fatal(err)
	}
	for j, rs := range res {
		if len(rs) != 3 || rs[0].Suite != "lookup" || rs[0].Unscored || rs[1].Suite != "wildchat turn 1" || !rs[1].Unscored || rs[1].Correct != 0 {
			t.Fatalf("evaluator %d: %+v", j, rs)
		}
		o := Overall(rs)
		if o.Unscored || o.Accuracy != rs[0].Accuracy {
			t.Errorf("evaluator %d: average accuracy %v unscored %v, want the lookup suite's %v", j, o.Accuracy, o.Unscored, rs[0].Accuracy)
		}
		for _, r := range rs {
			switch {
			case j == 0 && r.AgreeNone != nil:
				t.Errorf("none itself has an agreement %v", *r.AgreeNone)
			case j == 1 && (r.AgreeNone == nil || *r.AgreeNone != 1):
				t.Errorf("a second none on %s: agreement %v, want 1", r.Suite, r.AgreeNone)
			case j == 2 && (r.AgreeNone == nil || *r.AgreeNone < 0 || *r.AgreeNone > 1):
				t.Errorf("prefix-all on %s: agreement %v", r.Suite, r.AgreeNone)
			}
		}
		if j > 0 && (o.AgreeNone == nil) {
			t.Errorf("evaluator %d: no pooled agreement", j)
		}
	}
}

// TestResumeRefusesOtherMeaning: an interrupted run resumed with settings
// that change what its records mean or which requests they are (--all-steps,
// the sources, the regime, the sampling) is refused with the setting named,
// and the partial file is left as it was.
func TestResumeRefusesOtherMeaning(t *testing.T) {
	m, reqs := tinyRequests(t, 6)
	dir := t.TempDir()
	r := testRunner(m, dir)
	r.AllSteps, r.Info.AllSteps = true, true
	r.Info.Data = []string{"a.jsonl"}
	ctx, cancel := context.WithCancel(context.Background())
	r.Progress = func(done, _ int) {
		if done == 2 {
			cancel()
		}
	}
	if _, err := r.Run(ctx, reqs); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	part := filepath.Join(dir, PartialFile)
	before, _ := os.ReadFile(part)
	resume := func(change func(*Runner)) error {
		r := testRunner(m, dir)
		r.Resume, r.AllSteps, r.Info.AllSteps = true, true, true
		r.Info.Data = []string{"a.jsonl"}
		change(r)
		_, err := r.Run(context.Background(), reqs)
		return err
	}
	for _, tc := range []struct {
		name   string
		change func(*Runner)
		want   string
	}{
		{"without --all-steps", func(r *Runner) { r.AllSteps, r.Info.AllSteps = false, false }, "all_steps true vs false"},
		{"other data", func(r *Runner) { r.Info.Data = []string{"b.jsonl"} }, "sources"},
		{"other system prompts", func(r *Runner) { r.Info.Systems = []string{"x"} }, "sources"},
		{"other regime", func(r *Runner) { r.Info.Steps, r.Gen.Steps = 8, 8 }, "generation settings"},
		{"other seed", func(r *Runner) { r.Info.Seed = 7 }, "seed"},
	} {
		err := resume(tc.change)
		if err == nil || !strings.Contains(err.Error(), "--resume") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a --resume error naming %q", tc.name, err, tc.want)
		}
		if after, _ := os.ReadFile(part); string(after) != string(before) {
			t.Fatalf("%s: the refused resume changed %s", tc.name, PartialFile)
		}
	}
	if err := resume(func(*Runner) {}); err != nil {
		t.Errorf("resume with the same settings: %v", err)
	}
}

// buildTable is BuildTable; an error ends the test.
func buildTable(t *testing.T, recs []Record, info RunInfo, tau float64, sim Similarity) *lut.Table {
	t.Helper()
	tb, err := BuildTable(recs, info, tau, sim)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

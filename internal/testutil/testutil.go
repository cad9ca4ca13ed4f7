// Package testutil holds helpers that tests of several packages share.
package testutil

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dlmcache/dlmcache/regime"
)

// SyncBuffer is a bytes.Buffer that a server's goroutines may write while
// a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ReadJSON decodes the JSON file at path into v; an error ends the test.
func ReadJSON(t testing.TB, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// ErrorSays checks that err is an error whose message contains each of
// want; a nil err ends the test.
func ErrorSays(t testing.TB, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one that says %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// FirstDiff is the first index where a and b differ bit for bit (the
// shorter one's length where one is a prefix of the other), or -1 where
// they are equal.
func FirstDiff(a, b []float32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// RelErr is max |got−want| / max |want| (max |got−want| when want is all
// zeros; +Inf when the lengths differ).
func RelErr(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range want {
		num = max(num, math.Abs(float64(got[i])-float64(want[i])))
		den = max(den, math.Abs(float64(want[i])))
	}
	if den == 0 {
		return num
	}
	return num / den
}

// Generation is one generation case of a model/testdata fixture's
// golden.json (tools/golden): the prompt, the schedule and the reference
// sampler's answer.
type Generation struct {
	Name      string  `json:"name"`
	PromptIDs []int32 `json:"prompt_ids"`
	regime.Regime
	OutputIDs []int32 `json:"output_ids"`
	AnswerIDs []int32 `json:"answer_ids"`
}

// LoadGolden loads the fixture in dir: its model with open (closed with
// closeModel when the test ends), its golden.json decoded into a G, and
// its golden.safetensors opened with openSet (closed when the test ends).
func LoadGolden[G, M any, S interface{ Close() error }](t testing.TB, dir string, open func(string) (M, error), closeModel func(M), openSet func(string) (S, error)) (M, *G, S) {
	t.Helper()
	m, err := open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeModel(m) })
	var g G
	ReadJSON(t, filepath.Join(dir, "golden.json"), &g)
	gs, err := openSet(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gs.Close() })
	return m, &g, gs
}

// BlockGeneration is one block decoding of a block-causal fixture's
// golden.json (tools/golden): the prompt, the decoder (threshold or
// schedule) and the reference's answer with the positions each step
// committed.
type BlockGeneration struct {
	Name        string   `json:"name"`
	PromptIDs   []int32  `json:"prompt_ids"`
	GenLength   int      `json:"gen_length"`
	BlockLength int      `json:"block_length"`
	Decoding    string   `json:"decoding"`
	Threshold   *float64 `json:"threshold"`
	Steps       *int     `json:"steps"`
	AnswerIDs   []int32  `json:"answer_ids"`
	Trace       []struct {
		Block     int     `json:"block"`
		Committed []int32 `json:"committed"`
		N         int     `json:"n"`
	} `json:"trace"`
	NFE int `json:"nfe"`
}

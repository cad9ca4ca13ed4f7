package tokenizer

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/trained from Train")

var llaDASpecials = []string{TokenBOS, TokenEOS, TokenEOT, TokenStartHeader, TokenEndHeader, TokenMask}

func corpus(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, p := range strings.Split(string(data), "\n\n") {
		// Repeat so pairs are frequent enough to merge.
		for i := 0; i < 3; i++ {
			texts = append(texts, p)
		}
	}
	return texts
}

func TestTrainedTokenizerPlacesSpecialsAndRoundTrips(t *testing.T) {
	texts := corpus(t)
	tk, err := Train(texts, 700, llaDASpecials)
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.VocabSize(); got != 700 {
		t.Errorf("VocabSize = %d, want 700", got)
	}
	// Specials right after the BPE vocab, in order, special.
	for i, s := range llaDASpecials {
		id, ok := tk.TokenID(s)
		if !ok || int(id) != 700-len(llaDASpecials)+i || !tk.IsSpecial(id) {
			t.Errorf("special %q: id %d ok %v", s, id, ok)
		}
	}
	// Byte symbols keep their byte values as ids.
	for b := 0; b < 256; b++ {
		if id, ok := tk.TokenID(string(byteToRune[b])); !ok || id != int32(b) {
			t.Fatalf("byte %d has id %d", b, id)
		}
	}
	// Merges compress and round-trip.
	nTok, nByte := 0, 0
	for _, s := range texts {
		ids := tk.Encode(s)
		nTok += len(ids)
		nByte += len(s)
		if got := tk.Decode(ids); got != s {
			t.Fatalf("round trip: %q -> %q", s, got)
		}
	}
	if nTok*2 > nByte {
		t.Errorf("trained BPE barely compresses: %d tokens for %d bytes", nTok, nByte)
	}
	t.Logf("%d tokens for %d bytes (%.2f bytes/token)", nTok, nByte, float64(nByte)/float64(nTok))
	// Special tokens in the text are not learned as merges.
	for _, tok := range tk.idToToken[:700-len(llaDASpecials)] {
		if strings.Contains(tok, "<|") {
			t.Errorf("learned token %q holds a special token's text", tok)
		}
	}
	for _, w := range []string{"Ġthe", "the", "Ġmodel"} {
		if _, ok := tk.TokenID(w); !ok {
			t.Errorf("frequent word %q was not learned", w)
		}
	}

	// Deterministic.
	tk2, err := Train(texts, 700, llaDASpecials)
	if err != nil {
		t.Fatal(err)
	}
	if string(tk.source) != string(tk2.source) {
		t.Error("two Train runs differ")
	}
	// Same as the committed fixture (used by the Python golden).
	if *update {
		if err := tk.Save("testdata/trained"); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/trained/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(tk.source) != string(want) {
		t.Error("Train output differs from testdata/trained/tokenizer.json (run go test -run TestTrainedTokenizerPlacesSpecialsAndRoundTrips -update after a deliberate change)")
	}
}

func TestSaveLoad(t *testing.T) {
	texts := corpus(t)
	for _, pattern := range []string{PatternGPT2, PatternLlama3} {
		tk, err := Train(texts, 600, llaDASpecials, WithPattern(pattern))
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "tok")
		if err := tk.Save(dir); err != nil {
			t.Fatal(err)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(m) > 0 {
			t.Errorf("temp files left: %v", m)
		}
		back, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if back.VocabSize() != tk.VocabSize() || back.ChatTemplate() != LLaDATemplate {
			t.Errorf("loaded: vocab %d template %q", back.VocabSize(), back.ChatTemplate())
		}
		if back.BOS() != TokenBOS || back.EOS() != TokenEOS || back.cfg.pad != TokenEOS {
			t.Errorf("loaded BOS %q EOS %q pad %q", back.BOS(), back.EOS(), back.cfg.pad)
		}
		for _, s := range append(texts, roundTripTexts...) {
			if a, b := tk.Encode(s), back.Encode(s); !reflect.DeepEqual(a, b) {
				t.Fatalf("Encode(%q): trained %v, loaded %v", s, a, b)
			}
		}
		a1, n1, err1 := tk.EncodeChat("You are a helpful assistant.", "What is 12 + 30?")
		a2, n2, err2 := back.EncodeChat("You are a helpful assistant.", "What is 12 + 30?")
		if err1 != nil || err2 != nil || n1 != n2 || !reflect.DeepEqual(a1, a2) {
			t.Errorf("EncodeChat: %v %d %v vs %v %d %v", a1, n1, err1, a2, n2, err2)
		}
		// Saving the loaded tokenizer again gives the same files.
		dir2 := filepath.Join(t.TempDir(), "tok2")
		if err := back.Save(dir2); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
			x, _ := os.ReadFile(filepath.Join(dir, f))
			y, _ := os.ReadFile(filepath.Join(dir2, f))
			if string(x) != string(y) {
				t.Errorf("%s changes when saved twice", f)
			}
		}
	}
}

func TestLlama3PatternTrains(t *testing.T) {
	tk, err := Train(corpus(t), 600, nil, WithPattern(PatternLlama3))
	if err != nil {
		t.Fatal(err)
	}
	// Digits are split in groups of at most three, so no learned token
	// holds four digits.
	for _, tok := range tk.idToToken {
		digits := 0
		for _, r := range tok {
			if r >= '0' && r <= '9' {
				digits++
			}
		}
		if digits > 3 {
			t.Errorf("token %q has %d digits", tok, digits)
		}
	}
	if got := tk.Encode("1234567"); len(got) < 3 {
		t.Errorf("1234567 -> %v", got)
	}
}

func TestTrainErrors(t *testing.T) {
	for _, c := range []struct {
		vocab    int
		specials []string
		opts     []TrainOption
		want     string
	}{
		{200, nil, nil, "vocabSize 200"},
		{300, []string{"<a>", "<a>"}, nil, "given twice"},
		{300, []string{""}, nil, "empty special"},
		{300, []string{"<a>"}, []TrainOption{WithBOS("<b>")}, "not among the special tokens"},
		{300, nil, []TrainOption{WithPattern("(")}, "bad regex"},
	} {
		_, err := Train([]string{"abc"}, c.vocab, c.specials, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Train(vocab %d, %q): %v, want %q", c.vocab, c.specials, err, c.want)
		}
	}
	// A corpus with too few pairs stops early.
	tk, err := Train([]string{"ab ab ab"}, 1000, []string{"<s>"})
	if err != nil {
		t.Fatal(err)
	}
	if tk.VocabSize() >= 1000 || tk.VocabSize() < 258 {
		t.Errorf("tiny corpus: VocabSize %d", tk.VocabSize())
	}
	if id, _ := tk.TokenID("<s>"); int(id) != tk.VocabSize()-1 {
		t.Errorf("special id %d, VocabSize %d", id, tk.VocabSize())
	}
}

// TestTrainerCounts checks the incremental pair counts against a recount
// after every merge, on words with repeats such as "aaaa".
func TestTrainerCounts(t *testing.T) {
	words := [][]int32{{1, 1, 1, 1}, {1, 2, 1, 2, 1}, {2, 1, 1, 2}, {3, 1, 1, 1, 3}}
	counts := []int64{5, 3, 2, 7}
	tr := newTrainer(len(words))
	for i, w := range words {
		tr.addWord(int32(i), append([]int32(nil), w...), counts[i])
	}
	tr.start()
	next := int32(10)
	for step := 0; step < 8; step++ {
		a, b, ok := tr.best(1)
		if !ok {
			break
		}
		// Recount from scratch and check the chosen pair is a maximum.
		full := map[uint64]int64{}
		for i, w := range tr.words {
			for j := 0; j+1 < len(w); j++ {
				full[pairKey(w[j], w[j+1])] += tr.counts[i]
			}
		}
		for k, n := range full {
			if tr.pairs[k] != n {
				t.Fatalf("step %d: pair %x count %d, recount %d", step, k, tr.pairs[k], n)
			}
			if n > full[pairKey(a, b)] {
				t.Fatalf("step %d: chose %d,%d (%d) but %x has %d", step, a, b, full[pairKey(a, b)], k, n)
			}
		}
		tr.merge(a, b, next)
		next++
	}
}

package serve

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/engine"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// blockCausalServer serves the block-causal random-weights fixture (blocks of
// 8) with no cache, its generation defaults filled by the engine from a
// gen length of 16 alone.
func blockCausalServer(t *testing.T) *Server {
	t.Helper()
	blockModel := testmodel.Shared(t, "tiny-block")
	gen, err := (&engine.Model{Model: blockModel}).GenOptions(regime.Regime{GenLength: 16})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Model: blockModel, Method: noneMethod(t), Gen: gen, MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A block-causal model's requests decode in the model's blocks with its
// threshold decoder: the server fills them in, keeps the default steps
// per block for other lengths, and refuses another block length.
func TestBlockCausalGenOptions(t *testing.T) {
	s := blockCausalServer(t)
	def := s.cfg.Gen
	if def.BlockLength != 8 || def.Steps != 16 || def.Decoder != (sample.Threshold{T: sample.DefaultBlockThreshold}) {
		t.Fatalf("defaults %+v", def)
	}
	checkGenOptions(t, s, []genCase{
		{"defaults", genFields{}, [3]int{16, 16, 8}},
		{"gen_length off the blocks", genFields{GenLength: ip(20)}, [3]int{20, 20, 8}},
		{"max_tokens rounds up to blocks", genFields{MaxTokens: ip(20)}, [3]int{24, 24, 8}},
		{"block_length restated", genFields{BlockLength: ip(8), Steps: ip(8)}, [3]int{16, 8, 8}},
	})
	for _, g := range []genFields{{BlockLength: ip(4)}, {Steps: ip(3)}} {
		if _, e := s.genOptions(&g); e == nil {
			t.Errorf("%+v: no error", g)
		}
	}
}

// Streaming a block-causal model's answer: a delta per committed block —
// exactly the text each block adds, in the order the blocks commit (the
// model's own generation, block by block, is the reference) — joining to
// the unstreamed answer.
func TestBlockCausalStream(t *testing.T) {
	s := blockCausalServer(t)
	const sys, user = "Be brief.", "Hello"
	full := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody(sys, user, "")))
	rec := post(t, s, "/v1/chat/completions", chatBody(sys, user, `"stream":true`))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	ev := sseEvents(t, rec.Body.String())
	var got []string
	for _, e := range ev[:len(ev)-1] {
		var c struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) == 0 || c.Choices[0].FinishReason != nil || c.Choices[0].Delta.Content == "" {
			continue
		}
		got = append(got, c.Choices[0].Delta.Content)
	}
	if strings.Join(got, "") != full.Choices[0].Message.Content {
		t.Errorf("streamed %q, unstreamed %q", strings.Join(got, ""), full.Choices[0].Message.Content)
	}
	// The reference: the text each committed block adds to the answer (a
	// character cut at a block's end comes with the next block).
	bm := testmodel.Shared(t, "tiny-block")
	ids, _, err := bm.Tokenizer.EncodeChat(sys, user)
	if err != nil {
		t.Fatal(err)
	}
	o := s.cfg.Gen
	var want []string
	sent, blocks := "", 0
	o.OnBlock = func(_, end int, canvas []int32) {
		blocks++
		ans := canvas[len(ids):end]
		text, n, _ := s.answer(ans, 0, nil)
		if bm.AnswerEnd(ans) == len(ans) && end < len(canvas) {
			text = bm.Tokenizer.DecodePrefix(ans[:n])
		}
		if strings.HasPrefix(text, sent) && len(text) > len(sent) {
			want = append(want, text[len(sent):])
			sent = text
		}
	}
	if _, err := sample.Generate(context.Background(), bm.Network, ids, 0, o, nil); err != nil {
		t.Fatal(err)
	}
	if len(want) < 2 {
		t.Fatalf("the reference answer grows in %d of %d blocks: the test needs an answer over several blocks", len(want), blocks)
	}
	if !slices.Equal(got, want) {
		t.Errorf("streamed deltas %q, want the blocks' texts %q", got, want)
	}
}

// noneMethod is the method that computes every row.
func noneMethod(t testing.TB) cache.Method {
	t.Helper()
	none, err := cache.New("none", cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return none
}

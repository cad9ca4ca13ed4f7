package serve

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model"
)

// blockCausalServer serves the block-causal random-weights fixture (blocks of
// 8) with no cache, its generation defaults filled by the server from a
// gen length of 16 alone.
func blockCausalServer(t *testing.T) *Server {
	t.Helper()
	blockModel := testmodel.Shared(t, "tiny-block")
	none, err := cache.New("none", cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Model: blockModel, Method: none, Gen: model.GenOptions{GenLength: 16}, MaxConcurrency: 1})
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
	if def.BlockLength != 8 || def.Steps != 16 || def.Decoder != (model.Threshold{T: model.DefaultBlockThreshold}) {
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

// Streaming a block-causal model's answer: one delta per committed block
// at most, joining to the unstreamed answer.
func TestBlockCausalStream(t *testing.T) {
	s := blockCausalServer(t)
	full := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", "")))
	rec := post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", `"stream":true`))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	ev := sseEvents(t, rec.Body.String())
	var text strings.Builder
	deltas := 0
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
		if len(c.Choices) == 0 || c.Choices[0].FinishReason != nil {
			continue
		}
		deltas++
		text.WriteString(c.Choices[0].Delta.Content)
	}
	if text.String() != full.Choices[0].Message.Content {
		t.Errorf("streamed %q, unstreamed %q", text.String(), full.Choices[0].Message.Content)
	}
	// The prompt's tail block, then 8-slot blocks: at most 3 blocks for
	// 16 slots, and the role chunk.
	if deltas > 4 {
		t.Errorf("%d delta chunks for at most three blocks", deltas)
	}
}

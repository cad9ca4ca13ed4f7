package load

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/safetensors"
)

// TestWriteRandomArchitectures: a random checkpoint in LLaDA's, Dream's and
// LLaDA-MoE's layout (the shapes make bench-8b writes, scaled down) loads
// through Load, which picks the architecture from config.json, checks every
// tensor's shape and refuses unused tensors; its config reads back as the
// shape asked for, and a forward gives finite logits, F32 and BF16.
func TestWriteRandomArchitectures(t *testing.T) {
	for _, c := range []model.Config{
		{DModel: 64, NLayers: 2, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 96, VocabSize: 300, RopeTheta: 10000, RMSNormEps: 1e-5},
		{Arch: "dream", DModel: 64, NLayers: 2, NHeads: 4, NKVHeads: 2, MLPHiddenSize: 96, VocabSize: 300, MaxSequenceLength: 1024,
			RopeTheta: 1e6, RMSNormEps: 1e-6, QKVBias: true, ShiftLogits: true},
		{Arch: "llada-moe", DModel: 64, NLayers: 2, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 256, VocabSize: 300, MaxSequenceLength: 1024,
			RopeTheta: 50000, RMSNormEps: 1e-5, QKNorm: true, MoE: &model.MoEConfig{Experts: 8, TopK: 2, Hidden: 16}},
	} {
		for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
			t.Run(c.ArchName()+"/"+string(dt), func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "m")
				if err := WriteRandom(dir, c, 3, dt); err != nil {
					t.Fatal(err)
				}
				m, err := Load(dir, cpu.New(0))
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				want := c
				want.MaskTokenID = m.Config.MaskTokenID
				if err := sameShape(m.Config, &want); err != nil {
					t.Fatal(err)
				}
				if m.Config.ShiftLogits != c.ShiftLogits {
					t.Errorf("shift_logits %v, want %v", m.Config.ShiftLogits, c.ShiftLogits)
				}
				if id, ok := m.Tokenizer.TokenID("<|mdm_mask|>"); !ok || int(id) != m.Config.MaskTokenID {
					t.Errorf("mask id %d is not the tokenizer's <|mdm_mask|> (%d)", m.Config.MaskTokenID, id)
				}
				ids := make([]int32, 40)
				for i := range ids {
					ids[i] = int32(i * 7 % c.VocabSize)
				}
				out, err := m.Forward(model.Input{Tokens: ids, LogitRows: []int32{38, 39}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(out.Logits) != 2*c.Embeddings() {
					t.Fatalf("%d logits, want %d", len(out.Logits), 2*c.Embeddings())
				}
				for _, x := range out.Logits {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						t.Fatalf("logit %v", x)
					}
				}
			})
		}
	}
}

// TestWriteRandomRefuses: shapes WriteRandom has no layout for are errors
// naming what is wrong, and nothing is written.
func TestWriteRandomRefuses(t *testing.T) {
	base := model.Config{DModel: 64, NLayers: 2, NHeads: 4, NKVHeads: 4, MLPHiddenSize: 96, VocabSize: 300, RopeTheta: 1e6, RMSNormEps: 1e-6}
	for _, tc := range []struct {
		edit func(*model.Config)
		want string
	}{
		{func(c *model.Config) { c.Arch = "llada2" }, "not one WriteRandom writes"},
		{func(c *model.Config) { c.Arch = "dream" }, "Dream's layout has q/k/v biases"},
		{func(c *model.Config) { c.Arch, c.QKNorm = "llada-moe", true }, "LLaDA-MoE's layout has softmax-routed experts"},
		{func(c *model.Config) {
			c.Arch, c.MoE = "llada-moe", &model.MoEConfig{Experts: 4, TopK: 2, Hidden: 16, SharedHidden: 16}
		}, "no shared expert"},
		{func(c *model.Config) { c.QKVBias = true }, "LLaDA's layout has no q/k/v biases"},
		// Dream's config.json has no embedding size apart from vocab_size.
		{func(c *model.Config) { c.Arch, c.QKVBias, c.EmbeddingSize = "dream", true, 320 }, "reads back as another shape: embeddings 300, want 320"},
	} {
		c := base
		tc.edit(&c)
		dir := filepath.Join(t.TempDir(), "m")
		err := WriteRandom(dir, c, 1, safetensors.F32)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", c, err, tc.want)
		}
		if _, statErr := safetensors.Open(dir); statErr == nil {
			t.Errorf("%+v: a checkpoint was written", c)
		}
	}
}

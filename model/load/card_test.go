package load

import (
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/regime"
)

// TestBlockCausalCard: a block-causal model's card keeps its own block
// length or none; another is an error naming the field; without a card
// the defaults decode in the model's blocks.
func TestBlockCausalCard(t *testing.T) {
	for _, tc := range []struct {
		card    Card
		want    Card
		wantErr bool
	}{
		{Card{Regime: regime.Regime{GenLength: 32, Steps: 32, BlockLength: 8}}, Card{Regime: regime.Regime{GenLength: 32, Steps: 32, BlockLength: 8}}, false},
		{Card{Regime: regime.Regime{GenLength: 32, Steps: 32}}, Card{Regime: regime.Regime{GenLength: 32, Steps: 32, BlockLength: 8}}, false},
		{DefaultCard, Card{Regime: regime.Regime{GenLength: DefaultCard.GenLength, Steps: DefaultCard.GenLength, BlockLength: 8}}, false},
		{Card{Regime: regime.Regime{GenLength: 32, Steps: 32, BlockLength: 16}}, Card{}, true},
	} {
		got, err := tc.card.forBlocks(8)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("%+v: %+v, %v", tc.card, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), "block_length") {
			t.Errorf("error %q does not name block_length", err)
		}
	}
	if got, _ := DefaultCard.forBlocks(0); got != DefaultCard {
		t.Errorf("a bidirectional model's card changed: %+v", got)
	}
}

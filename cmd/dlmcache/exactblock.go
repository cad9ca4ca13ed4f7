package main

import (
	"fmt"
	"slices"
)

// exactMethod is the method a block-causal model is served with when
// --method is not given: the exact block cache, with the line saying so
// ("", "" for a bidirectional model).
func exactMethod(lm *loadedModel) (method, note string) {
	B := lm.Config.CausalBlock()
	if B == 0 {
		return "", ""
	}
	return "exact-block", fmt.Sprintf("block-causal model (blocks of %d tokens): method exact-block — committed blocks' K/V computed once, "+
		"every full block of a shared prefix or an earlier turn served from the store at every layer, an answer's committed blocks kept there for the next turn; "+
		"the answers of computing every row (--method none computes them)", B)
}

// exactStore gives the exact block cache, when methods has it and
// --store-blocks is 0, a block store of the model's block size: every full
// block of a shared prefix is then reused, and a conversation's earlier
// turns with it. It returns the line saying so ("" when nothing changed).
func exactStore(lm *loadedModel, methods []string, c *cacheFlags) string {
	B := lm.Config.CausalBlock()
	if B == 0 || c.StoreBlocks != 0 || !slices.Contains(methods, "exact-block") {
		return ""
	}
	c.StoreBlocks, c.storeBlocksModel = B, true
	return fmt.Sprintf("prefix store in blocks of %d tokens, the model's block (--store-blocks %d)", B, B)
}

package sample_test

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// Load a Hugging Face LLaDA directory (here the bundled llada-tiny), encode
// a chat whose system message is the shared prefix, and run the diffusion
// sampler with no caching (a nil planner): 32 answer slots, 16 steps.
func ExampleGenerate() {
	m, err := load.Load(filepath.Join("..", "..", "models", "llada-tiny"), cpu.New(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	system := "The registry for this session maps every name to a code. Answer from the registry only.\n\n" +
		"Registry:\n* deli = equ\n* licens = nam\n* possib = dat\n* sep = lef\n* archiv = require\n\n" +
		"Reply with ## followed by the code only."
	ids, prefixLen, err := m.Tokenizer.EncodeChat(system, "What is the code for sep?")
	if err != nil {
		fmt.Println(err)
		return
	}
	// The card's regime (m.Card: 128 slots, 64 steps, blocks of 32) is what
	// the commands use; a short canvas keeps the example quick.
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 32, Steps: 16, BlockLength: 32}}
	g, err := sample.Generate(context.Background(), m.Network, ids, prefixLen, o, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d answer slots, %d steps, %d forwards\n", len(g.Answer), g.Steps, g.NFE)
	fmt.Printf("every row computed: %t\n", g.RowsComputed == g.RowsFull)
	fmt.Printf("answer: %q\n", m.AnswerText(g.Answer))
	// Output:
	// 32 answer slots, 16 steps, 16 forwards
	// every row computed: true
	// answer: "## lef"
}

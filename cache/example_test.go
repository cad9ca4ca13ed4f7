package cache_test

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// BiCache on the bundled model: the table gives the depth for each
// request's shared-prefix ratio, the store keeps the system message's
// shallow K/V, and the second question about the same system message
// finds them there. The answers are right (and the ones the model gives
// uncached: docs/results.md); the cache computes fewer layer-rows.
func Example() {
	b := cpu.New(2)
	m, err := load.Load(filepath.Join("..", "models", "llada-tiny"), b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	table, err := lut.Read(filepath.Join("..", "docs", "llada-tiny-table-row-min.json"))
	if err != nil {
		fmt.Println(err)
		return
	}
	o := cache.DefaultOptions()
	o.Table = table
	o.Store = cache.NewStore(b, 64<<20, cache.LRU)
	o.Fingerprint = m.Fingerprint
	o.BiCache.Refresh = m.Card.RefreshOr(0) // the card's R: 1 for llada-tiny
	bicache, err := cache.New("bicache", o)
	if err != nil {
		fmt.Println(err)
		return
	}

	system := "The registry for this session maps every name to a code. Answer from the registry only.\n\n" +
		"Registry:\n* deli = equ\n* licens = nam\n* possib = dat\n* sep = lef\n* archiv = require\n\n" +
		"Reply with ## followed by the code only."
	// A short canvas keeps the example quick: 32 answer slots, 16 steps (the
	// card's regime is 128 slots, 64 steps, blocks of 32).
	gen := sample.GenOptions{Regime: regime.Regime{GenLength: 32, Steps: 16, BlockLength: 32}}
	for _, q := range []string{"What is the code for sep?", "What is the code for deli?"} {
		ids, prefixLen, err := m.Tokenizer.EncodeChat(system, q)
		if err != nil {
			fmt.Println(err)
			return
		}
		req := cache.Request{Prompt: ids, PrefixLen: prefixLen}
		res, err := cache.Run(context.Background(), m.Network, bicache, req, gen)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s depth %d, prefix hit %t, every row computed %t\n",
			m.AnswerText(res.Answer), res.Info.Depth, res.Info.Hit, res.RowsComputed == res.RowsFull)
	}
	// Output:
	// ## lef depth 1, prefix hit false, every row computed false
	// ## equ depth 1, prefix hit true, every row computed false
}

// The registry lists every caching method; bench, eval, serve --method and
// flag completion read it.
func ExampleLookup() {
	s, err := cache.Lookup("bicache+block")
	fmt.Println(s.Name, "is built on", s.Base, err)
	_, err = cache.Lookup("bicache+none")
	fmt.Println(err != nil)
	// Output:
	// bicache+block is built on block <nil>
	// true
}

// Each method declares its own flags in its file; a command declares them
// all with AddFlags and settles what they leave to the model and the table
// (--refresh 0: the card's R; --deep-source auto) with ForModel.
func ExampleAddFlags() {
	fl := pflag.NewFlagSet("eval", pflag.ContinueOnError)
	var o cache.Options
	cache.AddFlags(fl, &o)
	if err := fl.Parse([]string{"--d2-k", "8", "--dual-block", "16"}); err != nil {
		fmt.Println(err)
		return
	}
	o, err := o.ForModel(load.Card{Refresh: 4}, nil)
	fmt.Println(o.D2.K, o.Block.Length, o.BiCache.Refresh, o.DeepSource, err)
	d2, err := cache.New("d2cache", o)
	fmt.Println(d2.Name(), err)
	// Output:
	// 8 16 4 request <nil>
	// d2cache <nil>
}

// Which methods a calibrated table serves is the registry's answer:
// bicache's compositions serve the depths calibrated for bicache.
func ExampleCheckTable() {
	t := &lut.Table{Calibration: &lut.Calibration{Method: "bicache"}}
	fmt.Println(cache.CheckTable(t, "bicache+block"))
	fmt.Println(cache.CheckTable(t, "block"))
	// Output:
	// <nil>
	// table was calibrated for method bicache, not block
}

// --deep-source auto shares the store's prefix K/V across requests only
// when the table was calibrated for that source.
func ExampleResolveDeepSource() {
	src, why := cache.ResolveDeepSource(cache.SourceAuto, nil)
	fmt.Println(src+":", why)
	// Output:
	// request: no table
}

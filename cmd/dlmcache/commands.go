package main

import "github.com/spf13/cobra"

// The command tree: the root and the group commands (lut, sweep, plot).
// Each command lives in a file of its own (bench.go, lut_show.go, …): its
// constructor newCmdX with its help (what --help and docs/cli/ show) and
// positional arguments, and its options type — the fields, the flags that
// fill them (flags), the positional arguments (setArgs) and the work
// (run). newCommand (root.go) joins the two. A new command is a file of
// its own and one line in the tree here.

func newRootCmd(f *factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "dlmcache",
		Short: "Shared-prefix K/V caching for diffusion language models",
		Long: `dlmcache measures, per diffusion language model, how deep a shared
prompt prefix's keys and values can be reused across requests, writes that as a
ratio→depth lookup table, and serves requests with it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(f.Out)
	root.SetErr(f.ErrOut)
	root.AddCommand(newCmdGenerate(f, nil), newCmdProfile(f, nil), newCmdCalibrate(f, nil), newCmdEval(f, nil), newCmdBench(f, nil), newCmdLut(f), newCmdSweep(f), newCmdPlot(f), newCmdServe(f, nil), newCmdVersion(f, nil), newCmdLoadtest(f, nil), newCmdConvert(f, nil))
	root.AddCommand(newCmdGenDocs())
	addFlagCompletions(root)
	return root
}

func newCmdLut(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lut",
		Short: "Build, show, compare and check ratio→depth tables",
	}
	cmd.AddCommand(newCmdLutBuild(f, nil), newCmdLutShow(f, nil), newCmdLutDiff(f, nil), newCmdLutCheck(f, nil), newCmdLutVerify(f, nil))
	return cmd
}

func newCmdSweep(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Parameter analyses: table convergence vs N, accuracy/throughput vs τ and vs R, prompt-module reuse vs depth",
	}
	cmd.AddCommand(newCmdSweepN(f, nil), newCmdSweepTau(f, nil), newCmdSweepRefresh(f, nil), newCmdSweepModules(f, nil))
	return cmd
}

func newCmdPlot(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plot",
		Short: "Figures (PNG or SVG) from profile and sweep outputs",
	}
	for _, k := range []struct{ name, in, short string }{
		{"heatmap", "similarity.parquet", "mean prefix K/V similarity over layers × steps (profile --all-steps)"},
		{"depth", "table.json", "safe depth vs shared-prefix ratio, with spread"},
		{"convergence", "convergence.json", "table L1 distance vs requests per bin (sweep n)"},
		{"sweep", "sweep-tau.json|sweep-refresh.json", "accuracy and throughput vs τ or R"},
		{"refresh", "sweep-refresh.json", "deep-layer similarity: cross-request vs stale vs refreshed"},
		{"pareto", "bench.json|table.json", "accuracy vs speed-up over none, one point per method, with the Pareto front (dlmcache bench); for a calibrated table, one panel per ratio bin and answer-length class: every setting tried, answers kept vs speed-up, the choice marked"},
	} {
		cmd.AddCommand(newCmdPlotKind(f, k.name, k.in, k.short, nil))
	}
	return cmd
}

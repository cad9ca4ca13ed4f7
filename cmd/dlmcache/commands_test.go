package main

import (
	"io"
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

// A command that takes positional arguments stores them in its options
// (setArgs) before its runF hook sees them, and a wrong count is refused
// before anything runs.
func TestCommandsStoreTheirPositionalArguments(t *testing.T) {
	f := &factory{Out: io.Discard, ErrOut: io.Discard}
	var got []string
	for _, tc := range []struct {
		cmd  *cobra.Command
		args []string
		want []string // what the options hold
	}{
		{newCmdLutShow(f, func(o *lutShowOptions) error { got = []string{o.File}; return nil }), []string{"a.json"}, nil},
		{newCmdLutDiff(f, func(o *lutDiffOptions) error { got = []string{o.A, o.B}; return nil }), []string{"a.json", "b.json"}, nil},
		{newCmdLutCheck(f, func(o *lutCheckOptions) error { got = []string{o.File}; return nil }), []string{"a.json"}, nil},
		{newCmdLutVerify(f, func(o *lutVerifyOptions) error { got = []string{o.File}; return nil }), []string{"a.json"}, nil},
		{newCmdConvert(f, func(o *convertOptions) error { got = []string{o.Src, o.Out}; return nil }), []string{"llada-tiny", "tiny.gguf"}, nil},
		// A plot's --out defaults to its kind.
		{newCmdPlotKind(f, "depth", "table.json", "", func(o *plotOptions) error { got = []string{o.In, o.Out}; return nil }), []string{"t.json"}, []string{"t.json", "depth.png"}},
	} {
		want := tc.want
		if want == nil {
			want = tc.args
		}
		tc.cmd.SetOut(io.Discard)
		tc.cmd.SetErr(io.Discard)
		got = nil
		tc.cmd.SetArgs(tc.args)
		if err := tc.cmd.Execute(); err != nil || !slices.Equal(got, want) {
			t.Errorf("%s %v: options hold %q (%v), want %q", tc.cmd.Name(), tc.args, got, err, want)
		}
		got = nil
		tc.cmd.SetArgs(append(slices.Clone(tc.args), "extra"))
		if err := tc.cmd.Execute(); err == nil || got != nil {
			t.Errorf("%s with an argument too many: %v, ran with %q", tc.cmd.Name(), err, got)
		}
	}
}

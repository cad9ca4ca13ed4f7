package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/cache"
)

// Every command that builds methods takes each method's flags from the
// registry (cache.AddFlags): the same names, defaults and help, and the
// values land in the method's typed options.
func TestCommandsTakeMethodFlagsFromTheRegistry(t *testing.T) {
	want := pflag.NewFlagSet("want", pflag.ContinueOnError)
	cache.AddFlags(want, &cache.Options{})
	f := &factory{Out: io.Discard, ErrOut: io.Discard}
	var got *cacheFlags
	cmds := map[string]*cobra.Command{
		"eval":          newCmdEval(f, func(o *evalOptions) error { got = &o.Cache; return nil }),
		"bench":         newCmdBench(f, func(o *benchOptions) error { got = &o.Cache; return nil }),
		"serve":         newCmdServe(f, func(o *serveOptions) error { got = &o.Cache; return nil }),
		"lut verify":    newCmdLutVerify(f, func(o *lutVerifyOptions) error { got = &o.Cache; return nil }),
		"sweep tau":     newCmdSweepTau(f, func(o *sweepTauOptions) error { got = &o.Cache; return nil }),
		"sweep refresh": newCmdSweepRefresh(f, func(o *sweepRefreshOptions) error { got = &o.Cache; return nil }),
	}
	args := strings.Fields("--d2-k 8 --dual-block 16 --deep-source store --free-refresh 2 --drift 0.5")
	for name, cmd := range cmds {
		want.VisitAll(func(w *pflag.Flag) {
			if g := cmd.Flags().Lookup(w.Name); g == nil || g.Usage != w.Usage || g.DefValue != w.DefValue {
				t.Errorf("%s --%s: %+v, want the registry's %+v", name, w.Name, g, w)
			}
		})
		got = nil
		a := args
		switch name {
		case "lut verify":
			a = append([]string{"table.json"}, a...)
		case "sweep tau":
			a = append([]string{"--from", "out"}, a...)
		case "sweep refresh":
			a = append([]string{"--lut", "table.json"}, a...)
		}
		cmd.SetArgs(a)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err != nil || got == nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m := got.Method; m.D2.K != 8 || m.Block.Length != 16 || m.DeepSource != cache.SourceStore || m.Free.Refresh != 2 || m.BiCache.Drift != 0.5 {
			t.Errorf("%s: method options %+v", name, m)
		}
	}
}

// serve's --module-depth and calibrate's --refresh are their methods'
// flags (cache.AddFlags by name): the registry's help and default, the
// value in the method's typed options.
func TestNamedMethodFlagsComeFromTheirMethods(t *testing.T) {
	want := pflag.NewFlagSet("want", pflag.ContinueOnError)
	cache.AddFlags(want, &cache.Options{}, "module-depth", "refresh")
	f := &factory{Out: io.Discard, ErrOut: io.Discard}
	var got cache.Options
	for _, tc := range []struct {
		cmd   *cobra.Command
		flag  string
		value func(cache.Options) int
	}{
		{newCmdServe(f, func(o *serveOptions) error { got = o.Cache.Method; return nil }), "module-depth", func(o cache.Options) int { return o.Modules.Depth }},
		{newCmdCalibrate(f, func(o *calibrateOptions) error { got = o.Method; return nil }), "refresh", func(o cache.Options) int { return o.BiCache.Refresh }},
	} {
		w, g := want.Lookup(tc.flag), tc.cmd.Flags().Lookup(tc.flag)
		if g == nil || g.Usage != w.Usage || g.DefValue != w.DefValue {
			t.Errorf("%s --%s: %+v, want the registry's %+v", tc.cmd.Name(), tc.flag, g, w)
		}
		got = cache.Options{}
		tc.cmd.SetArgs([]string{"--" + tc.flag, "3"})
		if err := tc.cmd.Execute(); err != nil {
			t.Fatalf("%s: %v", tc.cmd.Name(), err)
		}
		if tc.value(got) != 3 {
			t.Errorf("%s --%s 3: method options %+v", tc.cmd.Name(), tc.flag, got)
		}
	}
}

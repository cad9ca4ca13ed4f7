package cache

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/load"
)

// AddFlags declares each method's flags once, bound to that method's typed
// options; the defaults are the papers' (the refresh period and deep
// source are left to the model and the table: ForModel).
func TestAddFlagsBindEachMethodsOptions(t *testing.T) {
	fl := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var o Options
	AddFlags(fl, &o)
	d := DefaultOptions()
	want := Options{Stat: lut.Mean, DeepSource: SourceAuto, Block: d.Block, D2: d.D2, DLLM: d.DLLM}
	if o != want {
		t.Errorf("defaults %+v, want %+v", o, want)
	}
	err := fl.Parse(strings.Fields("--refresh 4 --drift 0.5 --deep-source store --stat min --block-threshold 0.8 --dual-block 16 " +
		"--d2-k 8 --d2-p 0.2 --d2-sigma 5 --d2-prior-order --dllm-kp 10 --dllm-kr 3 --dllm-rho 0.5 --free-refresh 2"))
	if err != nil {
		t.Fatal(err)
	}
	want = Options{Stat: lut.MinStat, DeepSource: SourceStore, BiCache: BiCacheOptions{Refresh: 4, Drift: 0.5},
		Block: BlockOptions{Length: 16, Threshold: 0.8}, D2: D2Options{K: 8, P: 0.2, Sigma: 5, Prior: true},
		DLLM: DLLMOptions{Kp: 10, Kr: 3, Rho: 0.5}, Free: FreeOptions{Refresh: 2}}
	if o != want {
		t.Errorf("parsed %+v, want %+v", o, want)
	}
	n := 0
	fl.VisitAll(func(*pflag.Flag) { n++ })
	if n != 14 {
		t.Errorf("%d method flags, want 14", n)
	}
}

// Every flag a method declares is the one AddFlags declares (a flag two
// methods share, such as --dual-block, is declared alike by both); the
// flags of a method not offered by name (the module method's
// --module-depth) only when named.
func TestEachMethodDeclaresItsFlags(t *testing.T) {
	all := pflag.NewFlagSet("all", pflag.ContinueOnError)
	AddFlags(all, &Options{})
	for _, s := range registry {
		if s.Flags == nil {
			continue
		}
		own := pflag.NewFlagSet(s.Name, pflag.ContinueOnError)
		s.Flags(own, &Options{})
		own.VisitAll(func(f *pflag.Flag) {
			g := all.Lookup(f.Name)
			if s.Needs != "" {
				if g != nil {
					t.Errorf("%s (not offered by name): --%s declared without its name", s.Name, f.Name)
				}
				named := pflag.NewFlagSet("named", pflag.ContinueOnError)
				AddFlags(named, &Options{}, f.Name)
				g = named.Lookup(f.Name)
			}
			if g == nil || g.Usage != f.Usage || g.DefValue != f.DefValue {
				t.Errorf("%s: --%s is not AddFlags' (%+v)", s.Name, f.Name, g)
			}
		})
	}
}

// AddFlags with names declares those flags alone, bound to o: serve's
// --module-depth, calibrate's --refresh.
func TestAddFlagsByName(t *testing.T) {
	fl := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var o Options
	AddFlags(fl, &o, "module-depth", "refresh")
	var names []string
	fl.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if strings.Join(names, " ") != "module-depth refresh" {
		t.Errorf("declared %v, want module-depth and refresh", names)
	}
	if err := fl.Parse(strings.Fields("--module-depth 2 --refresh 4")); err != nil {
		t.Fatal(err)
	}
	if o.Modules.Depth != 2 || o.BiCache.Refresh != 4 {
		t.Errorf("parsed %+v", o)
	}
	defer func() {
		if recover() == nil {
			t.Error("AddFlags with a name no method declares did not panic")
		}
	}()
	AddFlags(fl, &o, "no-such-flag")
}

// ForModel takes the card's R for --refresh 0, resolves --deep-source auto
// and refuses a bad --stat or a negative --refresh with the flag's name.
func TestForModel(t *testing.T) {
	o := DefaultOptions()
	o.BiCache.Refresh, o.DeepSource = 0, SourceAuto
	got, err := o.ForModel(load.Card{Refresh: 3}, nil)
	if err != nil || got.BiCache.Refresh != 3 || got.DeepSource != SourceRequest {
		t.Errorf("card R 3, no table: %+v %v", got, err)
	}
	if got, _ = o.ForModel(load.Card{}, nil); got.BiCache.Refresh != load.DefaultRefresh {
		t.Errorf("no card R: refresh %d, want %d", got.BiCache.Refresh, load.DefaultRefresh)
	}
	bad := o
	bad.Stat = "median"
	if _, err := bad.ForModel(load.Card{}, nil); err == nil || !strings.Contains(err.Error(), "--stat") {
		t.Errorf("bad stat: %v", err)
	}
	bad = o
	bad.BiCache.Refresh = -1
	if _, err := bad.ForModel(load.Card{}, nil); err == nil || !strings.Contains(err.Error(), "--refresh") {
		t.Errorf("negative refresh: %v", err)
	}
}

// --deep-source auto: the store when the table is calibrated for it (its
// depths were checked against answers), else the request source; any
// other value stays as given.
func TestResolveDeepSource(t *testing.T) {
	cosine := &lut.Table{Bins: []lut.Bin{{Lo: 0, Hi: 1, Count: 3, MeanDepth: 6}}}
	calibrated := &lut.Table{Bins: []lut.Bin{{Lo: 0, Hi: 1, Count: 3, MeanDepth: 6,
		Calibrated: map[string]*lut.BinCalibration{"store": {Depth: 2}}}},
		Calibration: &lut.Calibration{Sources: []string{"store"}}}
	for _, tc := range []struct {
		flag  DeepSource
		table *lut.Table
		want  DeepSource
	}{
		{"auto", nil, "request"},
		{"auto", cosine, "request"},
		{"auto", calibrated, "store"}, // a table calibrated for the store shares K/V across requests
		{"store", cosine, "store"},
		{"recompute", nil, "recompute"},
		{"request", calibrated, "request"},
	} {
		if got, why := ResolveDeepSource(tc.flag, tc.table); got != tc.want || why == "" {
			t.Errorf("ResolveDeepSource(%s, %v) = %s (%q), want %s", tc.flag, tc.table != nil, got, why, tc.want)
		}
	}
}

// A table calibrated for bicache serves bicache and its compositions, not
// the methods that read no depths; the registry says which (Spec.Calibration).
func TestCheckTableAsksTheRegistry(t *testing.T) {
	tab := &lut.Table{Calibration: &lut.Calibration{Method: "bicache"}}
	for m, ok := range map[string]bool{"bicache": true, "bicache+block": true, "bicache+d2cache": true, "bicache@schedule": true,
		"prefix-all": false, "block": false, "bicache-elastic": false, "table": false} {
		if err := CheckTable(tab, m); (err == nil) != ok {
			t.Errorf("CheckTable(%s): %v", m, err)
		}
	}
	if err := CheckTable(tab, "bicache+none"); err == nil || !strings.Contains(err.Error(), "unknown method") {
		t.Errorf("unknown method: %v", err)
	}
	v3 := &lut.Table{Calibration: &lut.Calibration{Method: "search"}}
	if err := CheckTable(v3, "table"); err != nil {
		t.Errorf("a searched table, served by table: %v", err)
	}
	if err := CheckTable(&lut.Table{}, "block"); err != nil {
		t.Errorf("an uncalibrated table: %v", err)
	}
}

// The module method is registered but not offered by name: it needs a
// module store, which only serve --modules builds.
func TestModuleMethodRegisteredNotOffered(t *testing.T) {
	s, err := Lookup("modules")
	if err != nil || s.Needs == "" {
		t.Fatalf("modules: %+v %v", s, err)
	}
	for _, n := range Names() {
		if n == "modules" {
			t.Error("Names offers modules")
		}
	}
	if _, err := New("modules", DefaultOptions()); err == nil || !strings.Contains(err.Error(), "no module store") {
		t.Errorf("modules without a store: %v", err)
	}
}

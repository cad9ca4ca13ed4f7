package backend

import "testing"

func TestEnvSwitchReadsOffOnAndRefusesTheRest(t *testing.T) {
	const name = "DLMCACHE_TEST_SWITCH"
	for _, tc := range []struct {
		val  string
		want bool
		err  string
	}{
		{"", false, ""},
		{"mapped", false, ""},
		{"PACKED", true, ""},
		{"packed", true, ""},
		{"both", false, `cpu: DLMCACHE_TEST_SWITCH="both": want mapped or packed`},
	} {
		t.Setenv(name, tc.val)
		got, err := EnvSwitch("cpu", name, "mapped", "packed")
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.val, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.val, got, err, tc.want)
		}
	}
}

package safetensors

import (
	"path/filepath"
	"regexp"
	"testing"
)

func TestFingerprintChangesWithConfigOrAnyTensor(t *testing.T) {
	big := F32ToBytes(f32s(4096, 1)) // 16 KiB: sampled, not hashed whole
	small := F32ToBytes(f32s(8, 1))
	config := []byte(`{"d_model": 8}`)
	base := func() []WriteTensor {
		return []WriteTensor{
			{Name: "big", DType: F32, Shape: []int{64, 64}, Data: append([]byte(nil), big...)},
			{Name: "small", DType: F32, Shape: []int{8}, Data: append([]byte(nil), small...)},
		}
	}
	fp := func(t *testing.T, cfg []byte, ts []WriteTensor) string {
		t.Helper()
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, SingleFile), ts, nil)
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return Fingerprint(cfg, s)
	}
	ref := fp(t, config, base())
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(ref) {
		t.Fatalf("fingerprint %q is not 16 hex digits", ref)
	}
	mutate := func(f func(ts []WriteTensor) []WriteTensor) []WriteTensor { return f(base()) }
	for _, tc := range []struct {
		name string
		cfg  []byte
		ts   []WriteTensor
		same bool
	}{
		{"identical", config, base(), true},
		{"reordered in the file", config, mutate(func(ts []WriteTensor) []WriteTensor { return []WriteTensor{ts[1], ts[0]} }), true},
		{"byte outside the samples", config, mutate(func(ts []WriteTensor) []WriteTensor { ts[0].Data[2000] ^= 1; return ts }), true},
		{"config", []byte(`{"d_model": 9}`), base(), false},
		{"first KiB", config, mutate(func(ts []WriteTensor) []WriteTensor { ts[0].Data[3] ^= 1; return ts }), false},
		{"middle KiB", config, mutate(func(ts []WriteTensor) []WriteTensor { ts[0].Data[len(big)/2] ^= 1; return ts }), false},
		{"last KiB", config, mutate(func(ts []WriteTensor) []WriteTensor { ts[0].Data[len(big)-1] ^= 1; return ts }), false},
		{"small tensor anywhere", config, mutate(func(ts []WriteTensor) []WriteTensor { ts[1].Data[17] ^= 1; return ts }), false},
		{"name", config, mutate(func(ts []WriteTensor) []WriteTensor { ts[1].Name = "smal"; return ts }), false},
		{"shape", config, mutate(func(ts []WriteTensor) []WriteTensor { ts[0].Shape = []int{32, 128}; return ts }), false},
		{"dtype", config, mutate(func(ts []WriteTensor) []WriteTensor { ts[1].DType = I32; return ts }), false},
		{"extra tensor", config, append(base(), WriteTensor{Name: "z", DType: U8, Shape: []int{0}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fp(t, tc.cfg, tc.ts)
			if (got == ref) != tc.same {
				t.Errorf("fingerprint %s vs reference %s: same = %v, want %v", got, ref, got == ref, tc.same)
			}
		})
	}

	// Sharding the same tensors does not change the fingerprint.
	dir := t.TempDir()
	ts := base()
	writeFile(t, filepath.Join(dir, "a.safetensors"), ts[:1], nil)
	writeFile(t, filepath.Join(dir, "b.safetensors"), ts[1:], nil)
	writeIndex(t, dir, map[string]string{"big": "a.safetensors", "small": "b.safetensors"})
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := Fingerprint(config, s); got != ref {
		t.Errorf("sharded fingerprint %s, single file %s", got, ref)
	}
}

package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigNumericFields: every numeric field out of its range is refused
// with the field named, and ReadConfig names the file.
func TestConfigNumericFields(t *testing.T) {
	const base = `"d_model": 8, "n_layers": 1, "n_heads": 2, "mlp_hidden_size": 8, "vocab_size": 10`
	for _, tc := range []struct{ cfg, want string }{
		{`"max_sequence_length": -1`, "max_sequence_length must not be negative"},
		{`"d_model": 0`, "d_model must be positive"},
		{`"n_layers": -2`, "n_layers must be positive"},
		{`"n_kv_heads": -1`, "n_kv_heads must be positive"},
		{`"mlp_hidden_size": -8`, "mlp_hidden_size must be positive"},
		{`"vocab_size": -10`, "vocab_size must be positive"},
		{`"embedding_size": -1`, "embedding_size must not be negative"},
		{`"rope_theta": -10000`, "rope_theta must be positive"},
		{`"rms_norm_eps": -1e-5`, "rms_norm_eps must be positive"},
		{`"mask_token_id": -1`, "mask_token_id must not be negative"},
		{`"mask_token_id": 10`, "mask_token_id 10 outside the vocabulary"},
		{`"eos_token_id": -1`, "eos_token_id must not be negative"},
		{`"eos_token_id": 99`, "eos_token_id 99 outside the vocabulary"},
		{`"pad_token_id": -3`, "pad_token_id must not be negative"},
		{`"block_size": -1`, "block_size must not be negative"},
	} {
		// A field given twice: JSON's last value wins.
		raw := `{` + base + `, ` + tc.cfg + `}`
		if _, err := ParseConfig([]byte(raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := ParseConfig([]byte(`{` + base + `, "max_sequence_length": 0, "eos_token_id": 9}`)); err != nil {
		t.Errorf("a valid config: %v", err)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(`{`+base+`, "max_sequence_length": -1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadConfig(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "max_sequence_length") {
		t.Errorf("ReadConfig: %v, want the file and the field named", err)
	}
}

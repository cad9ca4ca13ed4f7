package backend

import (
	"fmt"
	"os"
	"strings"
)

// EnvSwitch reads the environment variable name as a two-way setting of a
// backend: unset or off (in any case) is false, on is true, and any other
// value an error naming the variable, prefixed with the backend's name
// ("cpu: DLMCACHE_CPU_BF16="x": want bf16 or f32").
func EnvSwitch(backendName, name, off, on string) (bool, error) {
	switch v := strings.ToLower(os.Getenv(name)); v {
	case "", off:
		return false, nil
	case on:
		return true, nil
	default:
		return false, fmt.Errorf("%s: %s=%q: want %s or %s", backendName, name, v, off, on)
	}
}

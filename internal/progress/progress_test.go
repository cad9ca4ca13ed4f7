package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	b := &Bar{label: "profile", unit: "req", total: 100, base: 10}
	got := b.line(30, 10*time.Second) // 20 requests in 10 s: 2/s, 70 left: 35 s
	for _, want := range []string{"30/100 req", "2.0 req/s", "ETA 35s"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
}

func TestQuietOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, "x", "it", 3, false)
	b.Set(1)
	b.Set(3)
	b.Done()
	if buf.Len() != 0 {
		t.Errorf("wrote %q to a non-terminal", buf.String())
	}
}

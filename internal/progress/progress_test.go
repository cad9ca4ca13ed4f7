package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPlainLine(t *testing.T) {
	start := time.Unix(1000, 0)
	b := &Bar{label: "profile", unit: "req", total: 100, base: 10, done: 30, start: start}
	got := b.plain(start.Add(10 * time.Second)) // 20 requests in 10 s: 2/s, 70 left: 35 s
	for _, want := range []string{"profile: 30/100 req", "(30%)", "2.00 req/s", "ETA 35s"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
}

// Off a terminal the bar prints plain lines: one every PlainEvery and a
// last one at Done; quiet prints nothing.
func TestPlainOffTerminal(t *testing.T) {
	old := PlainEvery
	defer func() { PlainEvery = old }()
	PlainEvery = 0
	var buf bytes.Buffer
	b := New(&buf, "x", "it", 3, false)
	b.Set(0)
	b.Set(1)
	b.Set(2)
	b.Set(3)
	b.Done()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "x: 1/3 it") || !strings.HasPrefix(lines[2], "x: 3/3 it (100%)") {
		t.Errorf("plain lines %q", lines)
	}
	var q bytes.Buffer
	qb := New(&q, "x", "it", 3, true)
	qb.Set(1)
	qb.Done()
	if q.Len() != 0 {
		t.Errorf("quiet wrote %q", q.String())
	}
}

// A bar drawn by progressbar/v3 shows the count of this run's items.
func TestTerminalBar(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, "profile", "req", 10, false)
	b.tty = true // as on a terminal
	b.Set(4)     // resumed: 4 done before
	b.Set(10)
	b.Done()
	out := buf.String()
	for _, want := range []string{"profile (4 done before)", "6/6"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output %q lacks %q", out, want)
		}
	}
}

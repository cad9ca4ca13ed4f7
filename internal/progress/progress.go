// Package progress draws a one-line progress bar with rate and ETA on a
// terminal, and stays silent otherwise (pipes, CI, --quiet).
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Bar is a progress bar for a known number of items.
type Bar struct {
	mu     sync.Mutex
	w      io.Writer
	label  string
	unit   string
	total  int
	start  time.Time
	base   int // items already done when the bar started (resumed work)
	last   time.Time
	active bool
}

// New returns a bar writing to w when w is a terminal and quiet is false.
func New(w io.Writer, label, unit string, total int, quiet bool) *Bar {
	b := &Bar{w: w, label: label, unit: unit, total: total, start: time.Now(), base: -1}
	if f, ok := w.(*os.File); ok && !quiet && term.IsTerminal(int(f.Fd())) {
		b.active = true
	}
	return b
}

// Set reports that done items are finished.
func (b *Bar) Set(done int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.base < 0 {
		b.base = done
		b.start = time.Now()
	}
	if !b.active || (time.Since(b.last) < 100*time.Millisecond && done < b.total) {
		return
	}
	b.last = time.Now()
	fmt.Fprint(b.w, "\r"+b.line(done, time.Since(b.start)))
}

func (b *Bar) line(done int, el time.Duration) string {
	const width = 30
	frac := 1.0
	if b.total > 0 {
		frac = float64(done) / float64(b.total)
	}
	fill := int(frac * width)
	bar := strings.Repeat("█", fill) + strings.Repeat("░", width-fill)
	rate := float64(done-b.base) / el.Seconds()
	eta := "--"
	if rate > 0 && done < b.total {
		eta = time.Duration(float64(b.total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	return fmt.Sprintf("%s %s %d/%d %s  %.1f %s/s  ETA %s ", b.label, bar, done, b.total, b.unit, rate, b.unit, eta)
}

// Done ends the bar's line.
func (b *Bar) Done() {
	if b == nil || !b.active {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintln(b.w)
}

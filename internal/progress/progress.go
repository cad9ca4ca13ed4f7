// Package progress reports the progress of long commands on stderr: a
// progress bar (github.com/schollz/progressbar/v3) with rate and ETA on a
// terminal, and a plain progress line every PlainEvery when stderr is not a
// terminal (CI logs, pipes), so a long profile is never silent. --quiet
// turns both off.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// PlainEvery is how often a bar that does not draw on a terminal prints a
// plain progress line.
var PlainEvery = 10 * time.Second

// Bar reports progress over a known number of items.
type Bar struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	unit  string
	total int
	quiet bool
	tty   bool

	base  int // items already done when the bar started (resumed work); -1 before the first Set
	start time.Time
	last  time.Time // last plain line
	done  int
	pb    *progressbar.ProgressBar
}

// New returns a bar over total items writing to w: drawn when w is a
// terminal, plain lines otherwise, nothing when quiet.
func New(w io.Writer, label, unit string, total int, quiet bool) *Bar {
	b := &Bar{w: w, label: label, unit: unit, total: total, quiet: quiet, base: -1}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		b.tty = true
	}
	return b
}

// Set reports that done items are finished. The first call's count is the
// work already done before this run (a resumed profile): rate and ETA count
// from it.
func (b *Bar) Set(done int) {
	if b == nil || b.quiet {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.base < 0 {
		b.base, b.start, b.last = done, now, now
		if b.tty {
			desc := b.label
			if done > 0 {
				desc = fmt.Sprintf("%s (%d done before)", b.label, done)
			}
			b.pb = progressbar.NewOptions(b.total-done,
				progressbar.OptionSetWriter(b.w),
				progressbar.OptionSetDescription(desc),
				progressbar.OptionSetItsString(b.unit),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }),
			)
		}
	}
	b.done = done
	if b.pb != nil {
		b.pb.Set(done - b.base)
		return
	}
	if !b.tty && done > b.base && now.Sub(b.last) >= PlainEvery && done < b.total {
		b.last = now
		fmt.Fprintln(b.w, b.plain(now))
	}
}

// plain is one progress line: label, count, share, rate and ETA.
func (b *Bar) plain(now time.Time) string {
	pct := 100.0
	if b.total > 0 {
		pct = 100 * float64(b.done) / float64(b.total)
	}
	el := now.Sub(b.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(b.done-b.base) / el
	}
	eta := "--"
	if rate > 0 && b.done < b.total {
		eta = time.Duration(float64(b.total-b.done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	return fmt.Sprintf("%s: %d/%d %s (%.0f%%), %.2f %s/s, ETA %s", b.label, b.done, b.total, b.unit, pct, rate, b.unit, eta)
}

// Done ends the bar: the drawn bar's line, or a last plain line.
func (b *Bar) Done() {
	if b == nil || b.quiet || b.base < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb != nil {
		if !b.pb.IsFinished() {
			b.pb.Exit()
			fmt.Fprintln(b.w)
		}
		return
	}
	if !b.tty {
		fmt.Fprintln(b.w, b.plain(time.Now()))
	}
}

// Command peakmaps runs a command and says where its resident memory was
// at its peak: it reads /proc/PID/smaps every -every (50 ms), keeps the
// sample whose resident total is the largest, and prints that sample's
// resident and anonymous KiB summed per mapped file ([anon] for memory
// no file backs), largest first, then the total. A sampled peak can be
// a little under the kernel's own high-water mark (/usr/bin/time's %M),
// which sees every page fault. Linux only.
//
//	go run ./tools/peakmaps -- bin/dlmcache generate --model FILE ...
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// mapping is one file's (or anonymous memory's) share of a sample.
type mapping struct {
	name      string
	rss, anon int64 // KiB
}

func main() {
	every := flag.Duration("every", 50*time.Millisecond, "how often to read smaps")
	top := flag.Int("top", 12, "how many mappings to print")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "peakmaps: no command: peakmaps [-every D] [-top N] -- COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "peakmaps:", err)
		os.Exit(2)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var best []mapping
	var bestTotal int64
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		if ms, total := sample(cmd.Process.Pid); total > bestTotal {
			best, bestTotal = ms, total
		}
		select {
		case err := <-done:
			report(best, bestTotal, *top)
			if err != nil {
				fmt.Fprintln(os.Stderr, "peakmaps: the command:", err)
				os.Exit(1)
			}
			return
		case <-tick.C:
		}
	}
}

// sample sums /proc/pid/smaps's Rss and Anonymous per mapped name; an
// unreadable file (the process gone) is an empty sample.
func sample(pid int) ([]mapping, int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, 0
	}
	defer f.Close()
	by := map[string]*mapping{}
	var cur *mapping
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":"):
			name := "[anon]"
			if len(fs) >= 6 {
				name = strings.Join(fs[5:], " ")
			}
			if by[name] == nil {
				by[name] = &mapping{name: name}
			}
			cur = by[name]
		case cur != nil && len(fs) >= 2 && (fs[0] == "Rss:" || fs[0] == "Anonymous:"):
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			if fs[0] == "Rss:" {
				cur.rss += kb
				total += kb
			} else {
				cur.anon += kb
			}
		}
	}
	ms := make([]mapping, 0, len(by))
	for _, m := range by {
		ms = append(ms, *m)
	}
	return ms, total
}

func report(ms []mapping, total int64, top int) {
	slices.SortFunc(ms, func(a, b mapping) int { return cmp.Compare(b.rss, a.rss) })
	fmt.Printf("%10s %10s  %s\n", "rss MiB", "anon MiB", "mapping")
	for i, m := range ms {
		if i == top {
			break
		}
		fmt.Printf("%10.1f %10.1f  %s\n", float64(m.rss)/1024, float64(m.anon)/1024, m.name)
	}
	fmt.Printf("%10.1f %10s  total resident at the sampled peak\n", float64(total)/1024, "")
}

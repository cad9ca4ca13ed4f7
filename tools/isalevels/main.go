// Command isalevels lists the instruction-set levels the CPU backend's
// kernels can be capped at on this processor (cpu.ISALevel,
// $DLMCACHE_CPU_ISA), for `make test`, which runs the model and kernel
// tests once per level. With -below it prints the levels under this
// processor's own (the uncapped run covers that one), one word each; with
// -summary it prints the line make test ends with: the levels run and the
// ones this processor lacks.
//
//	go run ./tools/isalevels -below
//	go run ./tools/isalevels -summary
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/dlmcache/dlmcache/model/cpu"
)

func main() {
	below := flag.Bool("below", false, "print the levels under this processor's, lowest first")
	summary := flag.Bool("summary", false, "print which levels a per-level test run covers and which this processor lacks")
	flag.Parse()
	top := cpu.MachineISA()
	var run, lacks []string
	for l := cpu.ISAGeneric; l <= cpu.ISANative; l++ {
		if l <= top {
			run = append(run, l.String())
		} else {
			lacks = append(lacks, l.String())
		}
	}
	switch {
	case *below:
		fmt.Println(strings.Join(run[:len(run)-1], " "))
	case *summary:
		lack := strings.Join(lacks, ", ")
		if lack == "" {
			lack = "none"
		}
		fmt.Printf("isa levels: model and kernel tests ran at %s (this CPU: %s); levels this processor lacks, not run: %s\n",
			strings.Join(run, ", "), cpu.ISADescription(), lack)
	default:
		flag.Usage()
		os.Exit(2)
	}
}

// Command dlmcache calibrates and serves shared-prefix K/V caching for
// diffusion language models.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGINT and SIGTERM cancel the commands' context: a profile stops
	// after writing what it finished (resume with --resume), serve drains.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

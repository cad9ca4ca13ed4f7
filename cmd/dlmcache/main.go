// Command dlmcache calibrates and serves shared-prefix K/V caching for
// diffusion language models.
package main

import "os"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

package main

import (
	"slices"

	"github.com/spf13/cobra"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/profile"
)

// flagValues are the values a flag of that name takes, for shell
// completion (`dlmcache completion bash|zsh|fish|powershell`, cobra's).
func flagValues() map[string][]string {
	suites := append([]string{"all"}, datasets.Suites()...)
	return map[string][]string{
		"method":      cache.Names(),
		"methods":     cache.Names(),
		"suite":       suites,
		"deep-source": {"auto", "request", "store", "recompute"},
		"similarity":  {string(profile.SimPrefix), string(profile.SimRowMin)},
		"stat":        {"mean", "mean-std", "min"},
		"eviction":    {"fifo", "lru"},
	}
}

// addFlagCompletions registers value completions for every flag of cmd
// and its subcommands named in flagValues.
func addFlagCompletions(cmd *cobra.Command) {
	vals := flagValues()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for name, v := range vals {
			if c.Flags().Lookup(name) == nil {
				continue
			}
			v := slices.Clone(v)
			c.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
				return v, cobra.ShellCompDirectiveNoFileComp
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd)
}

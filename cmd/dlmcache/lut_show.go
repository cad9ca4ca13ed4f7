package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/lut"
)

type lutShowOptions struct {
	f    *factory
	File string
	JSON bool
}

func (opts *lutShowOptions) run(context.Context) error {
	t, err := lut.Read(opts.File)
	if err != nil {
		return err
	}
	if opts.JSON {
		enc := json.NewEncoder(opts.f.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(t)
	}
	fmt.Fprint(opts.f.Out, t.String())
	return nil
}

func (opts *lutShowOptions) setArgs(args []string) { opts.File = args[0] }

func (opts *lutShowOptions) flags(fl *pflag.FlagSet) {
	fl.BoolVar(&opts.JSON, "json", false, "print the table as JSON")
}

func newCmdLutShow(f *factory, runF func(*lutShowOptions) error) *cobra.Command {
	return newCommand(&lutShowOptions{f: f}, runF, &cobra.Command{
		Use:   "show table.json",
		Short: "Print a table readably",
		Args:  cobra.ExactArgs(1),
	})
}

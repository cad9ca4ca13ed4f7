package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dlmcache/dlmcache/lut"
)

type lutShowOptions struct {
	f    *factory
	File string
	JSON bool
}

func newCmdLutShow(f *factory, runF func(*lutShowOptions) error) *cobra.Command {
	opts := &lutShowOptions{f: f}
	cmd := &cobra.Command{
		Use:   "show table.json",
		Short: "Print a table readably",
		Args:  cobra.ExactArgs(1),
		RunE:  runE(opts, runF, func(args []string) { opts.File = args[0] }, func(context.Context) error { return lutShowRun(opts) }),
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the table as JSON")
	return cmd
}

func lutShowRun(opts *lutShowOptions) error {
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

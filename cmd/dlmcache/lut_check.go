package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dlmcache/dlmcache/lut"
)

type lutCheckOptions struct {
	f       *factory
	File    string
	Model   string
	Device  string
	Threads int
}

func newCmdLutCheck(f *factory, runF func(*lutCheckOptions) error) *cobra.Command {
	opts := &lutCheckOptions{f: f}
	cmd := &cobra.Command{
		Use:   "check table.json [--model M]",
		Short: "Say whether a table fits a model, and why not",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if runF != nil {
				return runF(opts)
			}
			return lutCheckRun(opts)
		},
	}
	addModelFlags(cmd.Flags(), &opts.Model, &opts.Device, &opts.Threads)
	return cmd
}

func lutCheckRun(opts *lutCheckOptions) error {
	t, err := lut.Read(opts.File)
	if err != nil {
		return err
	}
	lm, err := loadModel(opts.f, opts.Model, opts.Device, opts.Threads)
	if err != nil {
		return err
	}
	defer lm.Close()
	if err := t.Check(lm.Name, len(lm.Blocks), lm.Fingerprint); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s: incompatible: %w", opts.File, err)}
	}
	fmt.Fprintf(opts.f.Out, "%s: compatible with %s (%d layers, fingerprint %s)\n", opts.File, lm.Name, len(lm.Blocks), lm.Fingerprint)
	return nil
}

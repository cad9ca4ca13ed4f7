package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// factory carries what every command needs from its surroundings, so that
// commands have no package-level state and tests can swap the streams.
type factory struct {
	In     io.Reader // what @- reads
	Out    io.Writer
	ErrOut io.Writer
}

// exitError lets a command choose its exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func newRootCmd(f *factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "dlmcache",
		Short: "Shared-prefix K/V caching for diffusion language models",
		Long: `dlmcache measures, per diffusion language model, how deep a shared
prompt prefix's keys and values can be reused across requests, writes that as a
ratio→depth lookup table, and serves requests with it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(f.Out)
	root.SetErr(f.ErrOut)
	root.AddCommand(newCmdGenerate(f, nil), newCmdProfile(f, nil), newCmdCalibrate(f, nil), newCmdEval(f, nil), newCmdBench(f, nil), newCmdLut(f), newCmdSweep(f), newCmdPlot(f), newCmdServe(f, nil), newCmdVersion(f, nil), newCmdLoadtest(f, nil), newCmdConvert(f, nil))
	root.AddCommand(newCmdGenDocs())
	addFlagCompletions(root)
	return root
}

// execute runs the command line args; ctx is every command's context
// (main cancels it on SIGINT or SIGTERM).
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f := &factory{In: stdin, Out: stdout, ErrOut: stderr}
	root := newRootCmd(f)
	root.SetArgs(args)
	root.SetIn(stdin)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "dlmcache:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

// runE is a command's RunE: bind (when set) stores the positional
// arguments in opts, then the test hook runF runs when set, else run with
// the command's context (cancelled on SIGINT/SIGTERM by main).
func runE[T any](opts T, runF func(T) error, bind func(args []string), run func(context.Context) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if bind != nil {
			bind(args)
		}
		if runF != nil {
			return runF(opts)
		}
		return run(cmd.Context())
	}
}

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

// A command's options type: the command's flags and positional arguments
// fill it, and it does the command's work. newCommand joins it to the
// command's help.
type runner interface {
	// flags declares the command's flags on cmd, bound to the options.
	flags(cmd *cobra.Command)
	// run does the work; ctx is the command's context (main cancels it on
	// SIGINT or SIGTERM).
	run(ctx context.Context) error
}

// argsSetter is a runner that takes positional arguments (cmd.Args has
// checked how many).
type argsSetter interface {
	setArgs(args []string)
}

// newCommand completes cmd — a command's help and the check of its
// positional arguments — for opts: it declares opts' flags, and its RunE
// stores the positional arguments in opts, then calls the test hook runF
// when set (tests see the parsed options; nothing runs), else opts.run.
func newCommand[T runner](opts T, runF func(T) error, cmd *cobra.Command) *cobra.Command {
	opts.flags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if a, ok := any(opts).(argsSetter); ok {
			a.setArgs(args)
		}
		if runF != nil {
			return runF(opts)
		}
		return opts.run(cmd.Context())
	}
	return cmd
}

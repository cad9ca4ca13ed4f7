package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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

// runner is a command's options type: the command's flags and positional
// arguments fill it, and it does the command's work. newCommand joins it
// to the command's help (the command's newCmdX, in its file).
type runner interface {
	// flags declares the command's flags on fl, bound to the options.
	flags(fl *pflag.FlagSet)
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
	opts.flags(cmd.Flags())
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

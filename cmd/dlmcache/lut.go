package main

import "github.com/spf13/cobra"

func newCmdLut(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lut",
		Short: "Build, show, compare and check ratio→depth tables",
	}
	cmd.AddCommand(newCmdLutBuild(f, nil), newCmdLutShow(f, nil), newCmdLutDiff(f, nil), newCmdLutCheck(f, nil), newCmdLutVerify(f, nil))
	return cmd
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
)

// newCmdGenDocs is the hidden command that writes the command reference
// (docs/cli/, one markdown page per command) from the cobra tree itself, so
// the reference cannot drift from the flags: `make docs` runs it and
// TestCLIReferenceIsCurrent fails when docs/cli/ differs from what it writes.
func newCmdGenDocs() *cobra.Command {
	dir := "docs/cli"
	cmd := &cobra.Command{
		Use:    "gen-docs",
		Short:  "Write the markdown command reference (docs/cli/) from the command tree",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := genCLIDocs(cmd.Root(), dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d pages to %s\n", n, dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", dir, "directory the pages are written to (pages of commands that no longer exist are removed)")
	return cmd
}

// cliDocs renders one markdown page per available command under root,
// keyed by file name (dlmcache_lut_build.md for `dlmcache lut build`).
// The pages carry no generation date, so the same tree renders the same
// bytes.
func cliDocs(root *cobra.Command) (map[string][]byte, error) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	pages := map[string][]byte{}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() {
			return nil
		}
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		var b bytes.Buffer
		if err := doc.GenMarkdownCustom(c, &b, func(s string) string { return s }); err != nil {
			return err
		}
		pages[cliPageName(c)] = b.Bytes()
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	return pages, nil
}

// cliPageName is cobra/doc's file name for c's page.
func cliPageName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
}

// genCLIDocs writes root's pages into dir atomically and removes the
// markdown pages there that no command renders any more.
func genCLIDocs(root *cobra.Command, dir string) (int, error) {
	pages, err := cliDocs(root)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	names := make([]string, 0, len(pages))
	for name := range pages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := atomicfile.WriteFile(filepath.Join(dir, name), pages[name], 0o644); err != nil {
			return 0, err
		}
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return 0, err
	}
	for _, p := range old {
		if _, ok := pages[filepath.Base(p)]; !ok {
			if err := os.Remove(p); err != nil {
				return 0, err
			}
		}
	}
	return len(pages), nil
}

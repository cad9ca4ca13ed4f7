package load

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Resolve turns a --model argument into a model directory (one holding
// config.json) or a GGUF file and returns its absolute path.
//
// A GGUF file (a regular file starting with GGUF's magic) is used as it is;
// so is, in a $DLMCACHE_MODELS directory, <dir>/<name> when it is one.
// A directory with config.json is used as it is; so is a Hugging Face cache
// entry (models--ORG--NAME) given as a directory, through its newest
// snapshot. Anything else is a name, looked up
//
//  1. in each directory of $DLMCACHE_MODELS (colon-separated) as
//     <dir>/<name>, the first one with config.json winning;
//  2. in the Hugging Face hub cache ($HF_HUB_CACHE, else $HF_HOME/hub, with
//     HF_HOME defaulting to ~/.cache/huggingface) as
//     models--ORG--NAME/snapshots/<revision>/, taking the most recently
//     modified snapshot that has config.json.
//
// A name matches an entry (a $DLMCACHE_MODELS subdirectory or a cache entry's
// NAME; its ORG/NAME when the name holds a slash) exactly, else equal but
// for case, else as a case-insensitive substring — so "llada" finds
// models--GSAI-ML--LLaDA-8B-Instruct. The best kind of match wins; two
// entries matching equally well are an error that lists them. An error for
// a name that matches nothing says where Resolve looked.
// hubCandidates are the model snapshots of the Hugging Face cache hub
// (keyed by NAME, or ORG/NAME when arg names an organisation), and the
// entries matching arg that hold no snapshot with a config (an
// incomplete download); err is reading hub's directory.
func hubCandidates(hub, arg string) (cands []candidate, incomplete []string, err error) {
	entries, err := os.ReadDir(hub)
	for _, e := range entries {
		repo, ok := strings.CutPrefix(e.Name(), "models--")
		if !ok {
			continue
		}
		org, name, hasOrg := strings.Cut(repo, "--")
		if !hasOrg {
			org, name = "", repo
		}
		id := name
		if hasOrg {
			id = org + "/" + name
		}
		key := name
		if strings.Contains(arg, "/") {
			key = id
		}
		entry := filepath.Join(hub, e.Name())
		snap, serr := latestSnapshot(entry)
		if serr != nil {
			if matchTier(arg, key) >= 0 {
				incomplete = append(incomplete, entry)
			}
			continue
		}
		cands = append(cands, candidate{key: key, dir: snap, label: id + " (" + snap + ")"})
	}

	return cands, incomplete, err
}

// bestMatches are the candidates (one per directory) that match arg at
// the best tier matchTier finds.
func bestMatches(arg string, cands []candidate) []candidate {
	best := -1
	var found []candidate
	seen := map[string]bool{}
	for _, c := range cands {
		tier := matchTier(arg, c.key)
		if tier < 0 || seen[c.dir] {
			continue
		}
		seen[c.dir] = true
		switch {
		case best < 0 || tier < best:
			best, found = tier, []candidate{c}
		case tier == best:
			found = append(found, c)
		}
	}
	return found
}

func Resolve(nameOrDir string) (string, error) {
	arg := nameOrDir
	if arg == "" {
		return "", errors.New("model: empty model name or directory")
	}
	if st, err := os.Stat(arg); err == nil && st.Mode().IsRegular() {
		if IsGGUF(arg) {
			return filepath.Abs(arg)
		}
		return "", fmt.Errorf("model: %s is a file but not a GGUF file (want a model directory or a .gguf file)", arg)
	}
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		if hasConfig(arg) {
			return filepath.Abs(arg)
		}
		if snap, err := latestSnapshot(arg); err == nil {
			return filepath.Abs(snap)
		}
		return "", fmt.Errorf("model: %s is a directory without config.json (and not a Hugging Face cache entry with a snapshot holding one)", arg)
	}
	if isPathLike(arg) || strings.HasSuffix(arg, ".gguf") {
		return "", fmt.Errorf("model: %s: no such model directory or GGUF file", arg)
	}

	var cands []candidate
	var looked []string

	// $DLMCACHE_MODELS: an exact <dir>/<name> wins in PATH order.
	roots := filepath.SplitList(os.Getenv("DLMCACHE_MODELS"))
	nroots := 0
	for _, root := range roots {
		if root == "" {
			continue
		}
		root = expandHome(root)
		nroots++
		looked = append(looked, root)
		if p := filepath.Join(root, arg); hasConfig(p) || IsGGUF(p) {
			return filepath.Abs(p)
		}
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			p := filepath.Join(root, e.Name())
			if hasConfig(p) {
				cands = append(cands, candidate{key: e.Name(), dir: p, label: p})
			}
		}
	}

	// The Hugging Face cache.
	hub := hubCache()
	hubCands, incomplete, hubErr := hubCandidates(hub, arg)
	cands = append(cands, hubCands...)

	found := bestMatches(arg, cands)
	switch {
	case len(found) == 1:
		return filepath.Abs(found[0].dir)
	case len(found) > 1:
		labels := make([]string, len(found))
		for i, c := range found {
			labels[i] = c.label
		}
		return "", fmt.Errorf("model: %q is ambiguous; it matches %s; name one of them exactly (ORG/NAME for a Hugging Face cache entry) or pass a directory", arg, strings.Join(labels, ", "))
	}

	var where []string
	if nroots == 0 {
		where = append(where, "$DLMCACHE_MODELS is unset")
	} else {
		where = append(where, "$DLMCACHE_MODELS ("+strings.Join(looked, ", ")+")")
	}
	hubNote := hub
	if hubErr != nil {
		hubNote += ", which does not exist"
	}
	where = append(where, "the Hugging Face cache ("+hubNote+")")
	msg := fmt.Sprintf("model: %q is not a directory with config.json and was not found in %s", arg, strings.Join(where, " or "))
	if len(incomplete) > 0 {
		msg += fmt.Sprintf("; matching cache entries without a snapshot holding config.json (incomplete download?): %s", strings.Join(incomplete, ", "))
	}
	return "", errors.New(msg)
}

// candidate is a model directory found by name.
type candidate struct {
	key   string // what the name is matched against
	dir   string // the model directory
	label string // how an error names it
}

// matchTier grades how well name matches key: 0 exactly, 1 equal but for
// case, 2 as a case-insensitive substring, -1 not at all.
func matchTier(name, key string) int {
	switch {
	case key == name:
		return 0
	case strings.EqualFold(key, name):
		return 1
	case strings.Contains(strings.ToLower(key), strings.ToLower(name)):
		return 2
	}
	return -1
}

func hasConfig(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "config.json"))
	return err == nil && st.Mode().IsRegular()
}

// isPathLike reports whether arg can only mean a path, not a name.
func isPathLike(arg string) bool {
	return filepath.IsAbs(arg) || arg == "." || arg == ".." || arg == "~" ||
		strings.HasPrefix(arg, "./") || strings.HasPrefix(arg, "../") || strings.HasPrefix(arg, "~/")
}

// hubCache is the Hugging Face hub cache directory, as huggingface_hub
// computes it.
func hubCache() string {
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(v); d != "" {
			return expandHome(d)
		}
	}
	home := os.Getenv("HF_HOME")
	if home == "" {
		if xdg := os.Getenv("XDG_CACHE_HOME"); xdg != "" {
			home = filepath.Join(xdg, "huggingface")
		} else {
			home = "~/.cache/huggingface"
		}
	}
	return filepath.Join(expandHome(home), "hub")
}

func expandHome(p string) string {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return p
	}
	return filepath.Join(h, p[1:])
}

// latestSnapshot returns the most recently modified snapshots/<revision>
// directory of a cache entry that holds config.json (ties: the larger
// revision name, so the choice is deterministic).
func latestSnapshot(entry string) (string, error) {
	snaps := filepath.Join(entry, "snapshots")
	des, err := os.ReadDir(snaps)
	if err != nil {
		return "", err
	}
	type snap struct {
		dir string
		mod time.Time
	}
	var ok []snap
	for _, d := range des {
		p := filepath.Join(snaps, d.Name())
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() || !hasConfig(p) {
			continue
		}
		ok = append(ok, snap{p, st.ModTime()})
	}
	if len(ok) == 0 {
		return "", fmt.Errorf("%s: no snapshot with config.json", snaps)
	}
	sort.Slice(ok, func(i, j int) bool {
		if !ok[i].mod.Equal(ok[j].mod) {
			return ok[i].mod.After(ok[j].mod)
		}
		return ok[i].dir > ok[j].dir
	})
	return ok[0].dir, nil
}

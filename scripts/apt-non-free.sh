#!/usr/bin/env bash
# apt-non-free.sh prints, in deb822 form, an apt sources file that adds the
# contrib and non-free components for every Debian source the machine already
# uses (same URIs, suites and keyring), so that `make cuda-deps` never names a
# mirror itself. It reads /etc/apt/sources.list.d/*.sources (deb822 stanzas
# whose Components include main) and the one-line "deb URI suite main ..."
# entries of /etc/apt/sources.list and /etc/apt/sources.list.d/*.list.
# Usage: scripts/apt-non-free.sh [file-to-skip]   (the file it will replace)
set -euo pipefail
skip=${1:-}
out=$(
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -e "$f" ] && [ "$f" != "$skip" ] || continue
		# deb822: print each stanza that lists main, with Components replaced.
		awk '
			function flush() {
				if (n > 0 && hasmain) {
					for (i = 1; i <= n; i++) print lines[i]
					print "Components: contrib non-free"
					print ""
				}
				n = 0; hasmain = 0
			}
			/^[[:space:]]*$/ { flush(); next }
			/^#/ { next }
			/^Components:/ { if ($0 ~ /[[:space:]]main([[:space:]]|$)/) hasmain = 1; next }
			/^(Types|URIs|Suites|Signed-By):/ { lines[++n] = $0; next }
			END { flush() }
		' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -e "$f" ] || continue
		# one-line form: deb [options] URI suite components...
		awk '
			$1 != "deb" { next }
			{
				i = 2
				if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				uri = $(i); suite = $(i + 1); main = 0
				for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
				if (main) printf "Types: deb\nURIs: %s\nSuites: %s\nComponents: contrib non-free\n\n", uri, suite
			}
		' "$f"
	done
)
if [ -z "$out" ]; then
	echo "apt-non-free.sh: no Debian source with the main component in /etc/apt; add one first" >&2
	exit 1
fi
printf '%s\n' "$out"

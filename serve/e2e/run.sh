#!/usr/bin/env bash
# End-to-end test of `dlmcache serve` with the official openai npm client:
# builds bin/dlmcache, installs the client (npm ci), starts the server on a
# free loopback port with the tiny-bf16 fixture and the prefix-all method
# (it uses the prefix store without needing a table), runs serve.test.mjs
# with node's test runner, then stops the server with SIGTERM and checks
# that it shut down cleanly. `make e2e` runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

command -v node >/dev/null && command -v npm >/dev/null || { echo "e2e: node and npm are required" >&2; exit 1; }
go build -o bin/dlmcache ./cmd/dlmcache
(cd serve/e2e && npm ci --no-audit --no-fund --loglevel=error)

log=$(mktemp)
bin/dlmcache serve --model model/testdata/tiny-bf16 --method prefix-all --cache-bytes 16777216 --addr 127.0.0.1:0 2>"$log" &
pid=$!
cleanup() {
	if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
	rm -f "$log"
}
trap cleanup EXIT
fail() {
	echo "e2e: $*" >&2
	echo "--- server log" >&2
	cat "$log" >&2
	exit 1
}

# wait_listening prints the URL the server in $log listens on once its
# /healthz answers.
wait_listening() {
	local url=""
	for _ in $(seq 300); do
		url=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$log" | sed 's/listening on //' || true)
		[ -n "$url" ] && break
		kill -0 "$pid" 2>/dev/null || fail "the server exited at start-up"
		sleep 0.1
	done
	[ -n "$url" ] || fail "the server did not start listening within 30 s"
	for _ in $(seq 100); do
		curl -fsS "$url/healthz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	curl -fsS "$url/healthz" >/dev/null || fail "$url/healthz is not answering"
	echo "$url"
}
url=$(wait_listening)
echo "e2e: dlmcache serve at $url"

(cd serve/e2e && DLMCACHE_URL="$url" node --test serve.test.mjs) || fail "node --test failed"
if [ -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
	(cd serve/e2e && DLMCACHE_URL="$url" node --test playground.test.mjs) || fail "the playground test in headless Chromium failed"
else
	echo "e2e: playground test SKIPPED: no Chromium at ${CHROMIUM:-/usr/bin/chromium} (apt-get install chromium, or make e2e installs it)"
fi

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
[ "$status" = 0 ] || fail "the server exited with status $status after SIGTERM"
grep -q 'dlmcache serve: stopped' "$log" || fail "no clean shutdown line in the server log"
requests=$(grep -c ' POST ' "$log")

# API keys: one on the command line, two in a key file.
keyfile=$(mktemp)
printf '# e2e keys\nsk-e2e-file-1\n\nsk-e2e-file-2\n' >"$keyfile"
: >"$log"
bin/dlmcache serve --model "$root/model/testdata/tiny-bf16" --addr 127.0.0.1:0 --api-key sk-e2e-flag --api-key-file "$keyfile" 2>"$log" &
pid=$!
url=$(wait_listening)
(cd serve/e2e && DLMCACHE_URL="$url" DLMCACHE_KEYS="sk-e2e-flag,sk-e2e-file-1,sk-e2e-file-2" node --test auth.test.mjs) || fail "the API-key test failed"
rm -f "$keyfile"
grep -q ' 401 ' "$log" || fail "no 401 logged"
if grep -q 'sk-e2e' "$log"; then fail "the server log shows a key"; fi
kill -TERM "$pid"
wait "$pid" || fail "the keyed server did not stop cleanly"
echo "e2e: ok ($requests requests logged, clean shutdown; API keys: 401 without, 200 with each)"

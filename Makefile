# dlmcache — make run: the main job on the bundled defaults; make test: vet + race tests.
GO        ?= go
BIN       := bin/dlmcache
export CGO_ENABLED := 1

.PHONY: all build deps test run bench vet fuzz clean

all: build

# deps installs what a fresh Debian machine lacks: OpenBLAS headers for the CPU
# backend (cgo), and the Go modules.
deps:
	@if ! [ -e /usr/include/x86_64-linux-gnu/cblas.h ] && ! [ -e /usr/include/cblas.h ] && ! [ -e /usr/include/openblas/cblas.h ]; then \
		echo "installing libopenblas-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libopenblas-dev >/dev/null; \
	fi
	$(GO) mod download

build: deps
	$(GO) build -o $(BIN) ./cmd/dlmcache

vet: deps
	$(GO) vet ./...

test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

run: build
	./$(BIN) generate --model model/testdata/tiny-bf16

bench: build
	./scripts/bench.sh

fuzz: deps
	$(GO) test ./model/safetensors -run '^$$' -fuzz FuzzParseHeader -fuzztime 60s

clean:
	rm -rf bin

# dlmcache — make run: the main job on the bundled defaults; make test: vet + race tests, the model and kernel tests once per ISA level this CPU has (+ the C under sanitizers).
GO        ?= go
BIN       := bin/dlmcache
export CGO_ENABLED := 1

.PHONY: all build deps test sanitize e2e hfcheck llmd run bench bench-llamacpp bench-llamacpp-serve bench-8b bench-block serve-block results vet fuzz clean docs cuda-deps cuda-check gpu-test gpu-bundle

all: build

# deps installs what a fresh Debian machine lacks: OpenBLAS headers for the CPU
# backend (cgo), oneDNN's (libdnnl-dev: the CPU backend loads libdnnl.so.2 at
# run time and uses it where it has AVX-512 kernels; optional), and the Go
# modules.
deps:
	@if ! [ -e /usr/include/x86_64-linux-gnu/cblas.h ] && ! [ -e /usr/include/cblas.h ] && ! [ -e /usr/include/openblas/cblas.h ]; then \
		echo "installing libopenblas-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libopenblas-dev >/dev/null; \
	fi
	@if ! [ -e /usr/include/oneapi/dnnl/dnnl.h ]; then \
		echo "installing libdnnl-dev (oneDNN: the CPU backend's products on AVX-512 and AVX512-BF16; OpenBLAS without it)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		( $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libdnnl-dev >/dev/null ) || \
			echo "deps: could not install libdnnl-dev: the CPU backend will use OpenBLAS only"; \
	fi
	$(GO) mod download

# The commit goes into `dlmcache version` even where GOFLAGS turns VCS
# stamping off.
COMMIT    := $(shell git rev-parse HEAD 2>/dev/null)
build: deps
	$(GO) build -ldflags "-X main.commit=$(COMMIT)" -o $(BIN) ./cmd/dlmcache

vet: deps
	$(GO) vet ./...

test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...
	@for l in $$($(GO) run ./tools/isalevels -below); do \
		echo "model and kernel tests with the kernels capped at $$l (DLMCACHE_CPU_ISA=$$l):"; \
		DLMCACHE_CPU_ISA=$$l $(GO) test -count=1 ./model ./model/sample ./model/cpu || exit 1; \
	done
	@$(GO) run ./tools/isalevels -summary
	@echo "model/cpu built without oneDNN (as on a machine without libdnnl-dev):"
	CGO_CFLAGS="-O2 -g -DDLMCACHE_NO_DNNL" $(GO) test -count=1 ./model/cpu
	$(MAKE) --no-print-directory sanitize
	$(MAKE) --no-print-directory llmd
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory e2e hfcheck; \
	else \
		echo "e2e: SKIPPED: node/npm not found, so the openai-client test of dlmcache serve did not run (make e2e)"; \
		echo "hfcheck: SKIPPED: node/npm not found, so the tokenizer/chat-template cross-check against Hugging Face's JS implementations did not run (make hfcheck)"; \
	fi

# sanitize runs the tests of the packages with C of their own (model/cpu's
# kernels, internal/sumexp) with that C built under AddressSanitizer (go
# test -asan: out-of-bounds reads and writes, use after free; not leaks:
# LeakSanitizer's tracer crashes at model/cpu's exit, signal 11, after every
# test has passed)
# and UndefinedBehaviorSanitizer's arithmetic and bounds checks, each a
# failure (-fno-sanitize-recover). Left out, because with them gcc 12 takes
# minutes to compile attn.c's unrolled, force-inlined tiles (on 2 busy
# cores: over 600 s with use-after-scope, 347 s with the whole of
# -fsanitize=undefined, 65 s as here): ASan's use-after-scope and UBSan's
# pointer checks (null, alignment, object-size, pointer-overflow).
# The tests are those of the C kernels (the whole package under ASan ran
# past 10 minutes on 2 busy cores; TestMatMul, 167 s of it, tests the GEMM
# libraries' products more than this C).
SAN_TESTS := BF16Rows|Quant|Attention|RMSNorm|RoPE|SiLUMulAddEmbed|CopyRows|Exp|ScalarKernels|Fused|Team|ToBF16|PackedWeights|Layout|PeakF32Work|Sum
SAN_UBSAN := shift,integer-divide-by-zero,signed-integer-overflow,bounds,vla-bound,unreachable,return,bool,enum,float-cast-overflow
sanitize: deps
	CGO_CFLAGS="-O2 -g -fno-omit-frame-pointer -fno-sanitize-address-use-after-scope -fsanitize=$(SAN_UBSAN) -fno-sanitize-recover=all" \
	CGO_LDFLAGS="-fsanitize=undefined" ASAN_OPTIONS=detect_leaks=0 $(GO) test -asan -count=1 -timeout 30m \
		-run '$(SAN_TESTS)' ./model/cpu ./internal/sumexp

# e2e starts `dlmcache serve` on a loopback port and talks to it with the
# official openai npm client (npm ci needs the npm registry), then loads the
# playground page in headless Chromium (Debian's chromium, installed when
# missing).
e2e: deps
	@if ! [ -x /usr/bin/chromium ]; then \
		echo "installing chromium (the playground test runs in headless Chromium)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		( $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null ) || \
			echo "e2e: could not install chromium: the playground test will be SKIPPED"; \
	fi
	./serve/e2e/run.sh

# hfcheck compares the tokenizer's ids, decoded text and the chat templates'
# renders with Hugging Face's Rust tokenizers (Node binding),
# @huggingface/tokenizers and @huggingface/jinja, on Qwen3's released
# tokenizer.json and template and the fixtures' tokenizers (npm ci needs the
# npm registry).
hfcheck: deps
	./tools/hfcheck/run.sh

# llmd decodes dlmcache's KV events with llm-d-kv-cache's own vLLM adapter
# and builds llm-d's index from a live publisher, both socket directions
# (tools/llmd: a module of its own, so the main one does not carry llm-d's
# Kubernetes and telemetry dependencies).
llmd:
	cd tools/llmd && $(GO) vet ./... && $(GO) test -count=1 ./...

# run (scripts/run.sh): a generation, the cosine profile
# (profile-out/table-cosine*.json: estimates), the budgeted method search
# that writes the table to serve, profile-out/table.json (calibrated; serve
# --lut profile-out/table.json), and lut verify's verdict on it: held-out
# traffic served as serve --lut serves it, against none. make run gates with
# --gate loss (it fails when the table loses more than 1 point or is worse
# than none beyond the noise): its 243 requests are too few for lut verify's
# default, --gate accuracy (the paired interval's lower end at −1 point or
# above), which one changed answer among them already misses; the verdict
# line says so. Rerunning resumes the search from profile-out/search.jsonl.
# When GUIDE (the bundled AR guide, models/llada-tiny-ar) holds weights
# (model.safetensors), calibrate and lut verify get --guide GUIDE: the
# search considers guided settings beside the others (calibrate --guide's
# grid) and the table records the guide (serve it with --guide GUIDE when
# it chooses guided settings); without them one line says so and the run
# is the unguided one. A search log of the other guide state is set aside
# (search-guided.jsonl, search-unguided.jsonl), not resumed.
# The calibration's caps: 60 requests a bin and class (--per-ratio), a
# setting served only where its rate of changed answers is below 5% at
# 95% confidence (--risk, --confidence; the exact bound needs 59 requests
# with no changed answer): as many references (none on the schedule, most
# of the search's time) as make run's search ran before, to keep make run
# within 10 minutes on 2 cores. calibrate's own defaults, --per-ratio 150
# --risk 0.02 (149 needed; 300 requests a bin), cost about 2.5× the
# references: one bin of them, both classes, with the guided grid, took
# 867 s of generation on 2 cores shared with a training job (the long
# class's 150 references 520 s of it), so give them in CALIBRATE_FLAGS
# where the time is there (--per-ratio 100 --risk 0.03 lies between). A
# bin stops running references once every setting in it has stopped. The
# whole guided grid is searched: with the guide of 2 Dec 2026 its guided
# settings changed an answer within the first 6–9 requests of a bin and
# stopped there.
CALIBRATE_FLAGS ?= --ratios 0.2,0.5,0.7,1 --per-ratio 60 --risk 0.05
VERIFY_FLAGS ?= --groups 15 --gate loss
GUIDE ?= models/llada-tiny-ar
run: build
	BIN=./$(BIN) GUIDE='$(GUIDE)' CALIBRATE_FLAGS='$(CALIBRATE_FLAGS)' VERIFY_FLAGS='$(VERIFY_FLAGS)' ./scripts/run.sh

bench: build
	./scripts/bench.sh

# bench-llamacpp LLAMACPP=DIR: dlmcache beside llama.cpp's llama-diffusion-cli
# on the same GGUF files (F32 from dlmcache convert; F16, BF16, Q8_0, Q4_0
# from llama-quantize), per step, alternating rounds; DLMCACHE_CPU_ISA=avx2
# caps both programs at AVX2. Writes bench-out/llamacpp/summary.{json,md}
# (scripts/bench-llamacpp.sh says what it runs). Not part of make test.
bench-llamacpp: build
	BIN=./$(BIN) LLAMACPP='$(LLAMACPP)' ./scripts/bench-llamacpp.sh

# bench-llamacpp-serve LLAMACPP=DIR: the same shared-prefix requests (N, 40)
# through dlmcache serve on its default (TABLE=table.json: a table calibrated on that GGUF file)
# against one llama-diffusion-cli run each on llada-tiny's F32 GGUF,
# generation time per request, into bench-out/llamacpp-serve/summary.{json,md}
# (scripts/bench-llamacpp-serve.sh says what it runs). Not part of make test.
bench-llamacpp-serve: build
	BIN=./$(BIN) LLAMACPP='$(LLAMACPP)' N='$(N)' TABLE='$(TABLE)' ./scripts/bench-llamacpp-serve.sh

# bench-8b times BF16 weights: l16-d2048 in F32 and in BF16 (kept, and
# converted at load), and LLaDA-8B-Instruct's, Dream-v0-7B's and
# LLaDA-MoE-7B-A1B's shapes in BF16, one step each, with each process's
# peak RSS, into bench-out/8b/. It writes their checkpoints (16.0, 15.2 and
# 14.7 GB) under $$DLMCACHE_BENCH_8B_DIR (/tmp/dlmcache-bench-8b) once,
# each just before its run (BENCH_8B_REMOVE=1: deleted after it, so the
# disk holds one at a time); BENCH_ONLY='dream-7b|llada-moe-7b' runs only
# those. The whole run with its checkpoints took 47 min on 2 AVX2 cores
# shared with other jobs (load 12–18; docs/performance.md).
bench-8b: build
	./scripts/bench.sh 8b

# bench-block compares llada-tiny-block with llada-tiny on the suites and
# times the exact block cache + store against no cache on shared system
# messages, four-turn conversations and WildChat-style chats, into
# bench-out/block/.
bench-block:
	./scripts/bench-block.sh

# serve-block sends bench-block's shared-prefix and four-turn workloads
# through dlmcache serve with dlmcache loadtest, none against the exact
# block cache, a fresh server per method and client count, into
# bench-out/served/ (about a minute on 2 cores).
serve-block:
	./scripts/serve-block.sh

# results reruns every measurement behind docs/results.md and docs/profiling.md
# into results-out/ (≈ 12 min on 2 cores).
results: build
	./scripts/results.sh

# docs regenerates the command reference (docs/cli/, one page per command)
# from the cobra tree; TestCLIReferenceIsCurrent fails when it is stale.
docs:
	$(GO) run ./cmd/dlmcache gen-docs --dir docs/cli

fuzz: deps
	$(GO) test ./model/safetensors -run '^$$' -fuzz FuzzParseHeader -fuzztime 60s
	$(GO) test ./model/tokenizer -run '^$$' -fuzz FuzzWordPatterns -fuzztime 60s

clean:
	rm -rf bin

# cuda-deps installs Debian 12's CUDA 11.8 headers and libraries (cuda.h,
# nvrtc, cuBLAS; package nvidia-cuda-dev from the non-free component, about
# 1.5 GB to download, 5 GB installed) when cuda.h is missing, enabling
# non-free through a sources file of its own (idempotent). The mirrors are the
# machine's own: scripts/apt-non-free.sh copies the URIs, suites and keyring of
# every apt source that has the main component, with contrib and non-free.
CUDA_SOURCES := /etc/apt/sources.list.d/dlmcache-non-free.sources
cuda-deps: deps
	@if ! [ -e /usr/include/cuda.h ] || ! [ -e /usr/include/nvrtc.h ] || ! [ -e /usr/include/cublas_v2.h ]; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		if ! grep -rqs 'non-free' /etc/apt/sources.list /etc/apt/sources.list.d/ || ! apt-cache policy nvidia-cuda-dev 2>/dev/null | grep -q 'Candidate: [0-9]'; then \
			echo "enabling Debian's non-free component in $(CUDA_SOURCES)"; \
			sources=$$(bash scripts/apt-non-free.sh $(CUDA_SOURCES)) || exit 1; \
			printf '%s\n' "$$sources" | $$SUDO tee $(CUDA_SOURCES) >/dev/null; \
		fi; \
		echo "installing nvidia-cuda-dev (CUDA 11.8; takes a few minutes)"; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nvidia-cuda-dev >/dev/null; \
	fi

# cuda-check: vet and build the cuda tag and compile every kernel with NVRTC
# for compute_80 and compute_90. Needs no GPU.
cuda-check: cuda-deps
	$(GO) vet -tags cuda ./...
	$(GO) build -tags cuda ./...
	$(GO) test -count=1 -tags nvrtc ./cuda/kernels/

# gpu-test: the CUDA backend against the CPU backend; needs an NVIDIA GPU
# (compute capability 8.0 or later) and its driver.
gpu-test: cuda-deps
	$(GO) test -count=1 -tags 'cuda gpu nvrtc' ./cuda/...

# gpu-bundle: gpu-test and the Forward8B benchmark as binaries, for a GPU
# machine with NVIDIA's CUDA CUDA_MAJOR libraries and no Go toolchain: copy
# the repository and $(GPU_BUNDLE) there and run $(GPU_BUNDLE)/run.sh from the
# repository root (scripts/gpu-bundle.sh says how it links).
GPU_BUNDLE ?= bin/gpu-bundle
CUDA_MAJOR ?= 13
gpu-bundle: cuda-deps
	bash scripts/gpu-bundle.sh $(GPU_BUNDLE) $(CUDA_MAJOR)

# ggufpy-check converts the bundled model to GGUF (F32, F16, BF16, Q8_0, Q4_0),
# reads the files with llama.cpp's gguf-py and checks them against what
# llama.cpp's converter writes, byte for byte (tools/ggufpy/check_convert.py).
# GGUF_PY is llama.cpp's gguf-py directory; gguf-py is not a dependency of
# make test, which reads a committed file gguf-py wrote instead
# (model/testdata/ggufpy).
# PYTHON needs numpy and PyTorch (tools/pyllada): Debian's python3-torch.
PYTHON    ?= /usr/bin/python3
.PHONY: ggufpy-check
ggufpy-check: build
	@if [ -z "$(GGUF_PY)" ]; then echo "ggufpy-check: set GGUF_PY to the gguf-py directory of a llama.cpp checkout"; exit 2; fi
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	for t in f32 f16 bf16 q8_0 q4_0; do $(BIN) convert llada-tiny $$d/llada-tiny-$$t.gguf --outtype $$t >/dev/null || exit 1; done; \
	$(PYTHON) tools/ggufpy/check_convert.py $(GGUF_PY) models/llada-tiny $$d/*.gguf

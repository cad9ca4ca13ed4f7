# What scripts/bench-llamacpp.sh and scripts/bench-llamacpp-serve.sh share,
# sourced by both once they have set BENCH (the make target, for messages)
# and OUT (their output directory): the checks of the llama.cpp tree
# LLAMACPP, its build to dlmcache's ISA class (DLMCACHE_CPU_ISA), dlmcache's
# binary (make's BIN, else built into OUT), the GGUF files under
# DLMCACHE_BENCH_DIR and the processor's name.
LLAMACPP=${LLAMACPP:?set LLAMACPP to a llama.cpp source tree: make $BENCH LLAMACPP=DIR}
[ -e "$LLAMACPP/examples/diffusion/diffusion-cli.cpp" ] || {
	echo "$BENCH: $LLAMACPP has no examples/diffusion/diffusion-cli.cpp: a llama.cpp tree from July 2025 or later is needed" >&2
	exit 2
}
command -v cmake >/dev/null || { echo "$BENCH: cmake is missing (apt-get install cmake)" >&2; exit 2; }
BENCH_DIR=${DLMCACHE_BENCH_DIR:-${TMPDIR:-/tmp}/dlmcache-bench}
ISA=${DLMCACHE_CPU_ISA:-native}
mkdir -p "$OUT" "$BENCH_DIR"

# llama.cpp, built to the same ISA class: natively, or, under
# DLMCACHE_CPU_ISA=avx2, capped as dlmcache's kernels are (GGML_NATIVE=OFF,
# AVX2/FMA/F16C on, AVX-512 off), into LLAMACPP/build-dlmcache-ISA; sets
# LLAMA (llama-diffusion-cli) and QUANTIZE (llama-quantize).
build=$LLAMACPP/build-dlmcache-$ISA
case "$ISA" in
native) flags=(-DGGML_NATIVE=ON) ;;
avx2) flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF) ;;
*) echo "$BENCH: DLMCACHE_CPU_ISA=$ISA: only native and avx2 have a llama.cpp build to match" >&2; exit 2 ;;
esac
if ! [ -x "$build/bin/llama-diffusion-cli" ] || ! [ -x "$build/bin/llama-quantize" ]; then
	echo "== building llama.cpp ($ISA) in $build" >&2
	cmake -S "$LLAMACPP" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF "${flags[@]}" >&2
	cmake --build "$build" -j "$(nproc)" --target llama-diffusion-cli llama-quantize >&2
fi
LLAMA=$build/bin/llama-diffusion-cli
QUANTIZE=$build/bin/llama-quantize
# dlmcache: make's build (BIN), else built here.
DLM=${BIN:-}
if [ -z "$DLM" ]; then
	go build -o "$OUT/dlmcache" ./cmd/dlmcache
	DLM=$OUT/dlmcache
fi

# Under the AVX2 cap OpenBLAS's kernels are capped too, to Haswell's (where
# OPENBLAS_CORETYPE is not set already): the cap stands for an AVX2-only
# processor, where OpenBLAS picks those, and DLMCACHE_CPU_ISA cannot reach
# a library that chose its kernel when it was loaded. BLAS names the one
# dlmcache runs.
if [ "$ISA" = avx2 ] && [ -z "${OPENBLAS_CORETYPE:-}" ]; then
	export OPENBLAS_CORETYPE=Haswell
fi
BLAS=$("$DLM" version | sed -n 's/^blas *//p')

# The files: F32 from dlmcache convert, the rest from llama-quantize.
gguf() { # shape format → path
	local shape=$1 fmt=$2 f32=$BENCH_DIR/$1-f32.gguf
	if ! [ -e "$f32" ]; then
		local src=$shape
		if [ "$shape" != llada-tiny ]; then
			go run ./tools/benchckpt -out "$BENCH_DIR" -shape "$shape" >&2
			src=$BENCH_DIR/$shape
		fi
		"$DLM" convert "$src" "$f32" --outtype f32 >&2
	fi
	local out=$BENCH_DIR/$shape-$fmt.gguf
	if [ "$fmt" != f32 ] && ! [ -e "$out" ]; then
		"$QUANTIZE" "$f32" "$out" "${fmt^^}" >&2
	fi
	[ "$fmt" = f32 ] && out=$f32
	echo "$out"
}

# The processor: its model name, and its family and model numbers.
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpu_family=$(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpu_model=$(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -n 1)

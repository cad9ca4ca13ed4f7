#!/bin/bash
# gpu-bundle.sh DIR [CUDA_MAJOR]
#
# Builds the GPU checks (make gpu-test's test binaries, which also hold the
# Forward8B benchmark) into DIR for an NVIDIA machine that has a driver and
# NVIDIA's CUDA libraries but no Go toolchain, e.g. a rented GPU box with
# CUDA 13 where Debian's CUDA 11.8 libraries this repository builds against
# are absent.
#
# The binaries are compiled here against Debian's CUDA 11.8 headers (make
# cuda-deps). They link cuBLAS and NVRTC through small stand-in libraries
# whose sonames are libcublas.so.CUDA_MAJOR and libnvrtc.so.CUDA_MAJOR (13 by
# default), so on the GPU machine the dynamic loader binds the functions to
# that machine's own libraries (the entry points used are stable across
# CUDA 11–13; the driver API comes from libcuda.so.1 as usual). OpenBLAS is
# linked statically, so the CPU reference side needs no shared library
# either. Run DIR/run.sh from the repository root on the GPU machine: it
# finds the CUDA libraries, runs the kernel compile test, the CPU-vs-GPU
# comparison and the LLaDA-8B-shape forward benchmark, and writes logs to
# ${OUT:-DIR}.
set -euo pipefail
dir=${1:?usage: gpu-bundle.sh DIR [CUDA_MAJOR]}
major=${2:-13}
go=${GO:-go}
gcclib=$(dirname "$(gcc -print-libgcc-file-name)")
for f in /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a "$gcclib/libgfortran.a" "$gcclib/libquadmath.a" /usr/include/cuda.h; do
	[ -e "$f" ] || { echo "gpu-bundle: $f is missing (make cuda-deps; apt-get install libopenblas-dev libgfortran-12-dev)" >&2; exit 1; }
done
mkdir -p "$dir"
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
tags='cuda gpu nvrtc'
# The symbols the binaries take from cuBLAS and NVRTC, read off a normal build.
$go test -c -tags "$tags" -o "$stub/probe.test" ./cuda/
for lib in cublas nvrtc; do
	nm -D --undefined-only "$stub/probe.test" | awk '{print $2}' | sed 's/@.*//' | grep "^$lib" | sort -u |
		sed 's/.*/void &(void) {}/' >"$stub/$lib.c"
	gcc -shared -fPIC -o "$stub/lib$lib.so" -Wl,-soname,"lib$lib.so.$major" "$stub/$lib.c"
done
ln -s /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a "$gcclib/libgfortran.a" "$gcclib/libquadmath.a" "$stub/"
export CGO_LDFLAGS="-L$stub -lgfortran -lquadmath -lm -lpthread"
$go test -c -tags "$tags" -ldflags=-s -o "$dir/cuda.test" ./cuda/
$go test -c -tags "$tags" -ldflags=-s -o "$dir/kernels.test" ./cuda/kernels/
cat >"$dir/run.sh" <<RUN
#!/bin/bash
# Written by scripts/gpu-bundle.sh; run from the repository root.
set -o pipefail
bundle=\$(cd "\$(dirname "\$0")" && pwd)
out=\${OUT:-\$bundle}
find_lib() { for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \$(find /opt /usr -name "\$1" -printf '%h\n' 2>/dev/null | head -3); do [ -e "\$d/\$1" ] && { echo "\$d"; return; }; done; echo "gpu-bundle: \$1 not found" >&2; exit 1; }
cublas=\$(find_lib libcublas.so.$major) && nvrtc=\$(find_lib libnvrtc.so.$major) || exit 1
export LD_LIBRARY_PATH=\$cublas:\$nvrtc\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
(cd cuda/kernels && "\$bundle/kernels.test" -test.v -test.count=1) 2>&1 | tee "\$out/kernels.log"
(cd cuda && "\$bundle/cuda.test" -test.v -test.count=1) 2>&1 | tee "\$out/gpu-test.log"
(cd cuda && "\$bundle/cuda.test" -test.run '^\$' -test.bench Forward8B -test.benchtime 10x) 2>&1 | tee "\$out/bench.log"
RUN
chmod +x "$dir/run.sh"
echo "gpu-bundle: $dir/cuda.test, $dir/kernels.test, $dir/run.sh (cuBLAS/NVRTC soname major $major)"

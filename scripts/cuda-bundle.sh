#!/usr/bin/env bash
# Builds, on this machine (no GPU needed), what benchmarks/gpu/device_check.sh runs on a GPU
# machine that has the CUDA toolkit but none of our Debian packages: build-cuda/ (Release, the
# CUDA backend as sm_90a machine code only unless SITSRT_CUDA_ARCH says otherwise: no PTX, which
# for an arch-specific 90a target could not JIT to another GPU anyway and doubled the device code
# each binary carries) and build/cuda-bundle/
#   bin/     the [cuda] test binaries, bench_cuda and the sitsrt CLI, stripped
#   lib/     every shared library they load except the GPU driver's, glibc's loader included, so
#            they run through lib/ld-linux-x86-64.so.2 whatever the other machine's libraries
#   shared/  the stories260K models the tests compare on (from ../shared)
# The bundle travels with the working tree (the device tool's carry: build/cuda-bundle, <= 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${SITSRT_CUDA_ARCH:-90a-real}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DSITSRT_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DSITSRT_BUILD_PYTHON=OFF -DSITSRT_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
cmake --build build-cuda -j "$(nproc)" --target cuda_formats_test cuda_backend_test cuda_backend_model_test bench_cuda sitsrt_cli
out=build/cuda-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/shared/models"
cp build-cuda/tests/cuda_formats_test build-cuda/tests/cuda_backend_test build-cuda/tests/cuda_backend_model_test \
  build-cuda/bin/bench_cuda build-cuda/bin/sitsrt "$out/bin/"
strip "$out"/bin/*
# Every library the binaries load (libcuda comes from the GPU machine's driver, cuBLASLt from its
# toolkit: bench_cuda finds it under /usr/local/cuda there).
ldd "$out"/bin/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$lib" in
    *libcuda.so* | *libcublas*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
cp -L /lib64/ld-linux-x86-64.so.2 "$out/lib/"
for m in stories260K.gguf stories260K-F16.gguf stories260K-Q8_0.gguf stories260K-Q4_0.gguf; do
  [ -f "../shared/models/$m" ] && cp "../shared/models/$m" "$out/shared/models/"
done
du -sh "$out"
size=$(du -sm "$out" | cut -f1)
[ "$size" -le 60 ] || { echo "cuda-bundle: $size MiB is over the 60 MiB the device tool's carry leaves room for" >&2; exit 1; }

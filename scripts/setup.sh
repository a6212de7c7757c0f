#!/usr/bin/env bash
# Installs what building and testing kiln needs on Debian 12 (run as root, or with sudo available).
# The CUDA toolkit, if wanted, is expected at /usr/local/cuda; without it kiln builds CPU-only.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
packages=(
  cmake ninja-build ccache g++ pkg-config
  libeigen3-dev           # CPU kernels (and GEMM when no BLAS is found)
  libopenblas-openmp-dev  # GEMM; the OpenMP build shares kiln's thread pool
  libgtest-dev            # tests
  libpng-dev              # tests: the reference decoder for the PNGs kiln writes (optional)
  libopenmpi-dev openmpi-bin  # the "mpi" process group (optional: built when found) and its mpirun tests
  libgloo-dev             # the "gloo" process group (optional: built when found)
  zlib1g-dev              # gzipped IDX files
  dataset-fashion-mnist   # the main job's data, in /usr/share/datasets/fashion-mnist
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all packages present"

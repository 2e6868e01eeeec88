#!/usr/bin/env bash
# Builds and installs Horovod 0.28.1 (its last release) into the project's venv, with TensorFlow and Gloo, and in
# GPU mode (GPU=1) with NCCL for the GPU collectives.
#
# Why a script and not `pip install horovod`: Horovod 0.28.1 as published does not build against
# TensorFlow 2.21. Its XLA custom-call file horovod/tensorflow/xla_mpi_ops.cc uses XLA headers/APIs that
# TF 2.21 no longer ships, and the compile fails. That file only implements the optional XLA path
# (HOROVOD_ENABLE_XLA_OPS); the ordinary TF ops (allreduce, broadcast, DistributedGradientTape, ...) do not
# need it. So we download the sdist from PyPI, remove exactly that one source file from
# horovod/tensorflow/CMakeLists.txt, and build. A GPU build needs one more change (below: AsGpuStreamValue, a
# function TF 2.21 no longer exports). Nothing else is changed.
#
# GPU=0 (default): Gloo; MPI is picked up by Horovod's own build when present. Collectives of GPU tensors then
#   go through host memory.
# GPU=1: also HOROVOD_GPU_OPERATIONS=NCCL. Horovod only builds its NCCL operations when asked, and they need
#   - NCCL: the nvidia-nccl-cu12 wheel of requirements-gpu.txt (the one TensorFlow loads), or $HOROVOD_NCCL_HOME;
#   - a CUDA toolkit with nvcc of TensorFlow's CUDA major (12) for Horovod's CUDA kernels: $HOROVOD_CUDA_HOME,
#     $CUDA_HOME, nvcc on PATH, /usr/local/cuda, /usr/local/cuda-12*, the first of the right major. The pip wheels
#     hold no nvcc, so this is the one GPU part that pip cannot install.
#   The build is for TensorFlow's compute capabilities (HOROVOD_BUILD_CUDA_CC_LIST), and must report nccl_built().
# Needs cmake and a C++17 compiler. Takes a few minutes on 2 cores.
#
#   bash scripts/install_horovod.sh                 # into ./.venv (or $VENV)
#   GPU=1 bash scripts/install_horovod.sh           # with NCCL
#   DRY_RUN=1 GPU=1 bash scripts/install_horovod.sh # the plan: every step and the build environment, runs nothing
#   USE_SYSTEM_PYTHON=1 bash scripts/install_horovod.sh   # into the current interpreter (Docker image)
#   PY=/usr/bin/python3 bash scripts/install_horovod.sh
# scripts/install.sh runs it unless SKIP_HOROVOD=1. An existing working Horovod 0.28.1 (with NCCL in GPU mode) is
# kept.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${USE_SYSTEM_PYTHON:-0}" = "1" ]; then
  PY=${PY:-${PYTHON:-python3}}
else
  VENV=${VENV:-.venv}
  PY=${PY:-$VENV/bin/python}
fi
GPU=${GPU:-0}
DRY=${DRY_RUN:-0}
case "$GPU" in 0|1) ;; *) echo "install_horovod.sh: GPU must be 0 or 1, not '$GPU'" >&2; exit 2 ;; esac
HOROVOD_VERSION=0.28.1

run() {  # prints a step, then runs it unless DRY_RUN=1
  printf '+ %s\n' "$*"
  [ "$DRY" = 1 ] || "$@"
}

if [ "$DRY" != 1 ] && "$PY" -c "
import horovod, horovod.tensorflow as hvd
assert horovod.__version__ == '$HOROVOD_VERSION' and ('$GPU' == '0' or hvd.nccl_built())" 2>/dev/null; then
  echo "install_horovod.sh: horovod $HOROVOD_VERSION already installed$([ "$GPU" = 1 ] && echo ' with NCCL')"
  exit 0
fi
if [ "$DRY" = 1 ]; then WORK="<tmpdir>"; else WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT; fi
SRC="$WORK/horovod-$HOROVOD_VERSION"
BUILD_ENV=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1
           "MAKEFLAGS=-j${HOROVOD_BUILD_JOBS:-$(nproc)}")
PROBLEM=""

if [ "$GPU" = 1 ]; then
  CUDA_MAJOR=$(sed -n 's/^nvidia-cuda-runtime-cu\([0-9][0-9]*\)==.*/\1/p' requirements-gpu.txt)
  [ -n "$CUDA_MAJOR" ] || { echo "install_horovod.sh: no nvidia-cuda-runtime-cuNN pin in requirements-gpu.txt" >&2; exit 1; }
  # The CUDA toolkit: an explicit HOROVOD_CUDA_HOME / CUDA_HOME is taken alone; otherwise the first nvcc of
  # TensorFlow's CUDA major among the usual places.
  if [ -n "${HOROVOD_CUDA_HOME:-}${CUDA_HOME:-}" ]; then
    candidates=("${HOROVOD_CUDA_HOME:-$CUDA_HOME}/bin/nvcc")
  else
    candidates=()
    command -v nvcc >/dev/null 2>&1 && candidates+=("$(command -v nvcc)")
    candidates+=(/usr/local/cuda/bin/nvcc /usr/local/cuda-"$CUDA_MAJOR"*/bin/nvcc)
  fi
  CUDA_DIR="" found=""
  for nvcc in "${candidates[@]}"; do
    [ -x "$nvcc" ] || continue
    # A toolkit is the folder above a real nvcc, with the CUDA headers (a wrapper script elsewhere is not one).
    home=$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)
    [ -f "$home/include/cuda_runtime.h" ] || continue
    version=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1)
    case "$found" in *"($home)"*) continue ;; esac
    found="$found, CUDA ${version:-?} ($home)"
    if [ "${version%%.*}" = "$CUDA_MAJOR" ]; then
      CUDA_DIR=$home
      break
    fi
  done
  if [ -z "$CUDA_DIR" ]; then
    CUDA_DIR="<missing:CUDA-$CUDA_MAJOR-toolkit>"
    [ -n "$found" ] && found=${found#, } || found="no toolkit (nvcc beside include/cuda_runtime.h) in ${candidates[*]}"
    PROBLEM="GPU=1 builds Horovod's NCCL operations with the nvcc of CUDA $CUDA_MAJOR (TensorFlow's CUDA major), found $found. Install a CUDA $CUDA_MAJOR toolkit (NVIDIA's cuda-nvcc-$CUDA_MAJOR-x and cuda-cudart-dev-$CUDA_MAJOR-x packages, or an nvidia/cuda:$CUDA_MAJOR.x-devel image) and set CUDA_HOME, or use SKIP_HOROVOD=1 (the tf.distribute engines need no Horovod)"
  fi
  if [ "${CHECK_ONLY:-0}" = 1 ]; then  # install.sh asks before it downloads the GPU set (the NCCL wheel is not in yet)
    [ -z "$PROBLEM" ] || { echo "install_horovod.sh: $PROBLEM" >&2; exit 1; }
    exit 0
  fi
  # NCCL: a system NCCL named by HOROVOD_NCCL_HOME, else the wheel TensorFlow loads. The wheel has only
  # libnccl.so.2, which CMake's find_library does not look for: a link named libnccl.so points at it, and the
  # rpath makes the built library load that same file at run time without LD_LIBRARY_PATH.
  if [ -n "${HOROVOD_NCCL_HOME:-}" ]; then
    BUILD_ENV+=("HOROVOD_NCCL_HOME=$HOROVOD_NCCL_HOME" HOROVOD_NCCL_LINK=SHARED)
  else
    # (A plan made before the venv exists names the site-packages folder the venv will have.)
    SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null) \
      || SITE="$(dirname "$(dirname "$PY")")/lib/$(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')/site-packages"
    NCCL_DIR="$SITE/nvidia/nccl"
    if [ "$DRY" != 1 ] && [ -z "$PROBLEM" ] && ! [ -f "$NCCL_DIR/include/nccl.h" -a -f "$NCCL_DIR/lib/libnccl.so.2" ]; then
      PROBLEM="no NCCL in $NCCL_DIR: GPU=1 bash scripts/install.sh installs the nvidia-nccl-cu$CUDA_MAJOR wheel of requirements-gpu.txt first (or set HOROVOD_NCCL_HOME)"
    fi
    BUILD_ENV+=("HOROVOD_NCCL_INCLUDE=$NCCL_DIR/include" "HOROVOD_NCCL_LIB=$WORK/nccl-lib" HOROVOD_NCCL_LINK=SHARED
                "LDFLAGS=-Wl,-rpath,$NCCL_DIR/lib")
  fi
  # TensorFlow 2.21's compute capabilities (tf.sysconfig.get_build_info(); scripts/gpu_stack.py checks them).
  BUILD_ENV+=(HOROVOD_GPU_OPERATIONS=NCCL "HOROVOD_CUDA_HOME=$CUDA_DIR"
              "HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST:-60,70,80,89,90}")
fi
if [ -n "$PROBLEM" ] && [ "$DRY" != 1 ]; then
  echo "install_horovod.sh: $PROBLEM" >&2
  exit 1
fi

run "$PY" -m pip download --quiet --no-deps --no-binary :all: --dest "$WORK" "horovod==$HOROVOD_VERSION"
run tar -xzf "$WORK/horovod-$HOROVOD_VERSION.tar.gz" -C "$WORK"
# The change every build needs: drop xla_mpi_ops.cc from the TensorFlow op library's sources.
CMAKELISTS="$SRC/horovod/tensorflow/CMakeLists.txt"
echo "+ remove the xla_mpi_ops.cc line from $CMAKELISTS"
if [ "$DRY" != 1 ]; then
  "$PY" - "$CMAKELISTS" <<'PYEOF'
import sys
path = sys.argv[1]
lines = open(path).read().splitlines(keepends=True)
kept = [line for line in lines if "xla_mpi_ops.cc" not in line]
if len(kept) != len(lines) - 1:
    sys.exit("install_horovod.sh: expected exactly one xla_mpi_ops.cc line in " + path)
open(path, "w").write("".join(kept))
PYEOF
  grep -q xla_mpi_ops "$CMAKELISTS" && { echo "install_horovod.sh: xla_mpi_ops.cc still listed" >&2; exit 1; }
fi
if [ "$GPU" = 1 ]; then
  # The GPU build's one change: Horovod's TF ops get the CUDA stream of a TF stream from
  # stream_executor::gpu::AsGpuStreamValue, which TF 2.21 no longer exports (the library would fail to load with
  # "undefined symbol ... AsGpuStreamValue"). TF 2.21's Stream hands it out itself (platform_specific_handle()),
  # so the declaration becomes a definition on that, after stream.h; the four call sites stay as they are.
  MPI_OPS="$SRC/horovod/tensorflow/mpi_ops.cc"
  echo "+ define AsGpuStreamValue through Stream::platform_specific_handle() in $MPI_OPS"
  if [ "$DRY" != 1 ]; then
    "$PY" - "$MPI_OPS" <<'PYEOF'
import sys
path = sys.argv[1]
source = open(path).read()
declaration = """// Forward declaration of AsGpuStreamValue
namespace stream_executor {
namespace gpu {
GpuStreamHandle AsGpuStreamValue(Stream* stream);
} // namespace stream_executor
} // namespace gpu
"""
include_end = "#endif // TENSORFLOW_VERSION >= 2011000000\n#endif // HAVE_GPU\n"
definition = """#endif // TENSORFLOW_VERSION >= 2011000000
namespace stream_executor {
namespace gpu {
inline GpuStreamHandle AsGpuStreamValue(Stream* stream) {
  return static_cast<GpuStreamHandle>(stream->platform_specific_handle().stream);
}
} // namespace gpu
} // namespace stream_executor
#endif // HAVE_GPU
"""
if source.count(declaration) != 1 or source.count(include_end) != 1:
    sys.exit("install_horovod.sh: mpi_ops.cc is not the 0.28.1 source this change expects: " + path)
open(path, "w").write(source.replace(declaration, "").replace(include_end, definition))
PYEOF
  fi
fi

# Build dependencies the sdist's setup.py needs outside an isolated build.
run "$PY" -m pip install --quiet -r requirements-horovod.txt
if [ "$GPU" = 1 ] && [ -z "${HOROVOD_NCCL_HOME:-}" ]; then
  run mkdir -p "$WORK/nccl-lib"
  run ln -sf "$NCCL_DIR/lib/libnccl.so.2" "$WORK/nccl-lib/libnccl.so"
fi
run env "${BUILD_ENV[@]}" "$PY" -m pip install --no-build-isolation --no-cache-dir --no-deps "$SRC"
run "$PY" -c "import horovod.tensorflow as hvd; hvd.init(); print('horovod built with gloo', hvd.gloo_built(), 'mpi', hvd.mpi_built(), 'nccl', bool(hvd.nccl_built())); assert hvd.nccl_built() or not $GPU, 'GPU=1 but Horovod was built without NCCL'"
if [ -n "$PROBLEM" ]; then
  echo "install_horovod.sh: this plan would fail: $PROBLEM" >&2
  exit 1
fi
[ "$DRY" = 1 ] && echo "install_horovod.sh: plan done" || echo "install_horovod.sh: done"

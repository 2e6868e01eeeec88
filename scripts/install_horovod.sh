#!/usr/bin/env bash
# Builds and installs Horovod 0.28.1 (its last release) into the project's venv, with TensorFlow and Gloo.
#
# Why a script and not `pip install horovod`: Horovod 0.28.1 as published does not build against
# TensorFlow 2.21. Its XLA custom-call file horovod/tensorflow/xla_mpi_ops.cc uses XLA headers/APIs that
# TF 2.21 no longer ships, and the compile fails. That file only implements the optional XLA path
# (HOROVOD_ENABLE_XLA_OPS); the ordinary TF ops (allreduce, broadcast, DistributedGradientTape, ...) do not
# need it. So we download the sdist from PyPI, remove exactly that one source file from
# horovod/tensorflow/CMakeLists.txt, and build. Nothing else is changed.
#
# Builds with Gloo always; MPI and NCCL are picked up by Horovod's own build when present.
# Needs cmake and a C++17 compiler. Takes a few minutes on 2 cores.
#
#   bash scripts/install_horovod.sh                 # into ./.venv (or $VENV)
#   USE_SYSTEM_PYTHON=1 bash scripts/install_horovod.sh   # into the current interpreter (Docker image)
#   PY=/usr/bin/python3 bash scripts/install_horovod.sh
# scripts/install.sh runs it unless SKIP_HOROVOD=1. An existing working Horovod 0.28.1 is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${USE_SYSTEM_PYTHON:-0}" = "1" ]; then
  PY=${PY:-${PYTHON:-python3}}
else
  VENV=${VENV:-.venv}
  PY=${PY:-$VENV/bin/python}
fi
HOROVOD_VERSION=0.28.1
if "$PY" -c "import horovod, horovod.tensorflow; assert horovod.__version__ == '$HOROVOD_VERSION'" 2>/dev/null; then
  echo "install_horovod.sh: horovod $HOROVOD_VERSION already installed"
  exit 0
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$PY" -m pip download --quiet --no-deps --no-binary :all: --dest "$WORK" "horovod==$HOROVOD_VERSION"
tar -xzf "$WORK/horovod-$HOROVOD_VERSION.tar.gz" -C "$WORK"
SRC="$WORK/horovod-$HOROVOD_VERSION"
CMAKELISTS="$SRC/horovod/tensorflow/CMakeLists.txt"

# The one change: drop xla_mpi_ops.cc from the TensorFlow op library's sources.
"$PY" - "$CMAKELISTS" <<'PYEOF'
import sys
path = sys.argv[1]
lines = open(path).read().splitlines(keepends=True)
kept = [line for line in lines if "xla_mpi_ops.cc" not in line]
if len(kept) != len(lines) - 1:
    sys.exit("install_horovod.sh: expected exactly one xla_mpi_ops.cc line in " + path)
open(path, "w").write("".join(kept))
print("install_horovod.sh: removed the xla_mpi_ops.cc line from", path)
PYEOF
grep -q xla_mpi_ops "$CMAKELISTS" && { echo "install_horovod.sh: xla_mpi_ops.cc still listed" >&2; exit 1; }

# Build dependencies the sdist's setup.py needs outside an isolated build.
"$PY" -m pip install --quiet -r requirements-horovod.txt
export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1
export MAKEFLAGS="-j${HOROVOD_BUILD_JOBS:-$(nproc)}"
"$PY" -m pip install --no-build-isolation --no-cache-dir --no-deps "$SRC"
"$PY" -c "import horovod.tensorflow as hvd; hvd.init(); print('horovod', hvd.__version__ if hasattr(hvd, '__version__') else '', 'gloo built:', hvd.gloo_built(), 'mpi built:', hvd.mpi_built(), 'nccl built:', hvd.nccl_built())"
echo "install_horovod.sh: done"

#!/usr/bin/env bash
# The one install script shared by the README, .ci/run and the Dockerfile.
# Creates ./.venv (or $VENV) and installs the pinned requirements:
#   requirements.txt       runtime (TensorFlow 2.21, Keras 3, tf2onnx, ONNX Runtime, ...)
#   requirements-dev.txt   tests
#   requirements-dali.txt  NVIDIA DALI and its TensorFlow plugin (the plugin compiles against the installed TF);
#                          skip with SKIP_DALI=1
#   scripts/install_horovod.sh  Horovod 0.28.1 built from source with one fix (several minutes); SKIP_HOROVOD=1
# USE_SYSTEM_PYTHON=1 installs into the current interpreter instead of a venv (the Docker image does this).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ "${USE_SYSTEM_PYTHON:-0}" = "1" ]; then
  PY="$PYTHON"
else
  VENV=${VENV:-.venv}
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  PY="$VENV/bin/python"
fi
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet -r requirements.txt -r requirements-dev.txt
if [ "${SKIP_DALI:-0}" != "1" ]; then
  # The TF plugin is compiled against the TensorFlow just installed: DALI first, then the plugin without
  # build isolation (a single `pip install -r requirements-dali.txt` fails; see that file).
  "$PY" -m pip install --quiet "$(grep -E '^nvidia-dali-cuda' requirements-dali.txt)"
  "$PY" -m pip install --quiet --no-build-isolation -r requirements-dali.txt
fi
if [ "${SKIP_HOROVOD:-0}" != "1" ]; then
  PY="$PY" bash scripts/install_horovod.sh
fi
echo "install.sh: done ($("$PY" -c 'import sys; print(sys.prefix)'))"

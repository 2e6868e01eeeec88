#!/usr/bin/env bash
# The one install script shared by the README, .ci/run and the Dockerfile.
# Creates ./.venv (or $VENV) and installs the pinned requirements:
#   requirements.txt       runtime shared by both modes (TensorFlow 2.21, Keras 3, tf2onnx, ...)
#   requirements-cpu.txt   CPU mode: onnxruntime
#   requirements-gpu.txt   GPU mode: tensorflow[and-cuda] with its CUDA 12 / cuDNN 9 / NCCL wheels, onnxruntime-gpu
#   requirements-dev.txt   tests
#   requirements-dali.txt  NVIDIA DALI and its TensorFlow plugin (CUDA 12 wheels in both modes; the plugin compiles
#                          against the installed TF); skip with SKIP_DALI=1
#   scripts/install_horovod.sh  Horovod 0.28.1 built from source (several minutes; with NCCL in GPU mode);
#                          skip with SKIP_HOROVOD=1
# GPU=1 / GPU=0 choose the mode; without GPU it is GPU mode when `nvidia-smi -L` lists a GPU.
# DRY_RUN=1 prints every step and the environment it runs with, and runs nothing.
# USE_SYSTEM_PYTHON=1 installs into the current interpreter instead of a venv (the Docker image does this).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DRY=${DRY_RUN:-0}

if [ -z "${GPU:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    GPU=1 reason="nvidia-smi lists a GPU"
  else
    GPU=0 reason="no GPU listed by nvidia-smi"
  fi
else
  reason="GPU=$GPU given"
fi
case "$GPU" in
  0) MODE=cpu OTHER_BUILD=onnxruntime-gpu ;;
  1) MODE=gpu OTHER_BUILD=onnxruntime ;;
  *) echo "install.sh: GPU must be 0 or 1, not '$GPU'" >&2; exit 2 ;;
esac
note=""
[ "$DRY" = 1 ] && note="; DRY_RUN=1: the plan, nothing runs"
echo "install.sh: $MODE mode ($reason)$note"

run() {  # prints a step, then runs it unless DRY_RUN=1
  printf '+ %s\n' "$*"
  [ "$DRY" = 1 ] || "$@"
}

if [ "${USE_SYSTEM_PYTHON:-0}" = "1" ]; then
  PY="$PYTHON"
else
  VENV=${VENV:-.venv}
  [ -x "$VENV/bin/python" ] || run "$PYTHON" -m venv "$VENV"
  PY="$VENV/bin/python"
fi
if [ "$GPU" = 1 ] && [ "${SKIP_HOROVOD:-0}" != "1" ] && [ "$DRY" != 1 ]; then
  # Horovod's GPU build needs a CUDA 12 toolkit, which pip cannot install: asked before the GPU set's downloads
  # (several GB), not after them.
  PY="$PY" GPU=1 CHECK_ONLY=1 bash scripts/install_horovod.sh || {
    echo "install.sh: stopped before downloading anything (the line above says why)" >&2; exit 1; }
fi
run "$PY" -m pip install --quiet --upgrade pip
# onnxruntime and onnxruntime-gpu provide the same module: a venv installed in the other mode loses that build first.
if [ -x "$PY" ] && "$PY" -m pip show "$OTHER_BUILD" >/dev/null 2>&1; then
  run "$PY" -m pip uninstall --quiet -y "$OTHER_BUILD"
fi
run "$PY" -m pip install --quiet -r requirements.txt -r "requirements-$MODE.txt" -r requirements-dev.txt
if [ "${SKIP_DALI:-0}" != "1" ]; then
  # The TF plugin is compiled against the TensorFlow just installed: DALI first, then the plugin without
  # build isolation (a single `pip install -r requirements-dali.txt` fails; see that file).
  run "$PY" -m pip install --quiet "$(grep -E '^nvidia-dali-cuda' requirements-dali.txt)"
  run "$PY" -m pip install --quiet --no-build-isolation -r requirements-dali.txt
fi
if [ "${SKIP_HOROVOD:-0}" != "1" ]; then
  # The Horovod script prints its own steps and build environment (in GPU mode: NCCL and the CUDA toolkit).
  echo "+ bash scripts/install_horovod.sh   (GPU=$GPU)"
  PY="$PY" GPU="$GPU" DRY_RUN="$DRY" bash scripts/install_horovod.sh
fi
if [ "${USE_SYSTEM_PYTHON:-0}" != "1" ]; then
  # The venv's interpreter finds the repository's modules from any directory (`python -m dataprep.build_tfrecords`
  # run where the images are): a .pth file naming the repository, as an editable install writes.
  SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null ||
         echo "$VENV/lib/python$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages")
  echo "+ echo $PWD > $SITE/convnets_repository.pth"
  [ "$DRY" = 1 ] || echo "$PWD" > "$SITE/convnets_repository.pth"
fi
if [ "$DRY" = 1 ]; then
  echo "install.sh: plan done ($MODE mode)"
else
  echo "install.sh: done, $MODE mode ($("$PY" -c 'import sys; print(sys.prefix)'))"
fi

#!/usr/bin/env bash
# One command that checks every GPU code path on a machine with NVIDIA GPUs (docs/GPU.md), with short runs, and
# compares the throughput with the original's published figure for this GPU class
# (docs/ORIGINAL.md#published-results). Each check prints PASS / FAIL / SKIP, its img/s and the published figure;
# a report file keeps them. It starts with the environment (scripts/gpu_stack.py report: TF's CUDA/cuDNN build, the
# GPUs, Horovod's NCCL, DALI's and ONNX Runtime's CUDA), where CUDA majors that disagree count as a failed check.
# Exit status: 0 when no check failed, 1 otherwise (or without a GPU).
#
#   bash scripts/gpu_check.sh                  # synthetic data at 224 px
#   DATA_DIR=/data/tfrecords DALI_IDX_DIR=/data/dali_idx bash scripts/gpu_check.sh   # adds real data and DALI
#   DRY_RUN=1 bash scripts/gpu_check.sh        # prints the plan (every command), runs nothing
#
# Environment: PYTHON (default .venv/bin/python, else python3), STEPS (training steps per check, default 200),
# WORKDIR (default results/gpu_check), REPORT (default $WORKDIR/report.txt), NUM_GPUS (default: nvidia-smi -L).
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
STEPS=${STEPS:-200}
WORKDIR=${WORKDIR:-results/gpu_check}
REPORT=${REPORT:-$WORKDIR/report.txt}
DRY=${DRY_RUN:-0}
if [ -n "${NUM_GPUS:-}" ]; then
  GPUS=$NUM_GPUS
elif command -v nvidia-smi >/dev/null 2>&1; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
else
  GPUS=0
fi
GPU_NAME=$( (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name --format=csv,noheader -i 0) \
            2>/dev/null | head -n 1)

# The original's published single-GPU ResNet-50 figures (docs/ORIGINAL.md#published-results), img/s:
# training (XLA) FP32-or-TF32 / AMP at the recipes' batch, and inference at batch 32.
published() {  # published KIND -> a figure, or "n/a" for this GPU class
  local kind=$1 class=""
  case "$GPU_NAME" in
    *V100*) class=V100 ;; *A100*) class=A100 ;; *T4*) class=T4 ;;
  esac
  case "$class:$kind" in
    V100:train_fp32) echo 412 ;; V100:train_amp) echo 1270 ;;
    A100:train_fp32) echo 909 ;; A100:train_amp) echo 2375 ;;
    V100:infer_fp32) echo 1140 ;; V100:infer_amp) echo 2356 ;;
    A100:infer_fp32) echo 1602 ;; A100:infer_amp) echo 1974 ;;
    T4:infer_fp32) echo 415 ;; T4:infer_amp) echo 972 ;;
    *) echo n/a ;;
  esac
}

FAILED=0
if [ "$DRY" != 1 ]; then
  mkdir -p "$WORKDIR" "$(dirname "$REPORT")"
  : > "$REPORT"
fi
say() { echo "$*"; [ "$DRY" = 1 ] || echo "$*" >> "$REPORT"; }

# check NAME PUBLISHED_KIND COMMAND...: runs COMMAND (its output in $WORKDIR/NAME.log) and reports.
check() {
  local name=$1 kind=$2
  shift 2
  if [ "$DRY" = 1 ]; then
    printf '%-22s ' "$name"
    printf '%q ' "$@"
    printf '\n'
    return
  fi
  local log="$WORKDIR/$name.log" status figure
  "$@" > "$log" 2>&1
  status=$?
  figure=$(grep -Eo '(train|eval)_throughput : [0-9.]+|throughput : [0-9.]+' "$log" | tail -n 1 | grep -Eo '[0-9.]+$')
  if [ "$status" = 0 ]; then status=PASS; else status="FAIL (exit $status, see $log)"; fi
  say "$(printf '%-22s %-6s %10s img/s   published %s' "$name" "${status%% *}" "${figure:-?}" "$(published "$kind")")"
  if [ "${status%% *}" != PASS ]; then
    say "    $status"
    FAILED=$((FAILED + 1))
  fi
}
skip() { say "$(printf '%-22s SKIP   %s' "$1" "$2")"; }
fail() { say "$(printf '%-22s FAIL   %s' "$1" "$2")"; FAILED=$((FAILED + 1)); }

say "== environment"
if [ "$DRY" = 1 ]; then
  echo "(DRY_RUN=1: the plan; nothing runs)"
  echo "+ $PYTHON scripts/gpu_stack.py report"
else
  # TF's CUDA/cuDNN build, the GPUs TF sees, Horovod's NCCL, DALI's and ONNX Runtime's CUDA; FAIL lines count.
  "$PYTHON" scripts/gpu_stack.py report 2>/dev/null > "$WORKDIR/environment.txt"
  while IFS= read -r line; do
    say "$line"
    case "$line" in FAIL*) FAILED=$((FAILED + 1)) ;; esac
  done < "$WORKDIR/environment.txt"
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L | tee -a "$REPORT"
fi
say "GPUs: $GPUS${GPU_NAME:+ ($GPU_NAME)}; steps per training check: $STEPS"
if [ "$DRY" != 1 ] && [ "$GPUS" -lt 1 ]; then
  say "No GPU: nothing to check here (the CPU side of these paths runs in the test suite: pytest -m gpu_path)"
  exit 1
fi
# nvidia-smi lists GPUs but TensorFlow sees none (a CPU-mode install, a driver too old for CUDA 12, a container
# started without --gpus): every check below would run on the CPU, for hours, and pass.
if [ "$DRY" != 1 ] && grep -q '^GPUs visible to TensorFlow: \[\]' "$WORKDIR/environment.txt"; then
  say "FAIL: $GPUS GPU(s) to check (nvidia-smi -L, or NUM_GPUS), but TensorFlow sees none: the checks would run on" \
      "the CPU. Install in" \
      "GPU mode (GPU=1 bash scripts/install.sh: tensorflow[and-cuda]), use a driver for CUDA 12, or start the" \
      "container with --gpus all; TensorFlow's own reason:" \
      "$PYTHON -c 'import tensorflow as tf; tf.config.list_physical_devices()'"
  exit 1
fi

TRAIN=(main.py --mode training_benchmark --arch resnet50 --iter_unit batch --num_iter "$STEPS" --warmup_steps 50
       --synthetic_data_size 224 --no_progress)
say "== training_benchmark, 1 GPU, synthetic 224 px"
check fp32                train_fp32 "$PYTHON" "${TRAIN[@]}" --batch_size 128 --results_dir "$WORKDIR/fp32"
check fp32_xla            train_fp32 "$PYTHON" "${TRAIN[@]}" --batch_size 128 --xla --results_dir "$WORKDIR/fp32_xla"
check amp                 train_amp  "$PYTHON" "${TRAIN[@]}" --batch_size 256 --amp --results_dir "$WORKDIR/amp"
check amp_xla_static128   train_amp  "$PYTHON" "${TRAIN[@]}" --batch_size 256 --amp --static_loss_scale 128 --xla \
                                     --results_dir "$WORKDIR/amp_xla"
check amp_xla_nchw        train_amp  "$PYTHON" "${TRAIN[@]}" --batch_size 256 --amp --xla --data_format NCHW \
                                     --results_dir "$WORKDIR/amp_nchw"
check resnext_amp_xla     n/a        "$PYTHON" main.py --mode training_benchmark --arch resnext101-32x4d \
                                     --iter_unit batch --num_iter 50 --warmup_steps 20 --batch_size 128 --amp --xla \
                                     --no_progress --results_dir "$WORKDIR/resnext"

say "== real data and DALI"
if [ -n "${DATA_DIR:-}" ]; then
  check tfrecord_amp_xla  train_amp  "$PYTHON" "${TRAIN[@]}" --batch_size 256 --amp --xla --data_dir "$DATA_DIR" \
                                     --results_dir "$WORKDIR/tfrecord"
  if [ -n "${DALI_IDX_DIR:-}" ]; then
    check dali_amp_xla    train_amp  "$PYTHON" "${TRAIN[@]}" --batch_size 256 --amp --xla --data_dir "$DATA_DIR" \
                                     --dali --data_idx_dir "$DALI_IDX_DIR" --results_dir "$WORKDIR/dali"
  else
    skip dali_amp_xla "set DALI_IDX_DIR (python -m dataprep.make_dali_index)"
  fi
else
  skip tfrecord_amp_xla "set DATA_DIR to ImageNet TFRecords"
  skip dali_amp_xla "set DATA_DIR and DALI_IDX_DIR"
fi

say "== several GPUs"
if [ "$DRY" = 1 ] || [ "$GPUS" -ge 2 ]; then
  check mirrored_2gpu     n/a  env RN50_ENGINE=mirrored "$PYTHON" "${TRAIN[@]}" --batch_size 256 --amp --xla \
                               --results_dir "$WORKDIR/mirrored"
  check launcher_2gpu     n/a  "$PYTHON" -m runtime.launch --nproc 2 "${TRAIN[@]}" --batch_size 256 --amp --xla \
                               --results_dir "$WORKDIR/launcher"
  if [ "$DRY" != 1 ] && ! "$PYTHON" -c "import horovod.tensorflow" >/dev/null 2>&1; then
    skip horovod_2gpu "Horovod not importable (GPU=1 bash scripts/install_horovod.sh)"
  elif [ "$DRY" != 1 ] && ! "$PYTHON" -c "import horovod.tensorflow as h, sys; sys.exit(not h.nccl_built())" \
       >/dev/null 2>&1; then
    # Without NCCL, Horovod all-reduces GPU tensors through host memory: a run, but not the one to measure (the
    # Docker image's build, docs/GPU.md).
    skip horovod_2gpu "Horovod was built without NCCL (the Docker image's build): GPU=1 bash \
scripts/install_horovod.sh rebuilds it with a CUDA 12 nvcc"
  else
    # the horovodrun installed beside $PYTHON (the venv's), as training/common.sh runs it; else PATH's
    HOROVODRUN=$(dirname "$PYTHON")/horovodrun
    [ -x "$HOROVODRUN" ] || HOROVODRUN=horovodrun
    check horovod_2gpu    n/a  "$HOROVODRUN" -np 2 -H localhost:2 "$PYTHON" "${TRAIN[@]}" --batch_size 256 --amp \
                               --xla --results_dir "$WORKDIR/horovod"
  fi
else
  skip mirrored_2gpu "needs 2 GPUs"
  skip launcher_2gpu "needs 2 GPUs"
  skip horovod_2gpu "needs 2 GPUs"
fi

say "== inference"
INFER=(main.py --mode inference_benchmark --arch resnet50 --iter_unit batch --num_iter 200 --warmup_steps 50
       --batch_size 32 --synthetic_data_size 224 --no_progress)
check infer_fp32_b32        infer_fp32 "$PYTHON" "${INFER[@]}" --results_dir "$WORKDIR/infer_fp32"
check infer_amp_xla_b32     infer_amp  "$PYTHON" "${INFER[@]}" --amp --xla --results_dir "$WORKDIR/infer_amp"
check qat_frozen_graph      n/a  "$PYTHON" export_frozen_graph.py --model_name resnet50 --quantize --use_qdq \
                                 --symmetric --use_final_conv --output_file "$WORKDIR/rn50_qat.pb"
check qat_onnx              n/a  "$PYTHON" export_onnx.py --input "$WORKDIR/rn50_qat.pb" --output "$WORKDIR/rn50_qat.onnx"
if [ "$DRY" = 1 ] || "$PYTHON" -c "import tensorrt" >/dev/null 2>&1; then
  check tensorrt_int8_b32   infer_amp  "$PYTHON" inference.py --model "$WORKDIR/rn50_qat.onnx" --backend tensorrt \
                                 --amp --batch-size 32 --num-iter 200 --log-path "$WORKDIR/tensorrt.json"
else
  skip tensorrt_int8_b32 "the tensorrt package is not installed"
fi

[ "$DRY" = 1 ] && exit 0
say "$FAILED check(s) failed"
echo "Report: $REPORT"
[ "$FAILED" = 0 ]

# Shared by every launch script in training/ (sourced, not run). The scripts are 3-5 lines: they call one of
#   run_recipe NP ARCH BATCH EPOCHS MIXUP PRECISION WEIGHT_DECAY [WORKSPACE] [DATA_DIR] [extra main.py flags]
#   run_qat ARCH [CHECKPOINT] [DATA_DIR] [RESULTS_DIR] [extra flags]
#   run_training_perf ARCH [MAX_FP32_BS] [MAX_AMP_BS]       (defaults given by the script)
#   run_inference_benchmark ARCH BATCH_SIZES [DATA_DIR] [DALI_IDX_DIR]
# PRECISION: amp (static loss scale 128, as the original) | amp_dynamic | fp32 | tf32 (same flags as fp32; TF32 is
# what Ampere GPUs use for float32 by default).
#
# Environment:
#   LAUNCHER=tf (default)  python -m runtime.launch --nproc NP  (MultiWorkerMirroredStrategy, one process per GPU)
#   LAUNCHER=horovod       horovodrun -np NP [-H $HOROVOD_HOSTS]  (Horovod backend; scripts/install_horovod.sh):
#                          the horovodrun beside $PYTHON when there is one (the venv's), run as
#                          $PYTHON -m runtime.horovodrun (its output read as one run), else PATH's
#   LAUNCHER=mpirun        mpirun --allow-run-as-root [--bind-to socket] -np NP  (Horovod backend, as the original;
#                          PATH's mpirun)
#   BIND_TO_SOCKET=any     adds --bind-to socket with LAUNCHER=mpirun (the original's variable)
#   PYTHON=...             the interpreter (default: the repository's .venv/bin/python when it exists, else python3)
#   DRY_RUN=1              print the command(s) instead of running them
#   NUM_GPUS=N             GPUs for training_perf.sh's multi-GPU runs (default: nvidia-smi -L count)
#   DATA_DIR=...           training_perf.sh's TFRecords (default: the original's /data/tfrecords/)
# Several nodes: see training/slurm_example.sbatch and docs/SCALING.md.

TRAINING_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x "$TRAINING_ROOT/.venv/bin/python" ] && PYTHON="$TRAINING_ROOT/.venv/bin/python"  # scripts/install.sh's
fi

# Prints (DRY_RUN=1) or runs a command.
_run_or_print() {
  if [ "${DRY_RUN:-0}" = "1" ]; then
    printf '%q ' "$@"
    printf '\n'
  else
    # horovodrun turns a Ctrl-C into SIGTERM for its workers, which stop with a checkpoint and status 0: the run
    # was interrupted all the same, so its status says so (130, as main.py's and runtime.launch's).
    local interrupted=0 status=0
    trap 'interrupted=1' INT
    "$@" || status=$?
    trap - INT
    if [ "$interrupted" = 1 ] && [ "$status" = 0 ]; then
      echo "Interrupted: the workers stopped on the signal and exited 0 (a training run at a checkpoint, which the same command continues)" >&2
      status=130
    fi
    return "$status"
  fi
}

# The horovodrun installed with $PYTHON's Horovod (scripts/install_horovod.sh puts it beside the venv's python),
# else PATH's: a horovodrun of another Python would start workers that lack this interpreter's packages, and PATH
# seldom holds the venv's bin/. Empty when there is neither.
_horovodrun() {
  if [ -x "$(_python_dir)/horovodrun" ]; then echo "$(_python_dir)/horovodrun"
  else command -v horovodrun 2>/dev/null || true; fi
}

# The directory of $PYTHON as given, not of its target: a venv's python is a link to the system's.
_python_dir() {
  local python
  python=$(command -v "$PYTHON" 2>/dev/null) || python=$PYTHON
  dirname "$python"
}

# A launcher missing at run time is one line and status 2 (bash's "command not found" is 127 and names no fix);
# DRY_RUN=1 still prints the command, with the bare name.
_need_launcher() {
  local name=$1 found=$2 hint=$3
  [ -n "$found" ] && return 0
  [ "${DRY_RUN:-0}" = "1" ] && return 0
  echo "ERROR: LAUNCHER=${LAUNCHER} needs $name, which is not $hint" >&2
  return 2
}

# The words that start N workers of main.py (N = 1: plain python, as the original's 1-GPU scripts).
launch_words() {
  local np=$1
  if [ "$np" -le 1 ]; then
    LAUNCH=("$PYTHON" "$TRAINING_ROOT/main.py")
    return
  fi
  case "${LAUNCHER:-tf}" in
    # -m with the root on PYTHONPATH: the launcher imports the project's packages from any working directory
    tf) LAUNCH=(env "PYTHONPATH=$TRAINING_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m runtime.launch --nproc "$np"
                "$TRAINING_ROOT/main.py") ;;
    horovod) local horovodrun
             horovodrun=$(_horovodrun)
             _need_launcher horovodrun "$horovodrun" "beside $PYTHON nor on PATH (install Horovod into that \
interpreter: bash scripts/install_horovod.sh; or set PYTHON to one that has it)" || return
             if [ -n "$horovodrun" ] && [ "$horovodrun" = "$(_python_dir)/horovodrun" ]; then
               # $PYTHON has Horovod: its horovodrun through runtime/horovodrun.py (TF's start-up lines of
               # horovodrun's own process hidden, an ERROR line every worker prints shown once, a failure one line)
               LAUNCH=(env "PYTHONPATH=$TRAINING_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m runtime.horovodrun
                       -np "$np")
             else
               LAUNCH=("${horovodrun:-horovodrun}" -np "$np")
             fi
             [ -n "${HOROVOD_HOSTS:-}" ] && LAUNCH+=(-H "$HOROVOD_HOSTS")
             LAUNCH+=("$PYTHON" "$TRAINING_ROOT/main.py") ;;
    mpirun) _need_launcher mpirun "$(command -v mpirun 2>/dev/null)" "on PATH (install Open MPI, e.g. \
apt-get install openmpi-bin, and Horovod built with it; or use LAUNCHER=tf or LAUNCHER=horovod)" || return
            LAUNCH=(mpirun --allow-run-as-root)
            [ -n "${BIND_TO_SOCKET:-}" ] && LAUNCH+=(--bind-to socket)
            LAUNCH+=(-np "$np" "$PYTHON" "$TRAINING_ROOT/main.py") ;;
    *) echo "ERROR: LAUNCHER must be tf, horovod or mpirun (got ${LAUNCHER})" >&2; return 2 ;;
  esac
}

precision_flags() {
  case "$1" in
    amp) PRECISION_FLAGS=(--amp --static_loss_scale 128) ;;
    amp_dynamic) PRECISION_FLAGS=(--amp) ;;
    fp32|tf32) PRECISION_FLAGS=() ;;
    *) echo "precision must be amp, amp_dynamic, fp32 or tf32 (got $1)" >&2; return 2 ;;
  esac
}

# The recipes (docs/ORIGINAL.md#training-recipes): train_and_evaluate with cosine LR, 8 warmup epochs, label
# smoothing 0.1.
run_recipe() {
  local np=$1 arch=$2 batch=$3 epochs=$4 mixup=$5 precision=$6 wd=$7
  shift 7
  local workspace=${1:-/workspace/rn50v15_tf}
  local data_dir=${2:-/data}
  shift 2 2>/dev/null || shift $#
  launch_words "$np" || return
  precision_flags "$precision" || return
  local mixup_flags=()
  [ "$mixup" != "0" ] && mixup_flags=(--mixup="$mixup")
  _run_or_print "${LAUNCH[@]}" --arch="$arch" \
    --mode=train_and_evaluate --iter_unit=epoch --num_iter="$epochs" "${mixup_flags[@]}" \
    --batch_size="$batch" --warmup_steps=100 --cosine_lr --label_smoothing 0.1 \
    --lr_init=0.256 --lr_warmup_epochs=8 --momentum=0.875 --weight_decay="$wd" \
    "${PRECISION_FLAGS[@]}" \
    --data_dir="$data_dir/tfrecords" --data_idx_dir="$data_dir/dali_idx" \
    --results_dir="$workspace/results" --weight_init=fan_in "$@"
}

# GPU1_RN50_QAT.sh: QAT fine-tuning of a converged FP32 checkpoint on one GPU
# (docs/ORIGINAL.md#quantisation-aware-training).
run_qat() {
  local arch=$1 checkpoint=${2:-} data_dir=${3:-/data/tfrecords} results_dir=${4:-/workspace/rn50v15_tf/results}
  if [ -z "$checkpoint" ] || [ "${checkpoint#-}" != "$checkpoint" ]; then  # none, or a flag in its place
    echo "ERROR: QAT fine-tunes a converged checkpoint: give it first (usage: $(basename "$0") CHECKPOINT [DATA_DIR]" \
      "[RESULTS_DIR] [extra flags])" >&2
    return 2
  fi
  shift 4 2>/dev/null || shift $#
  _run_or_print "$PYTHON" "$TRAINING_ROOT/main.py" --arch="$arch" --mode=train_and_evaluate --batch_size=32 \
    --lr_warmup_epochs=1 --quantize --symmetric --use_qdq --label_smoothing 0.1 --lr_init=0.00005 \
    --momentum=0.875 --weight_decay=3.0517578125e-05 --finetune_checkpoint="$checkpoint" \
    --data_dir="$data_dir" --results_dir="$results_dir" --num_iter 10 --data_format NHWC "$@"
}

_gpu_count() {
  if [ -n "${NUM_GPUS:-}" ]; then echo "$NUM_GPUS"; return; fi
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>/dev/null | grep -c '^GPU '; else echo 0; fi
}

# training_perf.sh (docs/ORIGINAL.md#benchmark-scripts): AMP and FP32, without and with XLA, on 1 GPU then on all
# GPUs; the final train_throughput record goes to ./training_benchmark.txt.
run_training_perf() {
  local arch=$1 fp32_bs=$2 amp_bs=$3
  local gpus
  gpus=$(_gpu_count)
  local precision xla np bs flags result out status runs=0 failed=0
  for precision in amp fp32; do
    for xla in 0 1; do
      if [ "$precision" = amp ]; then bs=$amp_bs; flags=(--amp --static_loss_scale 128); else bs=$fp32_bs; flags=(); fi
      [ "$xla" = 1 ] && flags+=(--xla)
      local counts=(1)
      [ "$gpus" -gt 1 ] && counts+=("$gpus")
      for np in "${counts[@]}"; do
        launch_words "$np" || return
        if [ "$np" -gt 1 ] && [ "${LAUNCHER:-tf}" = mpirun ]; then BIND_TO_SOCKET=1 launch_words "$np"; fi
        local command=("${LAUNCH[@]}" --arch="$arch" --mode=training_benchmark --warmup_steps 200 --num_iter 500
                       --iter_unit batch --batch_size "$bs" "${flags[@]}" --data_dir="${DATA_DIR:-/data/tfrecords/}"
                       --results_dir=/tmp/result)
        if [ "${DRY_RUN:-0}" = "1" ]; then _run_or_print "${command[@]}"; continue; fi
        out=$("${command[@]}"); status=$?
        result=$(printf '%s\n' "$out" | grep 'train_throughput' | tail -n 1 | sed -e 's/^DLL .* - () //')
        runs=$((runs + 1))
        # a run that failed (its ERROR line above) is said in the results, not left as an empty line
        [ "$status" = 0 ] || { result="FAILED (exit $status)"; failed=$((failed + 1)); }
        echo "BS=$bs,$precision,XLA=$xla,GPUs=$np $result" | tee -a ./training_benchmark.txt
      done
    done
  done
  _benchmark_status training_perf "$runs" "$failed"
}

# The end of a benchmark script: its status, non-zero with one line when any of its `runs` runs failed.
_benchmark_status() {
  local name=$1 runs=$2 failed=$3
  [ "$failed" = 0 ] && return 0
  echo "ERROR: $name: $failed of $runs runs failed (the ERROR lines above say why)" >&2
  return 1
}

# inference_benchmark.sh (docs/ORIGINAL.md#benchmark-scripts): single GPU, FP32/FP16 x XLA, plus FP16 DALI XLA
# when an index dir is given.
run_inference_benchmark() {
  local arch=$1 batch_sizes=$2 data_dir=${3:-/data/tfrecords} dali_idx_dir=${4:-}
  local bs name result out status runs=0 failed=0
  local configs=("FP32 nodali noxla|" "FP32 nodali xla|--xla" "FP16 nodali noxla|--amp" "FP16 nodali xla|--amp --xla")
  [ -n "$dali_idx_dir" ] && configs+=("FP16 dali xla|--amp --xla --dali --data_idx_dir $dali_idx_dir")
  for bs in $batch_sizes; do
    for config in "${configs[@]}"; do
      name=${config%%|*}
      read -r -a flags <<< "${config#*|}"
      local command=("$PYTHON" "$TRAINING_ROOT/main.py" --arch="$arch" --mode=inference_benchmark --warmup_steps 50
                     --num_iter 400 --iter_unit batch --batch_size "$bs" --data_dir="$data_dir"
                     --results_dir=/tmp/results "${flags[@]}")
      if [ "${DRY_RUN:-0}" = "1" ]; then _run_or_print "${command[@]}"; continue; fi
      out=$("${command[@]}"); status=$?
      result=$(printf '%s\n' "$out" | grep 'eval_throughput' | tail -n 1 | sed -e 's/^DLL .* - () //')
      runs=$((runs + 1))
      [ "$status" = 0 ] || { result="FAILED (exit $status)"; failed=$((failed + 1)); }
      echo "Results for BS=$bs $name: $result"
    done
  done
  _benchmark_status inference_benchmark "$runs" "$failed"
}

#!/usr/bin/env bash
# Quickstart on the embedded Fashion-MNIST subset (datasets/fashion_mnist: 9,000 train / 2,000 test images).
# Run after `bash scripts/install.sh`; no root, no downloads. Everything goes to results/quickstart/ (recreated).
#   bash scripts/quickstart.sh                 4 epochs (1,124 steps of 32 images at 40x40, 5-11 min on 2 cores:
#                                              36,000 images at the step's img/s plus 30-50 s)
#   EPOCHS=10 bash scripts/quickstart.sh       longer (the recipe's cosine schedule stretches with it)
#   SIZE=32 bash scripts/quickstart.sh         another image size (40 by default; see the recipe below)
#   bash scripts/quickstart.sh --amp           extra arguments go to both main.py calls
#   OUT=/tmp/qs bash scripts/quickstart.sh     another output directory (a relative one is where you are)
# Ctrl-C stops training after a checkpoint (status 130); the same command again continues that run where it
# stopped (seeded: the same result as without the interrupt). Any other run starts afresh: it says so and removes
# OUT (an OUT that holds files but no quickstart is refused). While a quickstart runs into OUT (any of its steps), or
# a training or predict (OUT/.run.lock), another is refused before it touches OUT.
#
# The recipe keeps the shape of the original's ImageNet recipe (1 epoch of linear warmup, cosine decay, label
# smoothing 0.1, momentum 0.875, weight decay 3.05e-5, fan_in init) with values chosen for 36,000 images seen:
#   --image_size 40       32 px leaves ResNet-50's last stage a 1x1 map and learns much more slowly per image;
#                         40 px gives the last two stages 3x3 and 2x2 maps for ~1.4x the compute of 32 px
#   --lr_init 0.05        the rate per 256 images (0.00625 per step at batch 32); the ImageNet 0.256 makes the
#                         training loss jump to 7-24 at this scale, 0.1 still spikes, 0.025-0.05 are smooth
#   --batch_size 32       twice the updates of batch 64 for the same images (+1.4 points top-1 here)
#   --min_crop_area 0.75  the original's 5-100% crop area cuts most of a 28 px garment away; 75-100% keeps it
set -euo pipefail
# A relative OUT= is where the caller is, as any path typed in a shell (the script works from the repository)
if [ -n "${OUT:-}" ] && [ "${OUT#/}" = "$OUT" ]; then OUT="$PWD/$OUT"; fi
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
EPOCHS=${EPOCHS:-4}
SIZE=${SIZE:-40}
OUT=${OUT:-results/quickstart}
DATA=$OUT/data

EXTRA=()  # (expanded as ${EXTRA[@]+...} so an empty array is fine under set -u on old bash)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  EXTRA+=(--cpu)  # no GPU visible
fi

START=$SECONDS
# The whole quickstart holds a lock beside OUT (flock: released when its last process ends, however it ends), so a
# second one into the same OUT stops here also in the seconds between the steps below, when neither dataprep nor
# main.py holds a lock in OUT. (Without util-linux's flock only the check below guards OUT.)
if command -v flock >/dev/null 2>&1; then
  mkdir -p "$(dirname "$OUT")"
  SCRIPT_LOCK="$(dirname "$OUT")/.$(basename "$OUT").quickstart.lock"
  exec 9>>"$SCRIPT_LOCK"
  if ! flock -n 9; then
    echo "ERROR: $OUT is in use by another quickstart ($(head -c 200 "$SCRIPT_LOCK" 2>/dev/null)); wait for it to end" \
      "or give this one another OUT=" >&2
    exit 2
  fi
  printf 'pid %s on host %s, started %s' "$$" "$(uname -n)" "$(date -u +%Y-%m-%dT%H:%M:%S+00:00)" > "$SCRIPT_LOCK"
fi
# A quickstart or training running in OUT (main.py holds OUT/.run.lock while it trains or predicts) must not lose
# its directory to this run's rm -rf, nor have its data rewritten by a "continuing" dataprep: stop here, one line.
"$PYTHON" - "$OUT" "$DATA" <<'PY' || exit $?
import sys

from utils.run_lock import describe_holder, live_holder

for directory in sys.argv[1:]:
    holder = live_holder(directory)
    if holder is not None:
        print("ERROR: {} is in use by another run ({}): a quickstart or training is running there; wait for it to end "
              "or give this one another OUT=".format(directory, describe_holder(holder)), file=sys.stderr)
        sys.exit(2)
PY
# What this run is; an unfinished run of the same is continued, anything else starts afresh.
RUN="epochs=$EPOCHS size=$SIZE arguments=${EXTRA[*]+${EXTRA[*]}} $*"
RESUME=()
if [ -f "$OUT/.quickstart-run" ] && [ ! -f "$OUT/.quickstart-done" ] && [ "$(cat "$OUT/.quickstart-run")" = "$RUN" ]; then
  echo "== continuing the interrupted quickstart in $OUT (rm -r $OUT to start over)"
  RESUME=(--resume)
else
  if [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    # A quickstart recreates its own directory; one that is not a quickstart's is not removed.
    if [ ! -f "$OUT/.quickstart-run" ]; then
      echo "ERROR: $OUT holds files that are not a quickstart's: give another OUT= (a quickstart recreates its" \
        "directory)" >&2
      exit 2
    fi
    if [ -f "$OUT/.quickstart-done" ]; then what="a finished quickstart"; else what="another quickstart's run"; fi
    echo "== $OUT holds $what: removing it to start afresh (with whatever else was written there, the next:" \
      "commands' results included; another OUT= keeps it)"
  fi
  rm -rf "$OUT"
  mkdir -p "$OUT"
  printf '%s\n' "$RUN" > "$OUT/.quickstart-run"
fi
echo "== 1/4 data: Fashion-MNIST subset -> TFRecords in $DATA (${SIZE}x${SIZE})"
"$PYTHON" -m dataprep.fashion_mnist --out "$DATA" --image_size "$SIZE" ${RESUME[@]+"${RESUME[@]}"}

echo "== 2/4 train and evaluate: ResNet-50, 10 classes, ${SIZE}x${SIZE}, $EPOCHS epoch(s)"
"$PYTHON" main.py --mode train_and_evaluate --arch resnet50 --num_classes 10 --image_size "$SIZE" \
  --data_dir "$DATA" --batch_size 32 --num_iter "$EPOCHS" --iter_unit epoch \
  --lr_init 0.05 --lr_warmup_epochs 1 --cosine_lr --momentum 0.875 --weight_decay 3.0517578125e-05 \
  --label_smoothing 0.1 --min_crop_area 0.75 --weight_init fan_in --seed 1 --results_dir "$OUT" \
  ${EXTRA[@]+"${EXTRA[@]}"} "$@" || {
  status=$?  # main.py's lines say "the same command": the quickstart's is meant
  [ "$status" != 130 ] || echo "== quickstart interrupted: the same quickstart command (same OUT, EPOCHS, SIZE and" \
    "arguments) continues it" >&2
  exit "$status"
}

echo "== 3/4 predict on $DATA/samples (file names say the true class)"
"$PYTHON" main.py --mode predict --arch resnet50 --num_classes 10 --image_size "$SIZE" \
  --to_predict "$DATA/samples" --batch_size 1 --results_dir "$OUT" ${EXTRA[@]+"${EXTRA[@]}"} "$@"

echo "== 4/4 training curves -> $OUT/curves.png"
"$PYTHON" -m utils.plot_log "$OUT/log.json" -o "$OUT/curves.png"

ELAPSED=$((SECONDS - START))
touch "$OUT/.quickstart-done"
"$PYTHON" - "$OUT" "$SIZE" "$ELAPSED" "${EXTRA[*]+${EXTRA[*]}}" "${RESUME[*]+continued}" <<'PY'
import os
import sys

from utils.logger import read_log

out, size, elapsed, device, continued = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
final = {}
for record in read_log(os.path.join(out, "log.json")):
    if record.get("type") == "LOG" and record.get("step") == [] and "top1_accuracy" in record.get("data", {}):
        final = record["data"]
if final:
    accuracy = "top-1 {:.1%}, top-5 {:.1%} on the held-out test images".format(
        final["top1_accuracy"], final["top5_accuracy"])
else:
    accuracy = "no evaluation result in the log"
checkpoint = "(none)"
index = os.path.join(out, "checkpoint")
if os.path.isfile(index):
    with open(index, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("model_checkpoint_path:"):
                checkpoint = os.path.join(out, line.split(":", 1)[1].strip().strip('"'))
                break
args = "--arch resnet50 --num_classes 10 --image_size {}{}".format(size, " " + device if device else "")
print("""
== quickstart done in {m} min {s:02d} s{continued}: {accuracy}
   checkpoint   {checkpoint}
   log          {out}/log.json (DLLL JSON lines; stdout had the same records)
   curves       {out}/curves.png
   TensorBoard  {out} (training scalars) and {out}/eval: .venv/bin/tensorboard --logdir {out}
next (from {repo}; each command keeps its log.json in the directory it names):
   predict on your own photo (any size: its shorter side resized, the central {size}x{size} kept, as in evaluation; the
   model's settings come from its checkpoint):
     .venv/bin/python main.py --mode predict --to_predict my.jpg --model_dir {out}{device} --batch_size 1 \\
       --results_dir {out}/predict
   fine-tune from this checkpoint (another dataset: its --data_dir and --num_classes; the last line is this recipe's):
     .venv/bin/python main.py --mode train_and_evaluate --finetune_checkpoint {out} {args} \\
       --data_dir {out}/data --batch_size 32 --num_iter 1 --lr_init 0.01 --lr_warmup_epochs 0 --cosine_lr \\
       --results_dir /tmp/finetuned \\
       --momentum 0.875 --weight_decay 3.0517578125e-05 --label_smoothing 0.1 --min_crop_area 0.75
   export a SavedModel / a frozen graph:
     .venv/bin/python main.py --mode evaluate --model_dir {out}{device} --data_dir {out}/data --batch_size 32 \\
       --export_dir /tmp/quickstart_savedmodel --results_dir {out}/export
     .venv/bin/python inference.py --model /tmp/quickstart_savedmodel/<timestamp> --to-predict my.jpg \\
       --log-path {out}/serve/log.json
     .venv/bin/python export_frozen_graph.py --checkpoint {out} --output_file /tmp/quickstart_frozen.pb{frozen}""".format(
    m=elapsed // 60, s=elapsed % 60, accuracy=accuracy, checkpoint=checkpoint, out=out, size=size, args=args,
    repo=os.getcwd(),
    device=" " + device if device else "",
    frozen=" --compute_format NHWC" if device else "",  # the original's NCHW default needs a GPU to run
    continued=" (this run, which continued an interrupted one)" if continued else ""))
PY

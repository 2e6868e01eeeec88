#!/usr/bin/env bash
# Quickstart on the embedded Fashion-MNIST subset (datasets/fashion_mnist: 9,000 train / 2,000 test images).
# Run after `bash scripts/install.sh`; no root, no downloads. Everything goes to results/quickstart/ (recreated).
#   bash scripts/quickstart.sh                 2 epochs (280 steps of 64 images at 32x32, ~5 min on 2 cores)
#   EPOCHS=10 bash scripts/quickstart.sh       longer (the recipe's cosine schedule stretches with it)
#   bash scripts/quickstart.sh --amp           extra arguments go to both main.py calls
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
EPOCHS=${EPOCHS:-2}
OUT=results/quickstart
DATA=$OUT/data

EXTRA=()  # (expanded as ${EXTRA[@]+...} so an empty array is fine under set -u on old bash)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  EXTRA+=(--cpu)  # no GPU visible
fi

rm -rf "$OUT"
echo "== 1/3 data: Fashion-MNIST subset -> TFRecords in $DATA"
"$PYTHON" -m dataprep.fashion_mnist --out "$DATA" --image_size 32

echo "== 2/3 train and evaluate: ResNet-50, 10 classes, 32x32, $EPOCHS epoch(s)"
"$PYTHON" main.py --mode train_and_evaluate --arch resnet50 --num_classes 10 --image_size 32 \
  --data_dir "$DATA" --batch_size 64 --num_iter "$EPOCHS" --iter_unit epoch \
  --lr_init 0.256 --lr_warmup_epochs 1 --cosine_lr --momentum 0.875 --weight_decay 3.0517578125e-05 \
  --label_smoothing 0.1 --weight_init fan_in --seed 1 --results_dir "$OUT" ${EXTRA[@]+"${EXTRA[@]}"} "$@"

echo "== 3/3 predict on $DATA/samples (file names say the true class)"
"$PYTHON" main.py --mode predict --arch resnet50 --num_classes 10 --image_size 32 \
  --to_predict "$DATA/samples" --batch_size 1 --results_dir "$OUT" ${EXTRA[@]+"${EXTRA[@]}"} "$@"
echo "done: logs and checkpoints in $OUT"

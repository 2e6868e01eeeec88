#!/usr/bin/env bash
# Every benchmark of docs/BENCHMARKS.md, one after the other (never concurrently: they would share the cores).
# Results as JSON in bench/results/. About 1-2 hours on an idle 2-vCPU machine, much longer under load.
#   bash bench/run_all.sh            # TORCH_PYTHON=/tmp/torchvenv/bin/python for the torchvision peer
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=bench/results
mkdir -p "$OUT"
$PY -m bench.matmul_ceiling | tee "$OUT/matmul_ceiling.json"
$PY -m bench.model_build --json "$OUT/model_build.json"
$PY -m bench.train_step --variants ours,keras,ours_xla,ours_amp --warmup 2 --rounds 5 --json "$OUT/train_step_rn50_224.json"
$PY -m bench.conv_gradients --json "$OUT/conv_gradients_224.json"
$PY -m bench.small_map_ops --json "$OUT/small_map_ops_40.json"
$PY -m bench.small_map_ops --size 224 --json "$OUT/small_map_ops_224.json"
$PY -m bench.step_data_source --steps 8 --warmup 2 --rounds 3 --json "$OUT/step_data_source_224.json"
$PY -m bench.extensions --rounds 2 --json "$OUT/extensions_224.json"
$PY -m bench.train_step --variants ours,ours_xla,keras,keras_xla --size 64 --batch 16 --warmup 1 --rounds 5 \
    --no_ceiling --json "$OUT/train_step_xla_64.json"
$PY -m bench.train_step --variants ours,ours_amp,ours_ref_bn,ours_native --size 64 --batch 16 --warmup 1 --rounds 5 \
    --json "$OUT/train_step_variants_64.json"
$PY -m bench.train_step --arch resnext101-32x4d --variants ours --batch 8 --warmup 1 --rounds 3 --no_ceiling \
    --json "$OUT/train_step_resnext_224.json"
$PY -m bench.train_step --arch se-resnext101-32x4d --variants ours --batch 8 --warmup 1 --rounds 3 --no_ceiling \
    --json "$OUT/train_step_se_resnext_224.json"
$PY -m bench.inference --variants ours,ours_amp,savedmodel,frozen,onnx,keras --warmup 3 --rounds 10 \
    --json "$OUT/inference_rn50_224.json"
$PY -m bench.grouped_conv --json "$OUT/grouped_conv.json"
$PY -m bench.profile_step --batch 32 --size 224 --steps 2 | tee "$OUT/profile_rn50_224.md"
if [ -x "${TORCH_PYTHON:-/tmp/torchvenv/bin/python}" ]; then
    "${TORCH_PYTHON:-/tmp/torchvenv/bin/python}" bench/torchvision_peer.py --warmup 2 --rounds 5 | tee "$OUT/torchvision_peer.json"
fi
$PY -m bench.fp16_overflow --cases 32x4,96x8 --seeds 0,1,2 --output "$OUT/fp16_overflow.json"
$PY -m bench.fp16_overflow --cases 224x8 --seeds 0 --output "$OUT/fp16_overflow_224.json"
$PY -m bench.iterator_delete --seconds 12 --repeats 6 --json "$OUT/iterator_delete.json"
$PY -m bench.iterator_delete --seconds 12 --repeats 6 --replicas 2 --json "$OUT/iterator_delete_mirrored.json"
$PY -m bench.interrupt_tracing --trials 150 --json "$OUT/interrupt_tracing.json"
$PY -m bench.interrupt_tracing --scenario load --trials 100 --json "$OUT/interrupt_loading.json"

#!/usr/bin/env bash
# SE-ResNeXt101-32x4d training throughput: AMP/FP32 x XLA, 1 GPU then all GPUs -> ./training_benchmark.txt.
# Usage: $0 [MAX_FP32_BS=64] [MAX_AMP_BS=96]; env: see training/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_training_perf se-resnext101-32x4d "${1:-64}" "${2:-96}"

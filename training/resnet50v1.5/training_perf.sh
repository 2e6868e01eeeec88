#!/usr/bin/env bash
# ResNet-50 v1.5 training throughput: AMP/FP32 x XLA, 1 GPU then all GPUs -> ./training_benchmark.txt.
# Usage: $0 [MAX_FP32_BS=128] [MAX_AMP_BS=256]; env: see training/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_training_perf resnet50 "${1:-128}" "${2:-256}"

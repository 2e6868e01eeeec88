#!/usr/bin/env bash
# SE-ResNeXt101-32x4d single-GPU inference benchmark over batch sizes 1 2 4 8 16 32 64 128.
# Usage: $0 [DATA_DIR=/data/tfrecords] [DALI_IDX_DIR]; env: see training/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_inference_benchmark se-resnext101-32x4d "1 2 4 8 16 32 64 128" "${1:-/data/tfrecords}" "${2:-}"

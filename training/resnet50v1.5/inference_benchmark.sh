#!/usr/bin/env bash
# ResNet-50 v1.5 single-GPU inference benchmark over batch sizes 1 2 4 8 16 32 64 128 256.
# Usage: $0 [DATA_DIR=/data/tfrecords] [DALI_IDX_DIR]; env: see training/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_inference_benchmark resnet50 "1 2 4 8 16 32 64 128 256" "${1:-/data/tfrecords}" "${2:-}"

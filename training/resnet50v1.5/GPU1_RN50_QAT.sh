#!/usr/bin/env bash
# ResNet-50 v1.5 quantisation-aware fine-tuning of a converged FP32 checkpoint on 1 GPU, 10 epochs
# (docs/ORIGINAL.md#quantisation-aware-training).
# Usage: $0 CHECKPOINT [DATA_DIR=/data/tfrecords] [RESULTS_DIR=/workspace/rn50v15_tf/results] [extra flags]
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_qat resnet50 "$@"

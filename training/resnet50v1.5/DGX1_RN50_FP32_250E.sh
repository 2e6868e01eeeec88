#!/usr/bin/env bash
# ResNet-50 v1.5, DGX-1 (8 GPUs), FP32, 250 epochs, mixup 0.2.
# Usage: $0 [WORKSPACE=/workspace/rn50v15_tf] [DATA_DIR=/data] [extra main.py flags]; env: see training/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_recipe 8 resnet50 128 250 0.2 fp32 3.0517578125e-05 "$@"

#!/usr/bin/env bash
# ResNet-50 v1.5, DGX A100 (8 GPUs), AMP (static loss scale 128), 90 epochs.
# Usage: $0 [WORKSPACE=/workspace/rn50v15_tf] [DATA_DIR=/data] [extra main.py flags]; env: see training/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_recipe 8 resnet50 256 90 0 amp 3.0517578125e-05 "$@"

#!/usr/bin/env bash
# SE-ResNeXt101-32x4d, DGX-1 (8 GPUs), AMP (static loss scale 128), 250 epochs, mixup 0.2.
# Usage: $0 [WORKSPACE=/workspace/rn50v15_tf] [DATA_DIR=/data] [extra main.py flags]; env: see training/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_recipe 8 se-resnext101-32x4d 96 250 0.2 amp 6.103515625e-05 "$@"

#!/usr/bin/env bash
# ResNeXt101-32x4d, DGX A100 (8 GPUs), AMP (static loss scale 128), 90 epochs.
# Usage: $0 [WORKSPACE=/workspace/rn50v15_tf] [DATA_DIR=/data] [extra main.py flags]; env: see training/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run_recipe 8 resnext101-32x4d 256 90 0 amp 6.103515625e-05 "$@"

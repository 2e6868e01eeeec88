"""Which convolution kernels a model is built with, chosen once from the platform and what the model is for.

Every formulation computes the same SAME-padded convolution from the same HWIO variable, so a model's checkpoint,
variable names and numbers do not depend on the choice; only the ops in its graph and their speed do:
- on GPU every conv is cuDNN's: plain `tf.nn.conv2d`, and one grouped `tf.nn.conv2d` for ResNeXt's grouped conv
  (cuDNN runs it forward and backward), for every purpose;
- CPU training: the CPU formulations (model/layers/conv.py "cpu": 1x1 convs as matmuls, kxk convs on small maps
  as patches + matmul; grouped convs "split" per group into those), which pay off in the backward pass;
- CPU inference and export: plain `tf.nn.conv2d` ops, which oneDNN's forward conv runs fastest and which
  deployment converters (tf2onnx, TensorRT) take as they are; grouped convs per group ("per_group_conv"), since TF
  cannot run a fused grouped Conv2D on CPU (model/layers/grouped_conv.py).
A built layer keeps its formulation for every call, training or not (docs/PERFORMANCE.md#on-cpu-measured).
"""
import dataclasses

from model.layers import conv, grouped_conv

PURPOSES = ("train", "inference", "export")


@dataclasses.dataclass(frozen=True)
class Kernels:
    """`conv`: model/layers/conv.py's implementation of the ungrouped convs ("native" | "cpu"); `grouped`:
    model/layers/grouped_conv.py's of the grouped 3x3 convs ("native" | "split" | "per_group_conv")."""
    conv: str
    grouped: str

    def __post_init__(self):
        conv.resolve_implementation(self.conv, "channels_last")
        grouped_conv.resolve_implementation(self.grouped)


GPU_KERNELS = Kernels(conv="native", grouped="native")
CPU_TRAINING_KERNELS = Kernels(conv="cpu", grouped="split")
CPU_PLAIN_KERNELS = Kernels(conv="native", grouped="per_group_conv")


def check_purpose(purpose):
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {', '.join(PURPOSES)}, got {purpose!r}")
    return purpose


def choose_kernels(platform, purpose):
    """The Kernels of a model built on `platform` (utils/devices.Platform) for `purpose` (one of PURPOSES)."""
    check_purpose(purpose)
    if platform.gpu:
        return GPU_KERNELS
    return CPU_TRAINING_KERNELS if purpose == "train" else CPU_PLAIN_KERNELS

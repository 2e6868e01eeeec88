"""The architectures `--arch` accepts (docs/ORIGINAL.md#architectures), without TensorFlow: the flag parser imports
this before main.py imports TensorFlow."""

ARCH_NAMES: tuple[str, ...] = ("resnet50", "resnext101-32x4d", "se-resnext101-32x4d")

"""Mixed precision, decided once at start-up (docs/ORIGINAL.md#mixed-precision-and-loss-scaling).

`Precision.resolve` turns `--amp` / `--static_loss_scale` and the platform into one frozen value: the Keras dtype
policy of the model, and the kind of loss scaling. `LossScaler` is what the train step does with it.
"""

import dataclasses
from typing import Optional

LOSS_SCALING_KINDS = (None, "static", "dynamic")


@dataclasses.dataclass(frozen=True)
class Precision:
    """`policy`: the model's Keras dtype policy (None = float32). `loss_scaling`: None, "static" (multiply the loss
    by `static_scale`, divide the gradients by it, never skip a step; the original's FixedLossScalerOptimizer) or
    "dynamic" (Keras LossScaleOptimizer: 2**15, grows every 2000 good steps, skips non-finite steps)."""
    policy: Optional[str] = None
    loss_scaling: Optional[str] = None
    static_scale: float = 1.0

    def __post_init__(self):
        if self.loss_scaling not in LOSS_SCALING_KINDS:
            raise ValueError(f"loss_scaling must be one of {LOSS_SCALING_KINDS}, got {self.loss_scaling!r}")
        if self.loss_scaling == "static" and not self.static_scale > 0:
            raise ValueError(f"a static loss scale must be > 0, got {self.static_scale}")

    def describe(self):
        """"float32", or the policy and its loss scaling: "mixed_float16, dynamic loss scaling", "mixed_bfloat16, no
        loss scaling"."""
        if self.policy is None:
            return "float32"
        return "{}, {}".format(self.policy, {"dynamic": "dynamic loss scaling",
                                             "static": "static loss scale {:g}".format(self.static_scale)}.get(
                                                 self.loss_scaling, "no loss scaling"))

    @classmethod
    def resolve(cls, amp, static_loss_scale, platform, amp_dtype=None):
        """`--amp`: float16 compute with dynamic loss scaling, or bfloat16 without (bfloat16 has float32's exponent
        range); `amp_dtype` (--amp_dtype) chooses, else the platform does (float16 on GPU, bfloat16 on CPU).
        `--static_loss_scale X` (X != -1) under AMP: static scaling by X with either dtype."""
        if not amp:
            return cls()
        policy = "mixed_" + amp_dtype if amp_dtype else platform.amp_policy
        if static_loss_scale != -1:
            return cls(policy, "static", float(static_loss_scale))
        return cls(policy, "dynamic" if policy == "mixed_float16" else None)

    @property
    def dynamic(self):
        return self.loss_scaling == "dynamic"


FLOAT32 = Precision()


class LossScaler:
    """Loss scaling in the train step: `scale` the loss before the gradient, `unscale` the gradients after it,
    `current()` the scale in force, `skipped(before)` whether the optimizer skipped the step (its dynamic scale
    fell). With dynamic scaling the optimizer (a LossScaleOptimizer) unscales and skips inside `apply`."""

    def __init__(self, precision, optimizer):
        self.precision = precision
        self.optimizer = optimizer
        self._static = precision.static_scale if precision.loss_scaling == "static" else None

    def scale(self, loss):
        if self.precision.dynamic:
            return self.optimizer.scale_loss(loss)
        return loss * self._static if self._static else loss

    def unscale(self, grads):
        return [g / self._static for g in grads] if self._static else grads

    def current(self):
        import tensorflow as tf
        if self.precision.dynamic:
            return tf.convert_to_tensor(self.optimizer.dynamic_scale)
        return tf.constant(float(self._static or 1.0))

    def skipped(self, before):
        import tensorflow as tf
        return tf.less(self.current(), before)


def cpu_bfloat16_note(policy, native_bfloat16):
    """The line a CPU training run logs about bfloat16 (docs/PERFORMANCE.md#on-cpu-measured), or None.
    `policy`: the run's dtype policy (None = float32); `native_bfloat16`: utils/devices.cpu_bfloat16_support()."""
    if policy == "mixed_bfloat16" and native_bfloat16 is False:
        return ("Note: this CPU has no bfloat16 instructions (no avx512_bf16 or amx_bf16 flag): --amp is emulated "
                "here and trains several times slower than float32 (13x at 224 px on a 2-core AVX2 machine)")
    if policy is None and native_bfloat16:
        return ("Note: this CPU computes in bfloat16 natively (avx512_bf16 / amx_bf16): --amp (mixed bfloat16) "
                "trained 1.14-1.47x faster than float32 on such a machine")
    return None


"""Devices, decided once at start-up (docs/ORIGINAL.md#runtime-environment): which GPUs this process uses, and
what that means for the model (`Platform`). Library code takes a `Platform`; it never queries devices itself."""

import dataclasses
import os
import shutil
import subprocess
import sys

from utils.errors import UserError, first_line

NCHW_NEEDS_GPU = ("--data_format NCHW needs a GPU (TensorFlow's CPU convolution and pooling kernels are NHWC "
                  "only); use --data_format NHWC")


@dataclasses.dataclass(frozen=True)
class Platform:
    """What the process runs on. `gpu`: a GPU is visible to it (after `setup_devices`). `replica_devices`: the
    devices a MirroredStrategy in this process mirrors over (empty: its default, every visible GPU). `devices`: what
    setup_devices chose, named for the log (`describe_devices`)."""
    gpu: bool = False
    replica_devices: tuple = ()
    devices: tuple = dataclasses.field(default=(), compare=False)

    def describe_devices(self):
        """The devices this process computes on, for the PARAMETER record: ["CPU"], ["CPU:0", "CPU:1"]
        (RN50_CPU_REPLICAS), ["GPU:0 NVIDIA A100-SXM4-80GB"], ..."""
        if self.devices:
            return list(self.devices)
        if self.gpu:
            return ["GPU"]
        return [device.lstrip("/").upper() for device in self.replica_devices] or ["CPU"]

    @property
    def amp_policy(self):
        """`--amp`: float16 compute on GPU, bfloat16 on CPU (no float16 kernels worth using there)."""
        return "mixed_float16" if self.gpu else "mixed_bfloat16"

    @property
    def prefetch_device(self):
        """Where input batches are staged ahead of the step: the GPU, or None (they stay on the host)."""
        return "/device:GPU:0" if self.gpu else None

    def check_compute_format(self, compute_format):
        if compute_format == "NCHW" and not self.gpu:
            raise UserError(NCHW_NEEDS_GPU)


CPU = Platform(gpu=False)

# x86 CPU flags (/proc/cpuinfo) of bfloat16 arithmetic that oneDNN uses for bf16 matmuls and convolutions.
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bfloat16_support(cpuinfo="/proc/cpuinfo"):
    """True when the CPU computes in bfloat16 natively (AVX512-BF16 or AMX-BF16), False when its flags show
    neither (bfloat16 is then emulated in float32), None when the flags cannot be read (not x86 Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return any(flag in flags for flag in NATIVE_BFLOAT16_FLAGS)
    except OSError:
        return None
    return None


def _switched_on(environ, name):
    """Whether the environment variable `name` says yes, as TensorFlow reads its boolean switches ("1" or "true")."""
    return environ.get(name, "").strip().lower() in ("1", "true")


def _set_before_tensorflow(environ, name, value):
    """A process-wide TensorFlow setting read once at start-up: set only while TensorFlow is not imported yet, and
    never over a value the user gave."""
    if "tensorflow" not in sys.modules:
        environ.setdefault(name, value)


FROZEN_WEIGHTS_ENV = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"
FROZEN_WEIGHTS_NOTE = ("Weights fixed for this process ({}=1): oneDNN reorders each conv weight once, not on every "
                       "call".format(FROZEN_WEIGHTS_ENV))


def frozen_weights_assumed(environ=os.environ):
    """Whether oneDNN is told (by the environment) that every conv and matmul weight never changes."""
    return _switched_on(environ, FROZEN_WEIGHTS_ENV)


def frozen_weights_parameters(environ=os.environ):
    """What a run's PARAMETER record adds when oneDNN assumes frozen weights: {"onednn_frozen_weights": True}, or {}."""
    return {"onednn_frozen_weights": True} if frozen_weights_assumed(environ) else {}


def assume_frozen_weights(environ=os.environ):
    """For a process that serves weights it loads once: oneDNN then reorders each conv/matmul weight into its own
    layout once and keeps that copy, instead of on every call (docs/PERFORMANCE.md, Serving at batch 1). The setting
    is process-wide and read once, and a kernel keeps the first weights it saw: a training step, weights restored or
    swapped after a first call, or an eager conv would silently compute with stale weights. So only a tool run as a
    script, in a mode that loads its weights once, calls this, before TensorFlow is imported; a value the user set
    is kept. Returns whether the process now assumes frozen weights."""
    _set_before_tensorflow(environ, FROZEN_WEIGHTS_ENV, "1")
    return frozen_weights_assumed(environ)


POOLED_CPU_MEMORY_ENV = "TF_CPU_ALLOCATOR_USE_BFC"


def cpu_memory_pooled(environ=os.environ):
    """Whether the environment asks TensorFlow for its pooling (BFC) allocator for CPU tensors."""
    return _switched_on(environ, POOLED_CPU_MEMORY_ENV)


def pool_cpu_memory(environ=os.environ):
    """For a process run as a script: TensorFlow keeps the memory of freed CPU tensors in its own pool (the BFC
    allocator it uses for a GPU's host memory) instead of handing each one to malloc. malloc maps a buffer above
    32 MB (a 224 px activation at batch 32 is 103 MB) afresh from the kernel on every allocation, so every step
    faulted in and zeroed its largest tensors again, page by page (docs/PERFORMANCE.md, CPU memory). The pool keeps
    the process's resident memory at its peak instead of returning it between steps. Read once, when TensorFlow
    makes its first CPU tensor: so this is done before TensorFlow is imported, or not at all; a value the user set
    is kept. Returns whether the process pools its CPU memory."""
    _set_before_tensorflow(environ, POOLED_CPU_MEMORY_ENV, "true")
    return cpu_memory_pooled(environ)


def setup_devices(**options):
    """_setup_devices(**options), where a process whose TensorFlow already runs with another device set-up (a second
    run called in-process with other devices, replicas or --cpu) gets one line instead of TensorFlow's RuntimeError:
    devices can be configured only before TensorFlow starts."""
    try:
        return _setup_devices(**options)
    except RuntimeError as error:
        if "after being initialized" not in str(error):
            raise
        raise UserError("this process already runs TensorFlow with another device set-up than this run asks for "
                        "({}): run it in a process of its own".format(first_line(error))) from None


def _setup_devices(*, cpu=False, gpu_id=0, engine=None, dali_memory_fraction=None, cpu_replicas=1):
    """Makes this process's GPUs visible and returns its Platform: one GPU per process (--gpu_id alone; the local
    rank's under multi-process engines), all visible GPUs under RN50_ENGINE=mirrored, none with --cpu.
    `dali_memory_fraction` (DALI runs): each GPU gets that share of memory (DALI needs the rest); otherwise memory
    grows on demand. `cpu_replicas` > 1 without a GPU under RN50_ENGINE=mirrored: the CPU is split into that many
    logical devices and mirrored over, so the single-node multi-GPU path runs on CPU."""
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if cpu or not gpus:
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        if cpu_replicas > 1 and engine is not None and engine.name == "mirrored":
            physical = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                physical, [tf.config.LogicalDeviceConfiguration() for _ in range(cpu_replicas)])
            return Platform(gpu=False, replica_devices=tuple("/cpu:{}".format(i) for i in range(cpu_replicas)))
        return CPU
    if engine is not None and engine.name == "mirrored":
        selected_gpus = gpus
    elif engine is not None and engine.multi_process:
        # The launchers that pin one GPU per worker leave it alone visible; mpirun leaves all: take local_rank's.
        selected_gpus = [gpus[engine.local_rank % len(gpus)]]
    else:
        if gpu_id >= len(gpus):
            raise UserError("--gpu_id {} but only {} GPU(s) visible".format(gpu_id, len(gpus)))
        selected_gpus = [gpus[gpu_id]]
    tf.config.set_visible_devices(selected_gpus, "GPU")
    for selected in selected_gpus:
        if dali_memory_fraction is not None:
            limit_gpu_memory(selected, dali_memory_fraction)
        else:
            tf.config.experimental.set_memory_growth(selected, True)
    return Platform(gpu=True, devices=tuple(gpu_description(selected) for selected in selected_gpus))


def gpu_description(device):
    """"GPU:<index> <model name>" of a physical GPU device (its index among the GPUs visible to the process, as
    --gpu_id counts them), without the name when TensorFlow cannot say it."""
    import tensorflow as tf
    label = "GPU:{}".format(device.name.rsplit(":", 1)[-1])
    try:
        name = tf.config.experimental.get_device_details(device).get("device_name")
    except Exception:  # noqa: BLE001 - a device TensorFlow cannot describe: named by its index alone
        name = None
    return "{} {}".format(label, name) if name else label


def gpu_total_memory_mb(index):
    """Total memory of GPU `index` in MiB from nvidia-smi, or None when it cannot be read."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", str(index)],
            capture_output=True, text=True, timeout=20, check=True).stdout
        return int(output.strip().splitlines()[0])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def limit_gpu_memory(device, fraction):
    """`--gpu_memory_fraction` with DALI (DALI needs the rest): a logical device with that share of memory;
    memory growth when the total is unknown."""
    import tensorflow as tf
    index = int(device.name.rsplit(":", 1)[-1])
    total = gpu_total_memory_mb(index)
    if total is None:
        tf.config.experimental.set_memory_growth(device, True)
        return
    tf.config.set_logical_device_configuration(
        device, [tf.config.LogicalDeviceConfiguration(memory_limit=int(total * fraction))])

"""GPU memory set-up that replaces the TF1 session options (docs/ORIGINAL.md#runtime-environment)."""

import shutil
import subprocess

import tensorflow as tf


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
    index = int(device.name.rsplit(":", 1)[-1])
    total = gpu_total_memory_mb(index)
    if total is None:
        tf.config.experimental.set_memory_growth(device, True)
        return
    tf.config.set_logical_device_configuration(
        device, [tf.config.LogicalDeviceConfiguration(memory_limit=int(total * fraction))])

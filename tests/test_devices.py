"""utils/devices.py: which GPUs each process takes (against a tf.config that shows four), and what the Platform
decided at start-up means for the model (AMP dtype, where batches are staged, the NCHW check)."""

import sys

import pytest
import tensorflow as tf

from utils.devices import CPU, NCHW_NEEDS_GPU, Platform
from utils.errors import UserError


@pytest.fixture
def four_fake_gpus(monkeypatch):
    """tf.config as it looks with four GPUs: what utils/devices.setup_devices asks for and sets is recorded."""
    import types
    from utils import devices
    gpus = [types.SimpleNamespace(name="/physical_device:GPU:{}".format(i), device_type="GPU") for i in range(4)]
    calls = {"visible": [], "growth": [], "logical": []}
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: gpus if kind == "GPU" else [])
    monkeypatch.setattr(tf.config, "set_visible_devices",
                        lambda chosen, kind=None: calls["visible"].append([d.name[-1] for d in chosen]))
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth",
                        lambda device, on: calls["growth"].append(device.name[-1]))
    monkeypatch.setattr(tf.config, "set_logical_device_configuration",
                        lambda device, configs: calls["logical"].append((device.name[-1], configs[0].memory_limit)))
    monkeypatch.setattr(devices, "gpu_total_memory_mb", lambda index: 16000)
    return calls


@pytest.mark.gpu_path
def test_device_selection_gives_each_process_the_gpus_its_engine_asks_for(four_fake_gpus):
    from utils.devices import setup_devices
    from utils.distributed import Engine
    calls = four_fake_gpus
    assert setup_devices(gpu_id=2) == Platform(gpu=True)  # --gpu_id alone
    assert calls["visible"][-1] == ["2"] and calls["growth"] == ["2"]
    setup_devices(engine=Engine("multi_worker", rank=5, size=8, local_rank=5))  # local rank 5 of 4 GPUs
    assert calls["visible"][-1] == ["1"]
    setup_devices(engine=Engine("mirrored"))  # one process drives them all
    assert calls["visible"][-1] == ["0", "1", "2", "3"]
    setup_devices(gpu_id=0, dali_memory_fraction=0.7)  # DALI: --gpu_memory_fraction of the GPU, not growth
    assert calls["logical"] == [("0", int(16000 * 0.7))]
    assert setup_devices(cpu=True) == CPU and calls["visible"][-1] == []  # --cpu hides every GPU
    with pytest.raises(UserError, match="--gpu_id 4 but only 4 GPU"):
        setup_devices(gpu_id=4)


def test_devices_asked_for_after_tensorflow_started_with_others_are_one_line(monkeypatch):
    """A second run in the same process with another device set-up (RN50_CPU_REPLICAS=2 after a run on one CPU
    device): TensorFlow refuses to reconfigure, which was a RuntimeError traceback."""
    from utils.devices import setup_devices
    from utils.distributed import Engine

    def refuse(*args, **kwargs):
        raise RuntimeError("Virtual devices cannot be modified after being initialized")

    monkeypatch.setattr(tf.config, "set_logical_device_configuration", refuse)
    with pytest.raises(UserError, match=r"^this process already runs TensorFlow with another device set-up than "
                                        r"this run asks for \(Virtual devices cannot be modified after being "
                                        r"initialized\): run it in a process of its own$"):
        setup_devices(engine=Engine("mirrored"), cpu_replicas=2)
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: (_ for _ in ()).throw(
        RuntimeError("another failure")))
    with pytest.raises(RuntimeError, match="another failure"):  # not taken for a device set-up clash
        setup_devices()


def test_the_platform_gives_the_amp_dtype_the_staging_device_and_the_layouts_it_can_run():
    gpu = Platform(gpu=True)
    assert (gpu.amp_policy, gpu.prefetch_device) == ("mixed_float16", "/device:GPU:0")
    assert (CPU.amp_policy, CPU.prefetch_device) == ("mixed_bfloat16", None)
    for compute_format in ("NHWC", "NCHW"):
        gpu.check_compute_format(compute_format)
    CPU.check_compute_format("NHWC")
    with pytest.raises(UserError) as error:
        CPU.check_compute_format("NCHW")
    assert str(error.value) == NCHW_NEEDS_GPU and "use --data_format NHWC" in str(error.value)


def test_cpu_bfloat16_support_reads_the_cpu_flags(tmp_path):
    from utils.devices import cpu_bfloat16_support
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16\n")
    assert cpu_bfloat16_support(str(info)) is True
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma f16c\n")
    assert cpu_bfloat16_support(str(info)) is False
    info.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # aarch64 names its features otherwise
    assert cpu_bfloat16_support(str(info)) is None
    assert cpu_bfloat16_support(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("setting", ["frozen weights", "pooled CPU memory"])
def test_a_process_setting_is_made_only_before_tensorflow_starts_and_never_over_the_users_value(setting,
                                                                                               monkeypatch):
    from utils import devices
    make, made, variable, yes, no, also_yes = {
        "frozen weights": (devices.assume_frozen_weights, devices.frozen_weights_assumed, devices.FROZEN_WEIGHTS_ENV,
                           "1", "0", "true"),
        "pooled CPU memory": (devices.pool_cpu_memory, devices.cpu_memory_pooled, devices.POOLED_CPU_MEMORY_ENV,
                              "true", "false", "1"),
    }[setting]
    environ = {}
    assert make(environ) is False and environ == {}  # TensorFlow is imported here
    monkeypatch.delitem(sys.modules, "tensorflow")
    assert make(environ) is True and environ == {variable: yes}
    said_no = {variable: no}
    assert make(said_no) is False and said_no == {variable: no}
    assert made({variable: also_yes})


# A child process: the minor page faults per call of an op whose 64 MB result is dropped after each call, as a
# share of the result's pages.
FAULTS_PER_RESULT_PAGE = """
import resource
import tensorflow as tf
values = tf.ones([16 * 1024 * 1024])
double = tf.function(lambda tensor: tensor * 2.0)
for _ in range(2):
    double(values)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    double(values)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5 / (64 * 1024 * 1024 / resource.getpagesize()))
"""


def test_pooled_cpu_memory_stops_each_large_tensor_from_being_faulted_in_again():
    """What utils/devices.pool_cpu_memory is for, held to TensorFlow itself: with malloc a 64 MB result is mapped
    afresh and faulted in again on every call; in the pool its memory is reused."""
    from tests._cli import child_env, run_command
    from utils import devices
    shares = {}
    for pooled in ("false", "true"):
        result = run_command([sys.executable, "-c", FAULTS_PER_RESULT_PAGE],
                             env=child_env(**{devices.POOLED_CPU_MEMORY_ENV: pooled}))
        shares[pooled] = float(result.stdout.strip().splitlines()[-1])
    # The pool's result pages are not faulted in again. malloc's are where glibc maps each large result afresh (the
    # AVX2 machines: about once a page, or once per 2 MB where transparent huge pages are always on); on others
    # (an AVX-512 machine, 2026-12-07) it reused them in some runs and not in others, so its figure is no fixed
    # reference and is compared only where it shows the faults.
    assert shares["true"] < 0.01, shares
    if shares["false"] >= 0.01:
        assert shares["true"] < 0.1 * shares["false"], shares


@pytest.mark.parametrize("mode", ["train", "train_and_evaluate", "evaluate", "training_benchmark"])
def test_a_mode_that_changes_or_swaps_weights_refuses_the_frozen_weights_setting(mode, monkeypatch, tmp_path):
    """With TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 a oneDNN conv keeps the first weights it saw: training, or evaluate's
    swap to the EMA weights, would compute with stale ones. One line and exit 2, before TensorFlow runs a step."""
    from tests._cli import main_in_process
    monkeypatch.setenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "1")
    result = main_in_process("--mode", mode, "--batch_size", 2, "--num_iter", 1, "--iter_unit", "batch", "--cpu",
                             "--results_dir", tmp_path, "--model_dir", tmp_path, "--data_dir", tmp_path, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == ("ERROR: TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 makes oneDNN keep the first weights "
                                     f"each conv sees; --mode {mode} changes or swaps weights and would compute "
                                     "with stale ones: unset it")


def test_the_devices_a_process_computes_on_are_named_for_its_log(four_fake_gpus, monkeypatch):
    """setup_devices names the GPUs it chose (index as --gpu_id counts them, and TensorFlow's model name where it
    gives one) for the PARAMETER record's environment.devices; no GPU is "CPU", RN50_CPU_REPLICAS's logical CPUs are
    each named."""
    from utils.devices import setup_devices
    from utils.distributed import Engine
    names = {"2": "NVIDIA A100-SXM4-80GB"}
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda device: {"device_name": names[device.name[-1]]} if device.name[-1] in names else {})
    assert setup_devices(gpu_id=2).describe_devices() == ["GPU:2 NVIDIA A100-SXM4-80GB"]
    assert setup_devices(engine=Engine("mirrored")).describe_devices() == [
        "GPU:0", "GPU:1", "GPU:2 NVIDIA A100-SXM4-80GB", "GPU:3"]

    def undescribed(device):
        raise ValueError("no details")
    monkeypatch.setattr(tf.config.experimental, "get_device_details", undescribed)
    assert setup_devices(gpu_id=1).describe_devices() == ["GPU:1"]
    assert CPU.describe_devices() == ["CPU"]
    assert Platform(replica_devices=("/cpu:0", "/cpu:1")).describe_devices() == ["CPU:0", "CPU:1"]
    assert Platform(gpu=True).describe_devices() == ["GPU"]

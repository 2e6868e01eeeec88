"""What a run decides once, before any model exists: devices (utils/devices.Platform), precision
(utils/precision.Precision), XLA clustering, seeds; and the model those decisions give. main.py, inference.py and
bench/ call these; library code below takes the results as arguments."""

import contextlib
import os

import keras

from utils.devices import Platform, setup_devices
from utils.precision import Precision


def set_up(config, engine=None):
    """(Platform, Precision) of this process: its GPUs made visible (or none with --cpu), the --data_format checked
    against them, --amp / --amp_dtype resolved for them."""
    platform = setup_devices(cpu=config.cpu, gpu_id=config.gpu_id, engine=engine,
                             dali_memory_fraction=config.gpu_memory_fraction if config.uses_dali else None,
                             cpu_replicas=_cpu_replicas(engine=engine))
    platform.check_compute_format(config.data_format)
    return platform, Precision.resolve(config.amp, config.static_loss_scale, platform, config.amp_dtype)


def _cpu_replicas(environ=None, engine=None):
    """RN50_CPU_REPLICAS=N (with RN50_ENGINE=mirrored, no GPU): N logical CPU devices as replicas (docs/GPU.md). Under
    another engine (`engine`, utils/engines.Engine) N > 1 is refused: it was ignored without a word."""
    import os
    value = (os.environ if environ is None else environ).get("RN50_CPU_REPLICAS", "1")
    try:
        replicas = int(value)
    except ValueError:
        replicas = 0
    if replicas < 1:
        from utils.errors import UserError
        raise UserError("RN50_CPU_REPLICAS={} is not a positive integer".format(value))
    if replicas > 1 and engine is not None and engine.name != "mirrored":
        from utils.errors import UserError
        raise UserError("RN50_CPU_REPLICAS={} splits the CPU into replicas only under RN50_ENGINE=mirrored (this run's "
                        "engine: {}): set RN50_ENGINE=mirrored too, or unset RN50_CPU_REPLICAS".format(
                            value.strip(), engine.name))
    return replicas


# Environment variables that change a run's arithmetic or its threads without a flag, by name: TensorFlow's
# runtime switches, XLA's, and OpenMP's, oneDNN's and MKL's. A list of the known ones, not a prefix: other programs
# share the TF_ prefix (Terraform and OpenTofu keep credentials and passphrases in TF_HTTP_*, TF_ENCRYPTION,
# TF_TOKEN_*), and none of those belongs in a log. TF_CONFIG is recorded as the engine's source instead.
RECORDED_VARIABLES = ("TF_ENABLE_ONEDNN_OPTS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                      "TF_DETERMINISTIC_OPS", "TF_CUDNN_DETERMINISTIC", "TF_XLA_FLAGS", "XLA_FLAGS",
                      "TF_ENABLE_AUTO_MIXED_PRECISION", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR",
                      "TF_GPU_THREAD_MODE", "TF_GPU_THREAD_COUNT", "TF_CUDNN_USE_AUTOTUNE", "TF_CUDNN_USE_FRONTEND",
                      "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT", "TF_AUTOTUNE_THRESHOLD",
                      "TF_ENABLE_WINOGRAD_NONFUSED", "TF_MKL_OPTIMIZE_PRIMITIVE_MEMUSE",
                      "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR",
                      "TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD", "TF_CPU_ALLOCATOR_USE_BFC",
                      "TF_CPU_BFC_MEM_LIMIT_IN_MB", "TF_USE_LEGACY_KERAS", "CUDA_VISIBLE_DEVICES")
RECORDED_VARIABLE_PREFIXES = ("OMP_", "KMP_", "MKL_", "ONEDNN_", "DNNL_")
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSPHRASE", "CREDENTIAL", "KEY")


def _recorded_variable(name):
    return (name in RECORDED_VARIABLES or name.startswith(RECORDED_VARIABLE_PREFIXES)) and \
        not any(word in name for word in SECRET_WORDS)


def recorded_variables(environ=None):
    """{name: value} of the variables above that are set in `environ` (the process's by default), by name."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in sorted(environ) if _recorded_variable(name)}


def environment_parameters(engine=None, environ=None, devices=None):
    """The PARAMETER record's `environment`: what decides a run's arithmetic beyond its flags, and where it ran. The
    same seeded run gave other losses from step 1 under OMP_NUM_THREADS=1 TF_NUM_INTRAOP_THREADS=1 taskset -c 0, or
    under TF_ENABLE_ONEDNN_OPTS=0, with an identical record: the CPU cores the process may use, TensorFlow's
    intra-/inter-op thread counts (`auto (N cores)` when TensorFlow chooses), the variables above that are set, and
    the engine with the variable it was chosen from. Then the `devices` it computes on (Platform.describe_devices:
    a run without --cpu on a machine without a GPU said `cpu : False` and nothing else), the host, the TensorFlow and
    Keras versions and the code's version (code_version)."""
    import socket

    import tensorflow as tf
    from utils.engines import Engine, number_ranges
    environ = os.environ if environ is None else environ
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))

    def threads(count):
        return count or "auto ({} cores)".format(len(cores))

    return {"environment": {
        "engine": (engine or Engine("single")).describe(),
        "cpu_cores": number_ranges(cores),
        "intra_op_threads": threads(tf.config.threading.get_intra_op_parallelism_threads()),
        "inter_op_threads": threads(tf.config.threading.get_inter_op_parallelism_threads()),
        "variables": recorded_variables(environ),
        **({"devices": list(devices)} if devices is not None else {}),
        "host": socket.gethostname(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "code_version": code_version(),
    }}


# The repository this code is a checkout of (runtime/ is one level below its root).
CODE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_A_CHECKOUT = "unknown (not a git checkout)"


def code_version(root=CODE_ROOT, git="git"):
    """The git commit of the code at `root`, `<commit> (modified)` when tracked files differ from it, or why it is
    unknown; never an error. Asked of `git` (which also sees the changes) where it runs; else read from .git (the
    commit alone: whether files changed cannot be told without git)."""
    import shutil
    import subprocess
    if not os.path.exists(os.path.join(root, ".git")):
        return NOT_A_CHECKOUT

    def ask(*args):
        try:
            # (--no-optional-locks: status leaves the index alone, so a git command of the user's never finds it
            # locked by a starting run)
            result = subprocess.run([git, "--no-optional-locks", "-C", root, *args], capture_output=True,
                                    text=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    commit = ask("rev-parse", "--verify", "HEAD") if shutil.which(git) else None
    if commit:
        changed = ask("status", "--porcelain", "--untracked-files=no")
        return commit + (" (modified)" if changed else "" if changed is not None else " (changes not checked)")
    commit = _head_commit(os.path.join(root, ".git"))
    return "{} (changes not checked: read from .git)".format(commit) if commit else "unknown (.git unreadable)"


def _head_commit(git_dir):
    """The commit HEAD names in the .git directory `git_dir` (or a .git file's `gitdir:`), or None."""
    import re
    try:
        if os.path.isfile(git_dir):
            with open(git_dir, encoding="utf-8") as handle:
                line = handle.read().strip()
            if not line.startswith("gitdir:"):
                return None
            git_dir = os.path.join(os.path.dirname(git_dir), line[len("gitdir:"):].strip())
        with open(os.path.join(git_dir, "HEAD"), encoding="utf-8") as handle:
            head = handle.read().strip()
        if not head.startswith("ref:"):
            return head if re.fullmatch("[0-9a-f]{40}([0-9a-f]{24})?", head) else None
        ref = head[len("ref:"):].strip()
        # A worktree's branches live in the common directory (`commondir`).
        common = git_dir
        if os.path.isfile(os.path.join(git_dir, "commondir")):
            with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as handle:
                common = os.path.join(git_dir, handle.read().strip())
        for directory in (git_dir, common):
            path = os.path.join(directory, *ref.split("/"))
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as handle:
                    return handle.read().strip() or None
        with open(os.path.join(common, "packed-refs"), encoding="utf-8") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except (OSError, UnicodeDecodeError):
        return None
    return None


def configure_xla(config, distribution):
    """--xla: the train step's core is compiled with jit_compile where the engine allows collectives outside it
    (`distribution.jit_in_step`); otherwise (Horovod) TF's auto-clustering is turned on, process-wide, so XLA
    clusters around the all-reduce. Returns whether the step itself is jit-compiled."""
    if not config.xla:
        return False
    if distribution.jit_in_step:
        return True
    import tensorflow as tf
    tf.config.optimizer.set_jit("autoclustering")
    return False


# Why --seed leaves op determinism off with --xla: TF 2.21's XLA refuses to compile the max-pool gradient under it.
XLA_NOT_DETERMINISTIC = ("Note: --seed with --xla seeds every random stream but leaves TensorFlow's op determinism "
                         "off (TensorFlow 2.21's XLA refuses to compile the max-pool gradient under it): a resumed or "
                         "repeated run was bit-identical on CPU, but is not guaranteed to be on a GPU")


def configure_determinism(config, log):
    """--seed makes TensorFlow's ops deterministic (a resumed run is bit-identical, docs/RELIABILITY.md#exact-resume),
    except with --xla in a mode that trains, where XLA cannot compile the max-pool gradient deterministically: the
    seeds then stay and the log says what is lost. Returns whether op determinism is on."""
    import tensorflow as tf
    from tensorflow.python.framework import config as tf_config
    wanted = config.seed is not None
    if wanted and config.xla and config.mode in ("train", "train_and_evaluate", "training_benchmark"):
        log(XLA_NOT_DETERMINISTIC)
        wanted = False
    if wanted:
        tf.config.experimental.enable_op_determinism()
    elif tf_config.is_op_determinism_enabled():
        # A caller that runs several tools in one process (tests) left it on: it is process-wide, and XLA fails under it
        tf_config.disable_op_determinism()
    # Grappler's arithmetic optimizer merges chains of adds into one AddN, whose CPU kernel adds three or more
    # inputs in a run-dependent order (it starts from whichever input buffer it can reuse): op determinism does not
    # cover that, so a seeded QAT run keeps the gradient sums of its folded convs as written. The float step has no
    # such chain (its L2 term is one reduction) and keeps the optimizer (docs/DEVIATIONS.md#training, "Seeds").
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": not (wanted and config.quantize)})
    return wanted


def set_seeds(seed, rank):
    """Per-rank seeding (docs/ORIGINAL.md#seeds): seed * 2 + rank for Python, NumPy and TF. Without a seed, a
    process that an earlier run seeded (tools called in-process) gets a seed drawn from the OS, so the run is as
    random as in a process of its own."""
    global _seeded
    if seed is None:
        if _seeded:
            keras.utils.set_random_seed(int.from_bytes(os.urandom(4), "little") % 2 ** 31)
            _seeded = False
        return
    keras.utils.set_random_seed(seed * 2 + rank)
    _seeded = True


_seeded = False  # an earlier run in this process seeded Python's, NumPy's and TensorFlow's generators


@contextlib.contextmanager
def process_settings_restored():
    """Puts back, when the run ends, the process-wide TensorFlow settings a run changes (op determinism for --seed,
    Grappler's arithmetic optimizer for --seed --quantize, XLA auto-clustering for --xla under Horovod), so that a
    later call in the same process, or the caller's own code, does not inherit them."""
    import tensorflow as tf
    from tensorflow.python.framework import config as tf_config
    determinism, jit = tf_config.is_op_determinism_enabled(), tf.config.optimizer.get_jit()
    arithmetic = tf.config.optimizer.get_experimental_options().get("arithmetic_optimization", True)
    try:
        yield
    finally:
        if tf_config.is_op_determinism_enabled() != determinism:
            (tf_config.enable_op_determinism if determinism else tf_config.disable_op_determinism)()
        if tf.config.optimizer.get_jit() != jit:
            tf.config.optimizer.set_jit(jit or False)
        if tf.config.optimizer.get_experimental_options().get("arithmetic_optimization", True) != arithmetic:
            tf.config.optimizer.set_experimental_options({"arithmetic_optimization": arithmetic})


def quantization_config(config):
    """QAT settings for resnet.build_model (None without --quantize); training calls quantise, evaluation,
    predict and export run the float path (docs/ORIGINAL.md#quantisation-aware-training)."""
    from model.layers.quantization import QuantizationConfig
    return QuantizationConfig.from_flags(config.quantize, config.symmetric, config.use_qdq, config.quant_delay)


def build_model(config, platform=Platform(), precision=Precision(), purpose="train", kernels=None):
    """The model of the run configuration (call it inside the distribution strategy's scope). `purpose` ("train",
    "inference" or "export") picks its conv formulations with `platform`, `kernels` (a model.kernels.Kernels)
    overrides them (model/resnet.build_model)."""
    from model import resnet
    return resnet.build_model(
        config.arch,
        num_classes=config.num_classes,
        compute_format=config.data_format,
        dtype_policy=precision.policy,
        weight_init=config.weight_init,
        use_final_conv=config.use_final_conv,
        input_normalized=config.uses_dali,
        image_size=config.input_size,
        seed=config.seed,
        platform=platform,
        purpose=purpose,
        kernels=kernels,
        quantization=quantization_config(config),
    )

"""runtime/startup.py: what a run decides before any model exists (RN50_CPU_REPLICAS, the per-rank seeds, XLA, the
QAT settings) and the model those decisions give (its conv kernels per purpose, its input size and classes)."""

import os
import random
import shutil
import socket
import subprocess
import types

import keras

import numpy as np
import pytest
import tensorflow as tf

from model.kernels import CPU_PLAIN_KERNELS, choose_kernels
from model.layers.conv import Conv2D
from model.layers.quantization import QuantizationConfig
from runtime import startup
from runtime.config import RunConfig
from utils.devices import CPU
from utils.engines import number_ranges
from utils.errors import UserError


def test_cpu_replicas_come_from_the_environment_and_must_be_a_positive_integer():
    assert startup._cpu_replicas({}) == 1
    assert startup._cpu_replicas({"RN50_CPU_REPLICAS": "3"}) == 3
    assert startup._cpu_replicas({"RN50_CPU_REPLICAS": " 2 "}) == 2  # int() takes surrounding blanks
    for value in ("0", "-2", "two", "1.5", ""):
        with pytest.raises(UserError) as error:
            startup._cpu_replicas({"RN50_CPU_REPLICAS": value})
        assert str(error.value) == "RN50_CPU_REPLICAS={} is not a positive integer".format(value)
    # under another engine it was ignored without a word (one CPU device, `Num GPUs 1`)
    from utils.engines import Engine
    mirrored, single = Engine(name="mirrored"), Engine(name="single")
    assert startup._cpu_replicas({"RN50_CPU_REPLICAS": "2"}, engine=mirrored) == 2
    assert startup._cpu_replicas({"RN50_CPU_REPLICAS": "1"}, engine=single) == 1
    with pytest.raises(UserError) as error:
        startup._cpu_replicas({"RN50_CPU_REPLICAS": "2"}, engine=single)
    assert str(error.value) == ("RN50_CPU_REPLICAS=2 splits the CPU into replicas only under RN50_ENGINE=mirrored "
                                "(this run's engine: single): set RN50_ENGINE=mirrored too, or unset RN50_CPU_REPLICAS")


@pytest.fixture
def restored_random_state():
    """Puts back the Python and NumPy random states and clears TF's global seed after the test."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    yield
    random.setstate(python_state)
    np.random.set_state(numpy_state)
    tf.random.set_seed(None)


def _draws():
    return random.random(), float(np.random.random_sample()), float(tf.random.uniform([]))


def test_seeds_are_seed_times_2_plus_rank_for_python_numpy_and_tensorflow(restored_random_state):
    """Seed 3, rank 1: 7, the value docs/ORIGINAL.md#seeds gives (not 3 + 1, 3 * 2 or 3)."""
    startup.set_seeds(3, 1)
    seeded = _draws()
    random.seed(7)
    np.random.seed(7)
    tf.random.set_seed(7)
    assert seeded == _draws()
    for other in (3, 4, 6):
        random.seed(other)
        np.random.seed(other)
        tf.random.set_seed(other)
        assert _draws()[:2] != seeded[:2], other
    # No --seed after a seeded run in the same process (tools called in-process): drawn afresh, not the seeded
    # streams run on (2026-12-06: a later unseeded run got the same weights in every session).
    after_seeded = []
    for _ in range(2):
        startup.set_seeds(3, 1)
        startup.set_seeds(None, 1)
        after_seeded.append(_draws())
    assert after_seeded[0][:2] != after_seeded[1][:2]
    # No --seed in a process no run seeded since: nothing is seeded, the states run on.
    python_state, numpy_state = random.getstate(), np.random.get_state()
    startup.set_seeds(None, 1)
    assert random.getstate() == python_state
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy_state))


def test_a_runs_process_wide_settings_are_put_back_when_it_ends():
    """--seed's op determinism and --xla's auto-clustering under Horovod stayed on after an in-process run, for the
    caller's code and the next run."""
    from tensorflow.python.framework import config as tf_config
    assert not tf_config.is_op_determinism_enabled() and not tf.config.optimizer.get_jit()
    with startup.process_settings_restored():
        startup.configure_determinism(RunConfig(seed=1, quantize=True), print)
        startup.configure_xla(RunConfig(xla=True), types.SimpleNamespace(jit_in_step=False))
        assert tf.config.optimizer.get_jit() == "autoclustering" and tf_config.is_op_determinism_enabled()
        assert tf.config.optimizer.get_experimental_options()["arithmetic_optimization"] is False
    assert not tf_config.is_op_determinism_enabled() and not tf.config.optimizer.get_jit()
    assert tf.config.optimizer.get_experimental_options().get("arithmetic_optimization", True) is True


def test_xla_is_compiled_into_the_step_only_with_xla_and_an_engine_that_allows_it():
    allows = types.SimpleNamespace(jit_in_step=True)
    assert startup.configure_xla(RunConfig(), allows) is False
    assert startup.configure_xla(RunConfig(), types.SimpleNamespace(jit_in_step=False)) is False
    assert startup.configure_xla(RunConfig(xla=True), allows) is True


def test_quantization_settings_are_none_without_quantize_and_carry_its_flags():
    assert startup.quantization_config(RunConfig()) is None
    # Outside training the QAT flags are accepted without --quantize, and still give the float model.
    assert startup.quantization_config(RunConfig(mode="evaluate", symmetric=True, quant_delay=4)) is None
    config = RunConfig(mode="train", quantize=True, symmetric=True, use_qdq=True, quant_delay=9)
    assert startup.quantization_config(config) == QuantizationConfig(symmetric=True, use_qdq=True, quant_delay=9,
                                                                     quantized_inference=False)
    assert startup.quantization_config(RunConfig(mode="train", quantize=True)) == QuantizationConfig(
        symmetric=False, use_qdq=False, quant_delay=0)


def _conv_implementations(model):
    return {layer.implementation for layer in model._flatten_layers(include_self=False, recursive=True)
            if isinstance(layer, Conv2D)}


@pytest.mark.shallow
def test_the_model_of_the_run_has_the_kernels_of_its_purpose_its_classes_and_input_size():
    """On CPU: the training kernels ("cpu": matmul formulations) for training, plain convolutions ("native") for
    inference (model/kernels.choose_kernels); an explicit Kernels overrides them."""
    config = RunConfig(num_classes=7, image_size=32)
    trained = startup.build_model(config, CPU, purpose="train")
    assert _conv_implementations(trained) == {choose_kernels(CPU, "train").conv} == {"cpu"}
    assert tuple(trained.input_shape) == (None, 32, 32, 3) and tuple(trained.output_shape) == (None, 7)
    # A benchmark on synthetic data runs at --synthetic_data_size, not --image_size.
    benchmark = RunConfig(mode="inference_benchmark", num_classes=7, image_size=32, synthetic_data_size=40)
    inference = startup.build_model(benchmark, CPU, purpose="inference")
    assert _conv_implementations(inference) == {choose_kernels(CPU, "inference").conv} == {"native"}
    assert tuple(inference.input_shape) == (None, 40, 40, 3)
    assert _conv_implementations(startup.build_model(config, CPU, purpose="train", kernels=CPU_PLAIN_KERNELS)) == {
        "native"}


def test_a_seed_makes_ops_deterministic_except_where_xla_compiles_a_training_step():
    from tensorflow.python.framework import config as tf_config
    before = tf_config.is_op_determinism_enabled()
    said = []
    try:
        for mode, xla, seed, wanted, quantize in (("train", False, 1, True, False), ("train", False, 1, True, True),
                                                   ("train", True, 1, False, False),
                                                   ("training_benchmark", True, 1, False, False),
                                                   ("evaluate", True, 1, True, False),
                                                   ("train", False, None, False, True)):
            tf_config.enable_op_determinism()  # left on by an earlier run in this process
            said.clear()
            config = RunConfig(mode=mode, xla=xla, seed=seed, quantize=quantize)
            assert startup.configure_determinism(config, said.append) is wanted
            assert tf_config.is_op_determinism_enabled() is wanted
            # Grappler would merge the QAT step's two-term gradient sums into AddNs whose order of addition is decided
            # at run time; the float step has no such chain and keeps it
            assert tf_config.get_optimizer_experimental_options()["arithmetic_optimization"] is not (
                wanted and quantize)
            assert said == ([] if wanted or seed is None else [startup.XLA_NOT_DETERMINISTIC])
    finally:
        (tf_config.enable_op_determinism if before else tf_config.disable_op_determinism)()
        tf_config.set_optimizer_experimental_options({"arithmetic_optimization": True})


@pytest.mark.shallow  # the record is the subject, not the depth: two one-block-per-stage runs
def test_the_parameter_record_says_what_decides_the_arithmetic_beyond_the_flags(tmp_path, monkeypatch):
    """Two runs that differ only in an environment variable that changes their losses (OMP_NUM_THREADS here; likewise
    TF_ENABLE_ONEDNN_OPTS, TF_NUM_INTRAOP_THREADS, the CPU affinity) logged identical PARAMETER records: the record's
    `environment` now tells them apart, and names the engine and where it was chosen from."""
    import os
    from tests._cli import main_in_process
    from tests._reliability_helpers import SMALL
    from utils.logger import read_log

    main_output = {}

    def parameters(name, **variables):
        for key, value in variables.items():
            monkeypatch.setenv(key, value)
        main_output[name] = main_in_process(
            "--mode", "training_benchmark", "--batch_size", "2", "--num_iter", "1", "--iter_unit", "batch",
            "--warmup_steps", "0", "--results_dir", str(tmp_path / name), *SMALL, *["--cpu"] * (name == "cpu")).stdout
        record = next(r for r in read_log(str(tmp_path / name / "log.json")) if r.get("step") == "PARAMETER")["data"]
        return {key: value for key, value in record.items() if key not in ("results_dir", "model_dir")}

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    plain, one_thread = parameters("plain"), parameters("one_thread", OMP_NUM_THREADS="1")
    # Where it ran: no --cpu and no GPU is the CPU, in the record and in a line at start-up (not with --cpu).
    from main import NO_GPU_LINE
    assert plain["environment"]["devices"] == ["CPU"] and plain["cpu"] is False
    assert NO_GPU_LINE in main_output["plain"].splitlines()
    parameters("cpu")
    assert NO_GPU_LINE not in main_output["cpu"]
    # The original's replica count, said to be no GPUs; and where the log goes (a default --results_dir of `.`
    # appends to ./log.json unsaid)
    assert "Num GPUs 1 (replicas on the CPU: no GPU is used)" in main_output["cpu"].splitlines()
    assert "Log: {} (a new file)".format(tmp_path / "cpu" / "log.json") in main_output["cpu"].splitlines()
    assert (plain["environment"]["host"], plain["environment"]["tensorflow"], plain["environment"]["keras"]) == (
        socket.gethostname(), tf.__version__, keras.__version__)
    assert plain["environment"]["code_version"] == startup.code_version()
    assert plain != one_thread
    assert "OMP_NUM_THREADS" not in plain["environment"]["variables"]
    assert one_thread["environment"]["variables"]["OMP_NUM_THREADS"] == "1"
    assert plain["environment"]["engine"] == "single (no launcher variable set)"
    cores = sorted(os.sched_getaffinity(0))
    assert plain["environment"]["cpu_cores"] == number_ranges(cores)
    assert number_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert not any(name.startswith(("TF_CLI_", "TF_TOKEN_")) for name in plain["environment"]["variables"])
    # Known switches only: Terraform's and OpenTofu's TF_ variables hold credentials and passphrases.
    assert [name for name in ("TF_ENABLE_ONEDNN_OPTS", "TF_TOKEN_app_terraform_io", "TF_CLI_CONFIG_FILE", "TF_CONFIG",
                              "TF_ENCRYPTION", "TF_HTTP_ADDRESS", "TF_HTTP_USERNAME", "OMP_PROC_BIND", "MY_API_KEY",
                              "XLA_FLAGS") if startup._recorded_variable(name)] == [
        "TF_ENABLE_ONEDNN_OPTS", "OMP_PROC_BIND", "XLA_FLAGS"]
    plain["environment"]["variables"] = one_thread["environment"]["variables"]
    assert plain == one_thread  # nothing else differs


def _fake_git_dir(root, head, refs=None, packed=None):
    """A .git directory by hand (no git needed): HEAD, loose refs {name: commit}, packed-refs lines."""
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head + "\n")
    for name, commit in (refs or {}).items():
        (git / name).write_text(commit + "\n")
    if packed is not None:
        (git / "packed-refs").write_text(packed)
    return git


def test_the_code_version_is_the_checkouts_commit_or_says_why_it_is_unknown(tmp_path):
    """environment.code_version: git's commit (and `(modified)` when tracked files differ from it) where git runs;
    the commit read from .git without git (a loose ref, packed-refs, a detached HEAD, a worktree's .git file); a
    directory that is no checkout, or a damaged .git, says so and never stops the run."""
    commit, other = "a" * 40, "b" * 40
    assert startup.code_version(str(tmp_path)) == startup.NOT_A_CHECKOUT == "unknown (not a git checkout)"
    no_git = str(tmp_path / "no-such-git")
    loose = tmp_path / "loose"
    _fake_git_dir(loose, "ref: refs/heads/main", {"refs/heads/main": commit})
    assert startup.code_version(str(loose), git=no_git) == commit + " (changes not checked: read from .git)"
    packed = tmp_path / "packed"
    _fake_git_dir(packed, "ref: refs/heads/main", packed="# pack-refs with: peeled\n{} refs/heads/dev\n{} "
                  "refs/heads/main\n".format(other, commit))
    assert startup.code_version(str(packed), git=no_git).startswith(commit + " ")
    detached = tmp_path / "detached"
    _fake_git_dir(detached, other)
    assert startup.code_version(str(detached), git=no_git).startswith(other + " ")
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: ../loose/.git\n")
    assert startup.code_version(str(worktree), git=no_git).startswith(commit + " ")
    damaged = tmp_path / "damaged"
    _fake_git_dir(damaged, "ref: refs/heads/gone")
    assert startup.code_version(str(damaged), git=no_git) == "unknown (.git unreadable)"
    if shutil.which("git") is None:
        return
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "file.py").write_text("x = 1\n")
    environ = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ.get("PATH", "")}
    for command in (["init", "-q"], ["add", "file.py"], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", "-C", str(repo), *command], check=True, env=environ)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert startup.code_version(str(repo)) == head
    (repo / "untracked.txt").write_text("")
    assert startup.code_version(str(repo)) == head  # an untracked file is no change of the code
    (repo / "file.py").write_text("x = 2\n")
    assert startup.code_version(str(repo)) == head + " (modified)"


def test_the_environment_names_the_devices_host_and_versions():
    environment = startup.environment_parameters(devices=["GPU:0 NVIDIA A100-SXM4-80GB"])["environment"]
    assert environment["devices"] == ["GPU:0 NVIDIA A100-SXM4-80GB"]
    assert (environment["host"], environment["tensorflow"], environment["keras"]) == (
        socket.gethostname(), tf.__version__, keras.__version__)
    assert environment["code_version"] == startup.code_version()
    assert "devices" not in startup.environment_parameters()["environment"]  # a caller that does not know them

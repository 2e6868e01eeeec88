"""Every launch script of training/ in DRY_RUN=1 mode: it prints the command(s) it would run, and the main.py
arguments in them parse with runtime.config.parse_cmdline (docs/ORIGINAL.md#training-recipes,
docs/ORIGINAL.md#benchmark-scripts; the script bugs fixed)."""

import glob
import os
import shlex
import shutil
import sys

import pytest

from runtime.config import parse_cmdline
from tests._cli import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "training", "*", "*.sh")))
RECIPES = [path for path in SCRIPTS if os.path.basename(path).startswith(("DGX1_", "DGX2_", "DGXA100_"))]


def dry_run(script, *args, **env):
    environ = dict(os.environ, DRY_RUN="1", NUM_GPUS=env.pop("NUM_GPUS", "8"), **env)
    environ.pop("LAUNCHER", None) if "LAUNCHER" not in env else None
    result = run_command(["bash", script, *args], check=False, env=environ, timeout=60)
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if line.strip()]
    assert commands, "no command printed by " + script
    return commands


def split(command):
    """(launcher words, main.py arguments)."""
    index = next(i for i, word in enumerate(command) if word.endswith("main.py"))
    return command[:index + 1], command[index + 1:]


def test_all_scripts_are_there():
    names = {os.path.relpath(path, os.path.join(ROOT, "training")) for path in SCRIPTS}
    assert len(RECIPES) == 30
    for model in ("resnet50v1.5", "resnext101-32x4d", "se-resnext101-32x4d"):
        assert model + "/training_perf.sh" in names and model + "/inference_benchmark.sh" in names
    assert "resnet50v1.5/GPU1_RN50_QAT.sh" in names
    assert os.path.isfile(os.path.join(ROOT, "training", "slurm_example.sbatch"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: os.path.relpath(path, ROOT))
def test_dry_run_prints_commands_whose_flags_parse(script):
    args = ["/ckpt"] if script.endswith("QAT.sh") else []
    for command in dry_run(script, *args):
        _, main_args = split(command)
        parse_cmdline(main_args)


def test_qat_without_a_checkpoint_and_an_unknown_launcher_are_one_error_line():
    """The QAT recipe printed `--finetune_checkpoint=` (empty) and main.py trained QAT from fresh weights; an unknown
    LAUNCHER's line had no ERROR: prefix (a newcomer's audit, 2026-12-07)."""
    environ = dict(os.environ, DRY_RUN="1", NUM_GPUS="8")
    qat = os.path.join(ROOT, "training", "resnet50v1.5", "GPU1_RN50_QAT.sh")
    for args in ([], ["--batch_size=4"]):
        result = run_command(["bash", qat, *args], check=False, env=environ, timeout=60)
        assert (result.returncode, result.stdout, result.stderr) == (
            2, "", "ERROR: QAT fine-tunes a converged checkpoint: give it first (usage: GPU1_RN50_QAT.sh CHECKPOINT "
                   "[DATA_DIR] [RESULTS_DIR] [extra flags])\n")
    result = run_command(["bash", RECIPES[0], "/ws", "/dd"], check=False, env=dict(environ, LAUNCHER="bogus"),
                         timeout=60)
    assert (result.returncode, result.stderr) == (2, "ERROR: LAUNCHER must be tf, horovod or mpirun (got bogus)\n")


@pytest.mark.parametrize("script", RECIPES, ids=lambda path: os.path.basename(path))
def test_recipe_matches_the_table(script):
    name = os.path.basename(script)
    (command,) = dry_run(script, "/ws", "/dd", "--xla")
    launcher, main_args = split(command)
    args = parse_cmdline(main_args)
    parts = name[:-len(".sh")].split("_")
    system, precision, epochs = parts[0], parts[-2], parts[-1]
    expected_np = 16 if system == "DGX2" else 8  # the original's DGX2 250E scripts launched 8: fixed
    assert launcher[launcher.index("--nproc") + 1] == str(expected_np)
    assert launcher[launcher.index("-m") + 1] == "runtime.launch"
    model_dir = os.path.basename(os.path.dirname(script))
    assert args.arch == {"resnet50v1.5": "resnet50"}.get(model_dir, model_dir)  # SE DGX2 AMP 250E: fixed
    assert args.num_iter == int(epochs[:-1]) and args.iter_unit == "epoch"
    assert args.mixup == (0.2 if epochs == "250E" else 0.0)
    assert args.amp == (precision == "AMP")
    assert args.cosine_lr and args.label_smoothing == 0.1 and args.lr_init == 0.256 and args.lr_warmup_epochs == 8
    assert args.momentum == 0.875 and args.warmup_steps == 100 and args.weight_init == "fan_in"
    assert args.weight_decay == (3.0517578125e-05 if model_dir == "resnet50v1.5" else 6.103515625e-05)
    assert args.data_dir == "/dd/tfrecords" and args.data_idx_dir == "/dd/dali_idx" and args.results_dir == "/ws/results"
    assert args.xla and args.mode == "train_and_evaluate"


def test_a_recipe_starts_its_launcher_from_any_directory(tmp_path):
    """Run for real from another directory: the launcher imports the project (it once ran runtime/launch.py as a
    file, which put runtime/ on sys.path and failed with ModuleNotFoundError) and checks main.py's flags before
    starting any worker: a missing data directory is one line and exit 2. Without PYTHON the recipe runs the
    repository's .venv (it once ran python3, which lacks TensorFlow outside the venv: a traceback per worker)."""
    script = os.path.join(ROOT, "training", "resnet50v1.5", "DGX1_RN50_AMP_90E.sh")
    environ = {key: value for key, value in os.environ.items() if key not in ("DRY_RUN", "LAUNCHER", "PYTHONPATH")}
    environ.pop("PYTHON", None)
    if not os.access(os.path.join(ROOT, ".venv", "bin", "python"), os.X_OK):
        environ["PYTHON"] = sys.executable  # (an install without .venv; with it, the recipe's default is tried)
    result = run_command(["bash", script, str(tmp_path / "ws"), str(tmp_path / "absent"), "--cpu"], check=False,
                         env=environ, cwd=str(tmp_path), timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "ERROR: --data_dir {} does not exist or is not a directory".format(tmp_path / "absent" / "tfrecords")]


def test_a_recipe_runs_the_repositorys_venv_unless_python_is_given(tmp_path):
    script = os.path.join(ROOT, "training", "resnet50v1.5", "DGX1_RN50_FP32_90E.sh")
    (command,) = dry_run(script, PYTHON="/opt/py/bin/python3")
    assert "/opt/py/bin/python3" in command
    fake_root = tmp_path / "repo"  # a copy of training/ beside a .venv, and one without
    shutil.copytree(os.path.join(ROOT, "training"), fake_root / "training")
    without = dry_run(str(fake_root / "training" / "resnet50v1.5" / "DGX1_RN50_FP32_90E.sh"), PYTHON="")[0]
    assert "python3" in without
    (fake_root / ".venv" / "bin").mkdir(parents=True)
    (fake_root / ".venv" / "bin" / "python").write_text("#!/bin/sh\n")
    (fake_root / ".venv" / "bin" / "python").chmod(0o755)
    (command,) = dry_run(str(fake_root / "training" / "resnet50v1.5" / "DGX1_RN50_FP32_90E.sh"), PYTHON="")
    assert str(fake_root / ".venv" / "bin" / "python") in command


def test_dgx2_se_amp_250e_trains_se_resnext_with_16_gpus():
    script = os.path.join(ROOT, "training", "se-resnext101-32x4d", "DGX2_SE-RNxt101-32x4d_AMP_250E.sh")
    (command,) = dry_run(script)
    launcher, main_args = split(command)
    assert parse_cmdline(main_args).arch == "se-resnext101-32x4d"
    assert launcher[launcher.index("--nproc") + 1] == "16"
    assert parse_cmdline(main_args).results_dir == "/workspace/rn50v15_tf/results"


def test_horovod_and_mpirun_launchers(tmp_path):
    script = os.path.join(ROOT, "training", "resnet50v1.5", "DGX1_RN50_AMP_90E.sh")
    (command,) = dry_run(script, LAUNCHER="horovod", HOROVOD_HOSTS="node1:8,node2:8", PYTHON=str(tmp_path / "python"),
                         PATH=_path_with_horovodrun(tmp_path))
    assert os.path.basename(command[0]) == "horovodrun"  # PATH's: none beside PYTHON
    assert command[1:5] == ["-np", "8", "-H", "node1:8,node2:8"]
    (command,) = dry_run(script, LAUNCHER="mpirun", BIND_TO_SOCKET="1")
    assert command[:6] == ["mpirun", "--allow-run-as-root", "--bind-to", "socket", "-np", "8"]


def _path_with_horovodrun(tmp_path):
    """PATH, with a stand-in horovodrun at its front (a directory of its own, beside no python)."""
    directory = tmp_path / "horovodrun-bin"
    directory.mkdir()
    (directory / "horovodrun").write_text("#!/bin/sh\n")
    (directory / "horovodrun").chmod(0o755)
    return str(directory) + os.pathsep + os.environ["PATH"]


def _bare_path(tmp_path):
    """A PATH with only what the scripts need (bash, dirname): no horovodrun, mpirun or python of the machine's."""
    bin_dir = tmp_path / "bare-bin"
    bin_dir.mkdir()
    for name in ("bash", "dirname"):
        os.symlink(shutil.which(name), bin_dir / name)
    return str(bin_dir)


def test_horovod_runs_the_horovodrun_beside_python_else_a_missing_launcher_is_one_line(tmp_path):
    """The recipes ran PATH's horovodrun, so the venv's (scripts/install_horovod.sh) was `horovodrun: command not
    found` (exit 127) unless the venv was activated; a missing mpirun was the same."""
    script = os.path.join(ROOT, "training", "resnet50v1.5", "DGX1_RN50_FP32_90E.sh")
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    for name in ("python", "horovodrun"):
        (venv / name).write_text("#!/bin/sh\n")
        (venv / name).chmod(0o755)
    bare = _bare_path(tmp_path)
    environ = {key: value for key, value in os.environ.items() if key not in ("DRY_RUN", "LAUNCHER", "PYTHON")}
    (command,) = dry_run(script, LAUNCHER="horovod", PYTHON=str(venv / "python"), PATH=bare)
    # that python has Horovod: its horovodrun is run through runtime/horovodrun.py, which reads its output as one run
    assert command[0] == "env" and (command[1] == "PYTHONPATH=" + ROOT or
                                    command[1].startswith("PYTHONPATH={}:".format(ROOT)))
    assert command[2:8] == [str(venv / "python"), "-m", "runtime.horovodrun", "-np", "8", str(venv / "python")]
    (venv / "horovodrun").unlink()
    for launcher, expected in (
            ("horovod", "ERROR: LAUNCHER=horovod needs horovodrun, which is not beside {} nor on PATH (install "
                        "Horovod into that interpreter: bash scripts/install_horovod.sh; or set PYTHON to one that "
                        "has it)".format(venv / "python")),
            ("mpirun", "ERROR: LAUNCHER=mpirun needs mpirun, which is not on PATH (install Open MPI, e.g. apt-get "
                       "install openmpi-bin, and Horovod built with it; or use LAUNCHER=tf or LAUNCHER=horovod)")):
        result = run_command(["bash", script, str(tmp_path / "ws"), str(tmp_path / "dd")], check=False, timeout=60,
                             env=dict(environ, LAUNCHER=launcher, PYTHON=str(venv / "python"), PATH=bare))
        assert (result.returncode, result.stderr.splitlines(), result.stdout) == (2, [expected], "")
    (command,) = dry_run(script, LAUNCHER="horovod", PYTHON=str(venv / "python"), PATH=bare)
    assert command[0] == "horovodrun"  # the plan is still printed


def test_training_perf_runs_one_gpu_then_all_and_se_has_no_g3_typo():
    for model, fp32, amp in (("resnet50v1.5", 128, 256), ("se-resnext101-32x4d", 64, 96)):
        script = os.path.join(ROOT, "training", model, "training_perf.sh")
        commands = dry_run(script, NUM_GPUS="8")
        assert len(commands) == 8  # {amp, fp32} x {xla, no xla} x {1 GPU, 8 GPUs}
        single = [c for c in commands if "--nproc" not in c]
        assert len(single) == 4 and all(c[1].endswith("main.py") for c in single)  # 1 GPU: plain python
        sizes = sorted({parse_cmdline(split(c)[1]).batch_size for c in commands})
        assert sizes == sorted({fp32, amp})
        assert len(dry_run(script, NUM_GPUS="1")) == 4


def test_inference_benchmark_configurations():
    script = os.path.join(ROOT, "training", "resnet50v1.5", "inference_benchmark.sh")
    commands = dry_run(script, "/x", "/idx")
    assert len(commands) == 9 * 5  # batch sizes 1..256, 5 configurations with DALI
    assert all("--nproc" not in c for c in commands)
    assert len(dry_run(os.path.join(ROOT, "training", "resnext101-32x4d", "inference_benchmark.sh"))) == 8 * 4


def test_benchmark_scripts_whose_runs_fail_say_so_and_exit_non_zero(tmp_path):
    """training_perf.sh and inference_benchmark.sh collected the last throughput line of each run: a run that failed
    (no data at /data/tfrecords) left a line without a figure, and the script exited 0 (an audit, 2026-12-08)."""
    python = tmp_path / "python"  # every run fails at once, as main.py does on a missing --data_dir
    python.write_text("#!/bin/sh\necho 'ERROR: --data_dir /data/tfrecords/ does not exist' >&2\nexit 2\n")
    python.chmod(0o755)
    environ = dict(os.environ, PYTHON=str(python), NUM_GPUS="1")
    environ.pop("DRY_RUN", None)
    perf = run_command(["bash", os.path.join(ROOT, "training", "resnet50v1.5", "training_perf.sh")], check=False,
                       env=environ, timeout=60, cwd=str(tmp_path))
    assert perf.returncode == 1
    assert perf.stdout.splitlines()[0] == "BS=256,amp,XLA=0,GPUs=1 FAILED (exit 2)"
    assert (tmp_path / "training_benchmark.txt").read_text().count("FAILED (exit 2)") == 4
    assert perf.stderr.strip().splitlines()[-1] == (
        "ERROR: training_perf: 4 of 4 runs failed (the ERROR lines above say why)")
    infer = run_command(["bash", os.path.join(ROOT, "training", "resnext101-32x4d", "inference_benchmark.sh"),
                         str(tmp_path / "nodata")], check=False, env=environ, timeout=60, cwd=str(tmp_path))
    assert infer.returncode == 1
    assert infer.stdout.splitlines()[0] == "Results for BS=1 FP32 nodali noxla: FAILED (exit 2)"
    assert infer.stderr.strip().splitlines()[-1] == (
        "ERROR: inference_benchmark: 32 of 32 runs failed (the ERROR lines above say why)")


def test_a_launch_interrupted_by_ctrl_c_exits_130_even_when_its_launcher_exits_0(tmp_path):
    """horovodrun turns a Ctrl-C into SIGTERM for its workers, which checkpoint and exit 0, and so does horovodrun:
    the recipe's status said the run finished. A stand-in launcher that gets the script's SIGINT (sent to the
    script, as a terminal's Ctrl-C reaches its process group) and exits 0; one that fails keeps its own status."""
    common = os.path.join(ROOT, "training", "common.sh")
    script = tmp_path / "run.sh"
    script.write_text(f"source {shlex.quote(common)}\n"
                      "_run_or_print sh -c 'kill -INT $PPID; sleep 0.3; exit 0'; echo \"status $?\"\n"
                      "_run_or_print sh -c 'exit 3'; echo \"status $?\"\n")
    environ = {key: value for key, value in os.environ.items() if key != "DRY_RUN"}
    result = run_command(["bash", str(script)], check=False, env=environ, timeout=60)
    assert result.stdout.splitlines() == ["status 130", "status 3"]
    assert result.stderr.splitlines() == ["Interrupted: the workers stopped on the signal and exited 0 (a training run "
                                          "at a checkpoint, which the same command continues)"]

"""scripts/install.sh and scripts/install_horovod.sh: the CPU and GPU modes, chosen by nvidia-smi or GPU=0/1, as
their DRY_RUN=1 plans print them (a fake nvidia-smi and fake CUDA toolkits stand in for a GPU machine), and the
refusal of a GPU Horovod build without a CUDA toolkit of TensorFlow's major. Child processes: the scripts are bash."""
import os
import re
import sys

import pytest

from tests._cli import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_command(folder, name, text, status=0):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\ncat <<'EOF'\n{}\nEOF\nexit {}\n".format(text, status))
    os.chmod(path, 0o755)
    return path


def fake_cuda(tmp_path, version):
    """A folder that looks like a CUDA toolkit: bin/nvcc reporting `version`, include/cuda_runtime.h."""
    home = tmp_path / "cuda-{}".format(version)
    fake_command(str(home / "bin"), "nvcc", "nvcc: NVIDIA (R) Cuda compiler driver\n"
                 "Cuda compilation tools, release {0}, V{0}.86".format(version))
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_runtime.h").write_text("")
    return str(home)


def run_install_script(script, tmp_path, gpus=None, **env):
    """Runs scripts/<script> with DRY_RUN=1 unless given; `gpus` puts a fake nvidia-smi listing that many GPUs
    first on PATH (0: one that lists none)."""
    variables = {key: value for key, value in os.environ.items()
                 if key not in ("GPU", "DRY_RUN", "CUDA_HOME", "HOROVOD_CUDA_HOME", "HOROVOD_NCCL_HOME", "VENV")}
    variables.update(DRY_RUN="1", VENV=str(tmp_path / "venv"))
    if gpus is not None:
        listing = "\n".join("GPU {}: NVIDIA A100-SXM4-80GB (UUID: GPU-{})".format(i, i) for i in range(gpus))
        fake_command(str(tmp_path / "bin"), "nvidia-smi", listing or "No devices were found", 0 if gpus else 6)
        variables["PATH"] = str(tmp_path / "bin") + os.pathsep + variables["PATH"]
    variables.update(env)
    return run_command(["bash", os.path.join("scripts", script)], check=False, env=variables, timeout=120)


def build_line(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("+ env ") and "pip install" in line]
    assert len(lines) == 1, stdout
    return dict(word.split("=", 1) for word in lines[0].split() if re.fullmatch(r"[A-Z_]+=.*", word))


def test_gpu_mode_is_chosen_when_nvidia_smi_lists_a_gpu_and_the_plan_is_complete(tmp_path):
    cuda = fake_cuda(tmp_path, "12.9")
    done = run_install_script("install.sh", tmp_path, gpus=2, HOROVOD_CUDA_HOME=cuda)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.splitlines()[0] == "install.sh: gpu mode (nvidia-smi lists a GPU); DRY_RUN=1: the plan, nothing runs"
    assert "-m venv {}".format(tmp_path / "venv") in out
    assert "-r requirements.txt -r requirements-gpu.txt -r requirements-dev.txt" in out
    assert "requirements-cpu.txt" not in out
    assert "pip install --quiet nvidia-dali-cuda120==2.4.0" in out
    assert "define AsGpuStreamValue through Stream::platform_specific_handle()" in out
    settings = build_line(out)
    assert settings["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert settings["HOROVOD_CUDA_HOME"] == cuda
    assert settings["HOROVOD_NCCL_INCLUDE"].endswith("/nvidia/nccl/include")
    assert settings["HOROVOD_NCCL_LINK"] == "SHARED"
    assert settings["LDFLAGS"].startswith("-Wl,-rpath,") and settings["LDFLAGS"].endswith("/nvidia/nccl/lib")
    assert settings["HOROVOD_BUILD_CUDA_CC_LIST"] == "60,70,80,89,90"
    assert out.rstrip().endswith("install.sh: plan done (gpu mode)")
    assert not (tmp_path / "venv").exists()  # a plan writes nothing


@pytest.mark.parametrize("gpus, env, reason", [(0, {}, "no GPU listed by nvidia-smi"),
                                               (None, {"GPU": "0"}, "GPU=0 given"),
                                               (1, {"GPU": "0"}, "GPU=0 given")])
def test_cpu_mode_without_a_listed_gpu_or_when_asked(tmp_path, gpus, env, reason):
    done = run_install_script("install.sh", tmp_path, gpus=gpus, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("install.sh: cpu mode ({})".format(reason))
    assert "-r requirements.txt -r requirements-cpu.txt -r requirements-dev.txt" in done.stdout
    assert "requirements-gpu.txt" not in done.stdout
    settings = build_line(done.stdout)
    assert "HOROVOD_GPU_OPERATIONS" not in settings and settings["HOROVOD_WITH_GLOO"] == "1"
    assert "AsGpuStreamValue" not in done.stdout


def test_the_venv_finds_the_repository_s_modules_from_any_directory(tmp_path):
    """`python -m dataprep.build_tfrecords` run where the images are said `No module named 'dataprep'`: install.sh
    puts a .pth naming the repository into the venv (the plan says where), and this venv, made by it, has it."""
    done = run_install_script("install.sh", tmp_path, GPU="0", SKIP_DALI="1", SKIP_HOROVOD="1")
    assert done.returncode == 0, done.stderr
    line = "+ echo {} > {}/lib/python{}.{}/site-packages/convnets_repository.pth".format(
        ROOT, tmp_path / "venv", *sys.version_info[:2])
    assert line in done.stdout.splitlines(), done.stdout
    assert not (tmp_path / "venv").exists()
    found = run_command([sys.executable, "-m", "dataprep.verify_records", "--help"], check=False, cwd=str(tmp_path),
                        timeout=120)
    assert found.returncode == 0 and "usage:" in found.stdout, (
        "this interpreter does not find the repository from another directory: install with scripts/install.sh " +
        found.stderr[-300:])


def test_skip_flags_leave_dali_and_horovod_out(tmp_path):
    done = run_install_script("install.sh", tmp_path, GPU="1", SKIP_DALI="1", SKIP_HOROVOD="1")
    assert done.returncode == 0, done.stderr
    assert "nvidia-dali" not in done.stdout and "install_horovod" not in done.stdout


def test_a_venv_installed_in_the_other_mode_loses_its_onnxruntime_build_first(tmp_path):
    # This venv holds the CPU onnxruntime; a GPU install into it removes it before onnxruntime-gpu goes in.
    done = run_install_script("install.sh", tmp_path, GPU="1", SKIP_HOROVOD="1", VENV=sys.prefix)
    lines = done.stdout.splitlines()
    uninstall = [i for i, line in enumerate(lines) if line.endswith("pip uninstall --quiet -y onnxruntime")]
    install = [i for i, line in enumerate(lines) if "-r requirements-gpu.txt" in line]
    assert uninstall and install and uninstall[0] < install[0], done.stdout


def test_a_bad_gpu_value_is_refused(tmp_path):
    for script in ("install.sh", "install_horovod.sh"):
        done = run_install_script(script, tmp_path, GPU="yes")
        assert done.returncode == 2
        assert done.stderr.strip() == "{}: GPU must be 0 or 1, not 'yes'".format(script)


def test_gpu_horovod_needs_a_toolkit_of_tensorflows_cuda_major(tmp_path):
    cuda13 = fake_cuda(tmp_path, "13.0")
    # The plan is printed whole, then says why it would fail.
    plan = run_install_script("install_horovod.sh", tmp_path, GPU="1", HOROVOD_CUDA_HOME=cuda13)
    assert plan.returncode == 1
    assert build_line(plan.stdout)["HOROVOD_CUDA_HOME"] == "<missing:CUDA-12-toolkit>"
    assert "found CUDA 13.0 ({})".format(cuda13) in plan.stderr and "SKIP_HOROVOD=1" in plan.stderr
    # A real run stops at once, with one line, before downloading anything. (This venv's Horovod has no NCCL, so
    # it is not taken as already installed.)
    real = run_install_script("install_horovod.sh", tmp_path, GPU="1", DRY_RUN="0", HOROVOD_CUDA_HOME=cuda13,
                      PY=sys.executable)
    assert real.returncode == 1
    assert real.stdout == ""
    assert len(real.stderr.strip().splitlines()) == 1
    assert real.stderr.startswith("install_horovod.sh: GPU=1 builds Horovod's NCCL operations with the nvcc of CUDA 12")


def test_a_gpu_install_without_a_cuda_12_toolkit_stops_before_it_downloads(tmp_path):
    """install.sh downloaded the GPU set (several GB) and DALI, then stopped at Horovod's toolkit check (an audit,
    2026-12-08): it now asks install_horovod.sh first and stops before any pip step."""
    cuda13 = fake_cuda(tmp_path, "13.0")
    real = run_install_script("install.sh", tmp_path, GPU="1", DRY_RUN="0", SKIP_DALI="1", HOROVOD_CUDA_HOME=cuda13)
    assert real.returncode == 1
    assert "pip install" not in real.stdout, real.stdout
    lines = real.stderr.strip().splitlines()
    assert lines[-1] == "install.sh: stopped before downloading anything (the line above says why)"
    assert lines[-2].startswith("install_horovod.sh: GPU=1 builds Horovod's NCCL operations with the nvcc of CUDA 12")


def test_the_toolkit_is_found_from_nvcc_on_path_and_a_wrapper_script_is_not_one(tmp_path):
    cuda12 = fake_cuda(tmp_path, "12.4")
    done = run_install_script("install_horovod.sh", tmp_path, GPU="1",
                      PATH=os.path.join(cuda12, "bin") + os.pathsep + os.environ["PATH"])
    assert done.returncode == 0, done.stderr
    assert build_line(done.stdout)["HOROVOD_CUDA_HOME"] == cuda12
    # An nvcc without CUDA's headers beside it (a wrapper script in /usr/local/bin, say) is passed over.
    wrapper = fake_command(str(tmp_path / "wrapper" / "bin"), "nvcc", "Cuda compilation tools, release 12.4, V12.4.1")
    done = run_install_script("install_horovod.sh", tmp_path, GPU="1",
                      PATH=os.path.dirname(wrapper) + os.pathsep + os.environ["PATH"])
    assert str(tmp_path / "wrapper") not in build_line(done.stdout)["HOROVOD_CUDA_HOME"]
    assert str(tmp_path / "wrapper") not in done.stderr


def test_the_readme_gpu_section_plan_runs_here(tmp_path):
    """The README's "Install on a GPU machine" section: its dry-run command prints the GPU plan on this CPU machine
    (with a CUDA 12 toolkit standing in), and every script it names exists."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = re.search(r"^### Install on a GPU machine\n(.*?)(?=^##)", text, re.MULTILINE | re.DOTALL).group(1)
    commands = re.findall(r"`([^`]*\bbash scripts/[^`]*|[^`]*\bscripts/gpu_stack\.py[^`]*)`", section)
    assert "GPU=1 DRY_RUN=1 bash scripts/install.sh" in commands
    assert "bash scripts/gpu_check.sh" in commands
    for command in commands:
        for script in re.findall(r"scripts/[\w.]+", command):
            assert os.path.isfile(os.path.join(ROOT, script)), command
    done = run_install_script("install.sh", tmp_path, GPU="1", DRY_RUN="1", HOROVOD_CUDA_HOME=fake_cuda(tmp_path, "12.9"))
    assert done.returncode == 0 and "HOROVOD_GPU_OPERATIONS=NCCL" in done.stdout

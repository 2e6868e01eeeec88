"""The GPU set's CUDA majors, checked before and after an install.

    python scripts/gpu_stack.py check    # anywhere with the package index: re-resolves requirements-gpu.txt with pip,
                                         # checks that every CUDA library, onnxruntime-gpu and DALI are of
                                         # TensorFlow's CUDA major, and that the Horovod build asks for NCCL
    python scripts/gpu_stack.py report   # the installed environment (scripts/gpu_check.sh starts with it): TF's
                                         # CUDA/cuDNN, the GPUs, Horovod's NCCL, DALI's CUDA, ONNX Runtime's providers

Each prints one line per fact and a FAIL line per problem; the exit status is 1 when there is a problem.
Standard library only (and the installed packages, for `report`), so it runs before and after an install.
"""

import argparse
import importlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[([^\]]*)\])?==([^\s;#]+)")
# NVIDIA's CUDA 12 wheels end in -cu12 (DALI's in -cuda120); its CUDA 13 wheels carry no major in their names.
CUDA_SUFFIX = re.compile(r"-cu(\d+)$|-cuda(\d+)0$")


def read_pins(name):
    """requirements file -> {package: (version, extras)} for its `name[extras]==version` lines."""
    pins = {}
    with open(os.path.join(ROOT, name), encoding="utf-8") as handle:
        for line in handle:
            match = REQUIREMENT.match(line.strip())
            if match:
                package, extras, version = match.groups()
                pins[canonical(package)] = (version, tuple(e.strip() for e in (extras or "").split(",") if e.strip()))
    return pins


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def cuda_major_of_name(name):
    """The CUDA major an NVIDIA wheel's name states (nvidia-cudnn-cu12 -> 12, nvidia-dali-cuda120 -> 12), or None."""
    match = CUDA_SUFFIX.search(canonical(name))
    return int(match.group(1) or match.group(2)) if match else None


def expected_cuda_major():
    """The GPU set's CUDA major: that of its pinned CUDA runtime wheel."""
    majors = {cuda_major_of_name(name) for name in read_pins("requirements-gpu.txt")
              if canonical(name).startswith("nvidia-cuda-runtime")}
    if len(majors) != 1 or None in majors:
        raise SystemExit("gpu_stack.py: requirements-gpu.txt must pin exactly one nvidia-cuda-runtime-cuNN")
    return majors.pop()


def compute_capabilities(build_info):
    """tf.sysconfig.get_build_info()'s ['sm_60', ..., 'compute_90'] -> [60, ..., 90]."""
    return sorted({int(re.sub(r"\D", "", cc)) for cc in build_info.get("cuda_compute_capabilities", [])})


def major(version):
    return int(str(version).split(".")[0])


def extra_requirements(requires_dist, extras):
    """The package names a wheel's metadata asks for under the given extras."""
    names = []
    for requirement in requires_dist or []:
        marker = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        if marker and marker.group(1) in extras:
            names.append(canonical(re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0)))
    return names


def cuda_problems(resolved, expected, tf_build_info):
    """Problems of a resolved GPU set. resolved: {package: (version, requires_dist)}; tf_build_info: the pinned
    TensorFlow's tf.sysconfig.get_build_info(). Returns (facts, problems), lists of lines."""
    facts, problems = [], []
    tf_cuda = tf_build_info.get("cuda_version")
    tf_cudnn = tf_build_info.get("cudnn_version")
    facts.append(f"tensorflow {resolved.get('tensorflow', ('absent',))[0]}: built for CUDA {tf_cuda}, cuDNN {tf_cudnn}")
    if not tf_cuda or major(tf_cuda) != expected:
        problems.append(f"TensorFlow is built for CUDA {tf_cuda}, the GPU set's CUDA libraries are CUDA {expected}")
    for package, (version, requires_dist) in sorted(resolved.items()):
        if not package.startswith("nvidia-"):
            continue
        stated = cuda_major_of_name(package)
        facts.append(f"{package} {version}: CUDA {stated if stated else '(none in its name)'}")
        if stated != expected:
            problems.append(f"{package} {version} is not a CUDA {expected} build (NVIDIA's CUDA 13 wheels carry no "
                            f"-cuNN in their names)" if stated is None else
                            f"{package} {version} is a CUDA {stated} build, not CUDA {expected}")
    cudnn = [version for package, (version, _) in resolved.items() if package.startswith("nvidia-cudnn-")]
    if tf_cudnn and cudnn and major(cudnn[0]) != major(tf_cudnn):
        problems.append(f"cuDNN {cudnn[0]} resolved, TensorFlow is built for cuDNN {tf_cudnn}")
    if "onnxruntime-gpu" in resolved:
        version, requires_dist = resolved["onnxruntime-gpu"]
        wanted = extra_requirements(requires_dist, ("cuda", "cudnn"))
        majors = sorted({cuda_major_of_name(name) or 0 for name in wanted})
        facts.append(f"onnxruntime-gpu {version}: its cuda/cudnn extras ask for {', '.join(wanted) or 'nothing'}")
        if not wanted or majors != [expected]:
            problems.append(f"onnxruntime-gpu {version} is not built for CUDA {expected}: its extras ask for "
                            f"{', '.join(wanted) or 'no CUDA wheels'}")
    if "onnxruntime" in resolved:
        problems.append("the CPU onnxruntime is in the GPU set: it and onnxruntime-gpu provide the same module")
    return facts, problems


def resolve(requirement_files, requirements=(), python=sys.executable):
    """pip's resolution of the requirement files and further requirements (nothing installed):
    {package: (version, requires_dist)}."""
    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "report.json")
        command = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", report]
        for name in requirement_files:
            command += ["-r", os.path.join(ROOT, name)]
        command += list(requirements)
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
            raise SystemExit("gpu_stack.py: the GPU set does not resolve: " + " | ".join(errors or [done.stderr[-500:]]))
        with open(report, encoding="utf-8") as handle:
            installs = json.load(handle)["install"]
    return {canonical(item["metadata"]["name"]): (item["metadata"]["version"], item["metadata"].get("requires_dist"))
            for item in installs}


def horovod_plan(env=None):
    """`GPU=1 DRY_RUN=1 bash scripts/install_horovod.sh`: (its build line, the rest of its output, exit status)."""
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install_horovod.sh")], cwd=ROOT,
                          env=dict(os.environ if env is None else env, GPU="1", DRY_RUN="1"),
                          capture_output=True, text=True)
    build = [line for line in done.stdout.splitlines() if line.startswith("+ env ") and "pip install" in line]
    return (build[0] if build else ""), done.stdout + done.stderr, done.returncode


def horovod_problems(build_line, tf_build_info, expected):
    problems = []
    settings = dict(word.split("=", 1) for word in build_line.split() if re.fullmatch(r"[A-Z_]+=.*", word))
    if settings.get("HOROVOD_GPU_OPERATIONS") != "NCCL":
        problems.append("the GPU Horovod build does not ask for NCCL (HOROVOD_GPU_OPERATIONS=NCCL)")
    if "nvidia/nccl" not in settings.get("HOROVOD_NCCL_INCLUDE", "") and "HOROVOD_NCCL_HOME" not in settings:
        problems.append("the GPU Horovod build does not name the NCCL wheel's headers")
    wanted = compute_capabilities(tf_build_info)
    built = sorted(int(cc) for cc in settings.get("HOROVOD_BUILD_CUDA_CC_LIST", "").split(",") if cc)
    if built != wanted:
        problems.append(f"Horovod's CUDA kernels are built for {built}, TensorFlow's for {wanted}")
    return problems


def tensorflow_build_info():
    import tensorflow as tf  # the pinned wheel: tensorflow[and-cuda] adds only dependencies to it
    pinned = read_pins("requirements.txt")["tensorflow"][0]
    if tf.__version__ != pinned:
        raise SystemExit(f"gpu_stack.py: TensorFlow {tf.__version__} is installed, {pinned} is pinned: run it in the "
                         "project's venv")
    return dict(tf.sysconfig.get_build_info())


def check():
    expected = expected_cuda_major()
    build_info = tensorflow_build_info()
    dali = next(f"{name}=={version}" for name, (version, _) in read_pins("requirements-dali.txt").items()
                if name.startswith("nvidia-dali-cuda"))
    resolved = resolve(["requirements.txt", "requirements-gpu.txt", "requirements-dev.txt"], [dali])
    facts, problems = cuda_problems(resolved, expected, build_info)
    for package, (version, extras) in read_pins("requirements-gpu.txt").items():
        if resolved.get(package, (None,))[0] != version:
            problems.append(f"requirements-gpu.txt pins {package}=={version}, pip resolves "
                            f"{resolved.get(package, ('nothing',))[0]}")
    for package in read_pins("requirements-dali.txt"):
        if cuda_major_of_name(package) != expected:
            problems.append(f"{package} (requirements-dali.txt) is not a CUDA {expected} build")
    build_line, output, status = horovod_plan()
    facts.append("Horovod GPU build: " + " ".join(w for w in build_line.split() if w.startswith("HOROVOD_GPU")
                                                   or w.startswith("HOROVOD_BUILD_CUDA") or w.startswith("HOROVOD_NCCL_")))
    problems += horovod_problems(build_line, build_info, expected)
    if status != 0:
        facts.append("note: on this machine the Horovod step would stop: "
                     + (output.strip().splitlines() or ["?"])[-1].replace("install_horovod.sh: this plan would fail: ", ""))
    return facts, problems


def report():
    """The installed environment, as gpu_check.sh prints it first."""
    facts, problems, majors = [], [], {}
    try:
        import tensorflow as tf
        info = tf.sysconfig.get_build_info()
        facts.append(f"tensorflow {tf.__version__} | built for CUDA {info.get('cuda_version')}, cuDNN "
                     f"{info.get('cudnn_version')}, compute capabilities {','.join(map(str, compute_capabilities(info)))}")
        facts.append(f"GPUs visible to TensorFlow: {[d.name for d in tf.config.list_physical_devices('GPU')]}")
        if info.get("cuda_version"):
            majors["tensorflow"] = major(info["cuda_version"])
    except ImportError as error:
        problems.append(f"tensorflow cannot be imported: {error}")
    try:
        import horovod.tensorflow as hvd
        code = int(hvd.nccl_built())  # NCCL's version code (23203 for 2.32.3), 0 without NCCL
        nccl = f"True ({code // 10000}.{code % 10000 // 100}.{code % 100})" if code else "False"
        facts.append(f"horovod {importlib.metadata.version('horovod')} | built with gloo {bool(hvd.gloo_built())}, "
                     f"mpi {bool(hvd.mpi_built())}, nccl {nccl}")
    except Exception as error:  # noqa: BLE001 - report what is missing and go on
        facts.append(f"horovod absent ({type(error).__name__})")
    try:
        import nvidia.dali as dali
        import nvidia.dali.backend as backend
        code = int(backend.__cuda_version__)  # 12986 for CUDA 12.9.86
        facts.append(f"nvidia.dali {dali.__version__} | built for CUDA {code // 1000}.{code % 1000 // 100}")
        majors["nvidia-dali"] = code // 1000
    except Exception as error:  # noqa: BLE001
        facts.append(f"nvidia.dali absent ({type(error).__name__})")
    try:
        import onnxruntime
        builds = [name for name in ("onnxruntime", "onnxruntime-gpu") if installed(name)]
        line = f"onnxruntime {onnxruntime.__version__} ({', '.join(builds)}) | providers {onnxruntime.get_available_providers()}"
        if "onnxruntime-gpu" in builds:
            wanted = extra_requirements(importlib.metadata.requires("onnxruntime-gpu"), ("cuda", "cudnn"))
            stated = sorted({cuda_major_of_name(name) or 0 for name in wanted})
            line += f" | built for CUDA {stated[0] if len(stated) == 1 and stated[0] else '?'}"
            if len(stated) == 1 and stated[0]:
                majors["onnxruntime-gpu"] = stated[0]
        if len(builds) > 1:
            problems.append("both onnxruntime and onnxruntime-gpu are installed: they overwrite one module "
                            "(GPU=1 bash scripts/install.sh removes the CPU build)")
        facts.append(line)
    except Exception as error:  # noqa: BLE001
        facts.append(f"onnxruntime absent ({type(error).__name__})")
    tensorrt = [d.metadata["Name"] for d in importlib.metadata.distributions()
                if canonical(d.metadata["Name"] or "").startswith("tensorrt-cu")]
    if tensorrt:
        facts.append(f"tensorrt: {', '.join(sorted(set(tensorrt)))}")
        majors["tensorrt"] = cuda_major_of_name(tensorrt[0])
    else:
        facts.append("tensorrt absent")
    problems += majors_problems(majors)
    return facts, problems


def majors_problems(majors):
    """{component: CUDA major} of an installed environment -> a problem line when they are not all the same."""
    if len(set(majors.values())) > 1:
        return ["CUDA majors disagree: " + ", ".join(f"{name} {value}" for name, value in sorted(majors.items()))]
    return []


def installed(distribution):
    try:
        importlib.metadata.version(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0] or None, allow_abbrev=False)
    parser.add_argument("what", choices=("check", "report"))
    args = parser.parse_args(argv)
    facts, problems = check() if args.what == "check" else report()
    for line in facts:
        print(line)
    for line in problems:
        print("FAIL " + line)
    if args.what == "check" and not problems:
        print(f"gpu_stack.py: the GPU set resolves and is CUDA {expected_cuda_major()} throughout")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

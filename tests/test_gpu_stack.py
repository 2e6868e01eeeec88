"""scripts/gpu_stack.py: the GPU set's CUDA majors, from made-up resolutions (each kind of mismatch is named), the
real resolution of requirements-gpu.txt from the package index, and the report of this (CPU) install."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("gpu_stack", os.path.join(ROOT, "scripts", "gpu_stack.py"))
gpu_stack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_stack)

BUILD = {"cuda_version": "12.5.1", "cudnn_version": "9",
         "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]}
ORT_CUDA12 = ['nvidia-cuda-runtime-cu12~=12.0; extra == "cuda"', 'nvidia-cufft-cu12~=11.0; extra == "cuda"',
              'nvidia-cudnn-cu12~=9.0; extra == "cudnn"', 'sympy; extra == "symbolic"', "numpy>=1.21.6"]
# onnxruntime-gpu 1.31.1's metadata: NVIDIA's CUDA 13 wheels carry no major in their names.
ORT_CUDA13 = ['nvidia-cuda-runtime~=13.0; extra == "cuda"', 'nvidia-cufft~=12.0; extra == "cuda"',
              'nvidia-cudnn-cu13~=9.0; extra == "cudnn"']


def good_set():
    return {"tensorflow": ("2.21.0", []), "nvidia-cuda-runtime-cu12": ("12.9.79", []),
            "nvidia-cudnn-cu12": ("9.28.0.42", []), "nvidia-nccl-cu12": ("2.32.3", []),
            "nvidia-dali-cuda120": ("2.4.0", []), "onnxruntime-gpu": ("1.26.0", ORT_CUDA12), "numpy": ("2.4.6", [])}


def test_cuda_major_of_a_wheel_name():
    assert gpu_stack.cuda_major_of_name("nvidia-cudnn-cu12") == 12
    assert gpu_stack.cuda_major_of_name("nvidia_nccl_cu12") == 12
    assert gpu_stack.cuda_major_of_name("nvidia-dali-cuda120") == 12
    assert gpu_stack.cuda_major_of_name("nvidia-dali-tf-plugin-cuda110") == 11
    assert gpu_stack.cuda_major_of_name("nvidia-cudnn-cu13") == 13
    assert gpu_stack.cuda_major_of_name("tensorrt-cu12") == 12
    assert gpu_stack.cuda_major_of_name("nvidia-cuda-runtime") is None
    assert gpu_stack.cuda_major_of_name("onnxruntime-gpu") is None


def test_extras_and_compute_capabilities_are_read_from_metadata():
    assert gpu_stack.extra_requirements(ORT_CUDA12, ("cuda", "cudnn")) == [
        "nvidia-cuda-runtime-cu12", "nvidia-cufft-cu12", "nvidia-cudnn-cu12"]
    assert gpu_stack.extra_requirements(ORT_CUDA12, ("symbolic",)) == ["sympy"]
    assert gpu_stack.compute_capabilities(BUILD) == [60, 70, 80, 89, 90]


def test_a_consistent_cuda_12_set_has_no_problem():
    facts, problems = gpu_stack.cuda_problems(good_set(), 12, BUILD)
    assert problems == []
    assert "tensorflow 2.21.0: built for CUDA 12.5.1, cuDNN 9" in facts
    assert "nvidia-dali-cuda120 2.4.0: CUDA 12" in facts


@pytest.mark.parametrize("change, named", [
    (lambda s: s.update({"onnxruntime-gpu": ("1.31.1", ORT_CUDA13)}), "onnxruntime-gpu 1.31.1 is not built for CUDA 12"),
    (lambda s: s.update({"nvidia-cuda-runtime": ("13.5.37", [])}), "nvidia-cuda-runtime 13.5.37 is not a CUDA 12 build"),
    (lambda s: s.update({"nvidia-cudnn-cu13": ("9.28.1.4", [])}), "nvidia-cudnn-cu13 9.28.1.4 is a CUDA 13 build"),
    (lambda s: s.update({"nvidia-cudnn-cu12": ("8.9.7.29", [])}), "cuDNN 8.9.7.29 resolved, TensorFlow is built for cuDNN 9"),
    (lambda s: s.update({"onnxruntime": ("1.32.0", [])}), "the CPU onnxruntime is in the GPU set"),
    (lambda s: s.update({"onnxruntime-gpu": ("1.26.0", ["numpy"])}), "onnxruntime-gpu 1.26.0 is not built for CUDA 12"),
])
def test_each_kind_of_mismatch_is_named(change, named):
    resolved = good_set()
    change(resolved)
    _, problems = gpu_stack.cuda_problems(resolved, 12, BUILD)
    assert any(named in problem for problem in problems), problems


def test_tensorflow_built_for_another_major_is_named():
    _, problems = gpu_stack.cuda_problems(good_set(), 12, dict(BUILD, cuda_version="11.8"))
    assert problems == ["TensorFlow is built for CUDA 11.8, the GPU set's CUDA libraries are CUDA 12"]


def test_horovod_build_line_must_ask_for_nccl_for_tensorflows_capabilities():
    good = ("+ env HOROVOD_WITH_GLOO=1 HOROVOD_NCCL_INCLUDE=/v/site-packages/nvidia/nccl/include "
            "HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_BUILD_CUDA_CC_LIST=60,70,80,89,90 python -m pip install x")
    assert gpu_stack.horovod_problems(good, BUILD, 12) == []
    problems = gpu_stack.horovod_problems(good.replace("HOROVOD_GPU_OPERATIONS=NCCL", "")
                                          .replace("60,70,80,89,90", "70,80"), BUILD, 12)
    assert any("does not ask for NCCL" in p for p in problems)
    assert any("built for [70, 80], TensorFlow's for [60, 70, 80, 89, 90]" in p for p in problems)
    assert gpu_stack.horovod_problems("", BUILD, 12)  # no build line at all


def test_installed_majors_that_disagree_are_one_problem():
    assert gpu_stack.majors_problems({"tensorflow": 12, "nvidia-dali": 12}) == []
    assert gpu_stack.majors_problems({"tensorflow": 12, "onnxruntime-gpu": 13}) == [
        "CUDA majors disagree: onnxruntime-gpu 13, tensorflow 12"]


def test_the_gpu_set_states_cuda_12():
    assert gpu_stack.expected_cuda_major() == 12
    pins = gpu_stack.read_pins("requirements-gpu.txt")
    assert pins["tensorflow"] == (gpu_stack.read_pins("requirements.txt")["tensorflow"][0], ("and-cuda",))
    assert "onnxruntime-gpu" in pins and "onnxruntime" not in pins


@pytest.mark.slow
def test_the_pinned_gpu_set_resolves_from_the_index_and_is_cuda_12_throughout(capsys):
    """The check CI runs: pip resolves requirements.txt + requirements-gpu.txt + requirements-dev.txt + DALI
    together (metadata only), every pin is what pip picks, every CUDA wheel is CUDA 12 like TensorFlow's build,
    and the GPU Horovod build asks for NCCL for TensorFlow's compute capabilities."""
    status = gpu_stack.main(["check"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "tensorflow 2.21.0: built for CUDA 12" in out
    assert "onnxruntime-gpu 1.26.0: its cuda/cudnn extras ask for nvidia-cuda-nvrtc-cu12" in out
    assert "nvidia-nccl-cu12 2.32.3: CUDA 12" in out
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in out and "HOROVOD_BUILD_CUDA_CC_LIST=60,70,80,89,90" in out
    assert "the GPU set resolves and is CUDA 12 throughout" in out
    assert "FAIL" not in out


def test_report_of_this_cpu_install(capsys):
    assert gpu_stack.main(["report"]) == 0
    out = capsys.readouterr().out
    assert "tensorflow 2.21.0 | built for CUDA 12.5.1, cuDNN 9, compute capabilities 60,70,80,89,90" in out
    assert "horovod 0.28.1 | built with gloo True" in out
    assert "nvidia.dali 2.4.0 | built for CUDA 12." in out
    assert "onnxruntime 1.32.0 (onnxruntime) | providers" in out

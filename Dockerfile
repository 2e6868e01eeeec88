# ResNet-50 v1.5 / ResNeXt101-32x4d / SE-ResNeXt101-32x4d on TensorFlow 2.21 (GPU).
#
#   docker build . -t nvidia_rn50
#   docker run --gpus all --rm -it --ipc=host -v <path to TFRecords>:/data/tfrecords nvidia_rn50
#
# Python packages come from the same install script and pinned requirements as the README and CI
# (scripts/install.sh), here into the image's Python instead of a venv (USE_SYSTEM_PYTHON=1).
# Build arguments (default in brackets):
#   SKIP_DALI=1          leave out NVIDIA DALI and its TensorFlow plugin                                   [0]
#   ONNXRUNTIME_GPU=1    replace onnxruntime with requirements-gpu.txt's onnxruntime-gpu (its newest CUDA 12
#                        build: the CUDA execution provider of inference.py)                                [0]
#   INSTALL_TENSORRT=1   also install TensorRT's Python wheels, best effort: they are hosted by NVIDIA and
#                        are not reachable from every network; without them the build goes on (no TensorRT) [0]
FROM tensorflow/tensorflow:2.21.0-gpu

ENV PYTHONPATH=/workspace/rn50v15_tf \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1
# (PIP_BREAK_SYSTEM_PACKAGES: the image's Python is the container's only Python; no effect where the base
# image does not mark it externally managed.)
WORKDIR /workspace/rn50v15_tf

# Compilers for the two packages built at install time (the DALI TensorFlow plugin, Horovod) and Open MPI for
# `mpirun`/`horovodrun` launches. Distribution versions are not pinned: they follow the base image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ make cmake openmpi-bin libopenmpi-dev \
    && rm -rf /var/lib/apt/lists/*

# Install steps first, the code last: editing the code does not invalidate the (slow) install layers.
COPY requirements.txt requirements-cpu.txt requirements-gpu.txt requirements-dev.txt requirements-dali.txt \
     requirements-horovod.txt ./
COPY scripts/install.sh scripts/install_horovod.sh scripts/
ARG SKIP_DALI=0
# GPU=0: the base image's TensorFlow comes with its CUDA libraries, so pip's CUDA wheels (GPU=1) would be a second
# copy of them.
RUN USE_SYSTEM_PYTHON=1 GPU=0 SKIP_DALI="${SKIP_DALI}" SKIP_HOROVOD=1 bash scripts/install.sh
# A layer of its own: the Horovod build takes minutes and is cached apart from the requirements.
# hadolint ignore=DL3059
RUN USE_SYSTEM_PYTHON=1 bash scripts/install_horovod.sh

# Both packages provide the `onnxruntime` module, so the CPU one goes first. The pin is requirements-gpu.txt's
# (without its extras: the image has the CUDA libraries).
ARG ONNXRUNTIME_GPU=0
# (DL3013: the pin is read from requirements-gpu.txt, which hadolint does not see.)
# hadolint ignore=DL3013
RUN if [ "${ONNXRUNTIME_GPU}" = "1" ]; then \
        python3 -m pip uninstall -y onnxruntime \
        && python3 -m pip install "$(sed -n 's/^onnxruntime-gpu\(\[[^]]*\]\)\?==\([^ ]*\).*/onnxruntime-gpu==\2/p' requirements-gpu.txt)"; \
    fi

# The `tensorrt` metapackage of this release resolves to the CUDA 13 build; TensorFlow 2.21 uses CUDA 12, so
# the CUDA 12 build is named directly.
ARG INSTALL_TENSORRT=0
ARG TENSORRT_REQUIREMENT=tensorrt-cu12==11.4.0.106
# (DL3013: the pin is in TENSORRT_REQUIREMENT, which hadolint does not expand.)
# hadolint ignore=DL3013
RUN if [ "${INSTALL_TENSORRT}" = "1" ]; then \
        python3 -m pip install "${TENSORRT_REQUIREMENT}" \
        || echo "WARNING: ${TENSORRT_REQUIREMENT} could not be installed (NVIDIA's wheel host unreachable?);" \
                "the image has no TensorRT and inference.py will say so"; \
    fi

COPY . .

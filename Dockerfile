# quantgate worker images: the pipeline plus a Prefect worker for the `quantgate` process pool (prefect.yaml).
#
#   docker build -t quantgate:gpu .                  # default: GPU image (paddlepaddle-gpu, CUDA 12.6, cuDNN 9.5)
#   docker build --target cpu -t quantgate:cpu .     # CPU image (the pinned paddlepaddle CPU wheel)
#   docker run --gpus all -e PREFECT_API_URL=http://HOST:4200/api -v quantgate-store:/data quantgate:gpu
#
# Both images install quantgate's pinned dependencies from pyproject.toml into a virtual environment, /opt/venv.
# The GPU image installs every pin except `paddlepaddle` (the CPU wheel) and takes `paddlepaddle-gpu` of the same
# version from Paddle's CUDA 12.6 package index instead: the two wheels both provide the `paddle` module, and
# installing the CPU one over the GPU one would silently disable the GPU. quantgate itself goes in with --no-deps.
# Both need BuildKit (Docker 23 or later by default) or podman/buildah, for the CPU image's RUN --mount.

ARG PADDLE_VERSION=3.3.1
# The CPU image's base: any Debian-like image whose `python3` is a CPython 3.11 with the venv module.
# .ci/image builds on a Debian bookworm made with debootstrap (Docker Hub is unreachable there).
ARG BASE_IMAGE=python:3.11-slim

# ---------------------------------------------------------------- CPU image
FROM ${BASE_IMAGE} AS cpu
# WHEELHOUSE: a folder of wheels in the build context (.ci/image passes .wheelhouse). When set, pip installs
# from it alone (--no-index), for machines that cannot reach the package index; it is bind-mounted, never
# copied, so its wheels stay out of the image. Empty, the default: pip uses the package index.
ARG WHEELHOUSE=

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    QUANTGATE_STORE=/data/store \
    PATH=/opt/venv/bin:$PATH

# libgomp: Paddle's OpenMP runtime; libgl1/libglib2.0-0: opencv-python, which paddleslim pins.
# A virtual environment, as in the GPU image: Debian's own python3 refuses `pip install` outside one (PEP 668).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

WORKDIR /opt/quantgate
# Every pin of pyproject.toml first, in a layer of its own, which podman reuses while pyproject.toml is unchanged
# (Docker's BuildKit also keys it on the mounted folder: without WHEELHOUSE, the whole build context).
COPY pyproject.toml ./
RUN --mount=type=bind,source=./${WHEELHOUSE},target=/wheels \
    python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install ${WHEELHOUSE:+--no-index --find-links /wheels} -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY README.md prefect.yaml ./
COPY quantgate ./quantgate
COPY flows ./flows
COPY stages ./stages
COPY artifacts ./artifacts
COPY examples ./examples
# --no-deps: the pins are in; pip still fetches the build backend (setuptools, wheel) to build the editable install.
RUN --mount=type=bind,source=./${WHEELHOUSE},target=/wheels \
    pip install ${WHEELHOUSE:+--no-index --find-links /wheels} --no-deps -e .
# paddle2onnx 2.x reads PIR programs (Paddle 3's default export); it is the same distribution as the pinned 1.3.1,
# so it lives in a folder of its own, which quantgate puts first on its converter's path (quantgate/pir/converter.py).
RUN --mount=type=bind,source=./${WHEELHOUSE},target=/wheels \
    pip install ${WHEELHOUSE:+--no-index --find-links /wheels} --no-deps --target /opt/venv/paddle2onnx-2 \
        "$(python -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['tool']['quantgate']['paddle2onnx2'])")"

VOLUME ["/data"]
CMD ["prefect", "worker", "start", "--pool", "quantgate", "--type", "process"]

# ---------------------------------------------------------------- GPU image (default target)
# Official PaddlePaddle image, pinned by tag (paddlepaddle/paddle:3.3.1-gpu-cuda12.6-cudnn9.5): Ubuntu 22.04 with CUDA 12.6 and cuDNN 9.5 (and NCCL,
# which multi-GPU training uses). Its own Python is 3.10 while quantgate needs 3.11, so quantgate
# runs in a Python 3.11 virtual environment with paddlepaddle-gpu built for CUDA 12.6.
FROM paddlepaddle/paddle:${PADDLE_VERSION}-gpu-cuda12.6-cudnn9.5 AS gpu
ARG PADDLE_VERSION

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    QUANTGATE_STORE=/data/store \
    PATH=/opt/venv/bin:$PATH

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv libgomp1 libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/* \
    && python3.11 -m venv /opt/venv

WORKDIR /opt/quantgate
COPY pyproject.toml README.md prefect.yaml ./
# Every pin of pyproject.toml except the CPU paddlepaddle wheel, then the GPU wheel of the same version.
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
print('\n'.join(d for d in deps if not d.startswith('paddlepaddle==')))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && pip install "paddlepaddle-gpu==${PADDLE_VERSION}" -i https://www.paddlepaddle.org.cn/packages/stable/cu126/
RUN pip install --no-deps --target /opt/venv/paddle2onnx-2 \
        "$(python -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['tool']['quantgate']['paddle2onnx2'])")"
COPY quantgate ./quantgate
COPY flows ./flows
COPY stages ./stages
COPY artifacts ./artifacts
COPY examples ./examples
COPY benchmarks/amp_gpu.py ./benchmarks/amp_gpu.py
RUN pip install --no-deps -e . \
    && python -c "import paddle; assert paddle.is_compiled_with_cuda(), 'paddlepaddle-gpu was replaced by a CPU build'"

VOLUME ["/data"]
CMD ["prefect", "worker", "start", "--pool", "quantgate", "--type", "process"]

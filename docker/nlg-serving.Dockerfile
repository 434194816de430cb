# syntax=docker/dockerfile:1
# The chart's `image` (helm/nlg-serving, values `image.*`): the autoscaler runs from it, and the Triton
# pod's init container copies the model repository and the Triton-side package out of it
# (package.delivery: initContainer). No torch: the Triton image brings its own.
#
#   docker build -f docker/nlg-serving.Dockerfile -t ghcr.io/nlg-serving/nlg-serving:0.1.0 .

# The chart's triton.image: the package is installed by its Python (3.10), so the compiled wheels
# (tokenizers, numpy, safetensors) match the interpreter that the Python backend stub embeds.
ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:24.10-pyt-python-py3

FROM ${TRITON_IMAGE} AS package
WORKDIR /src
COPY pyproject.toml README.md ./
COPY triton_backend triton_backend
COPY autoscaler autoscaler
# The locked versions of what fits that image (scripts/lock compiles them within
# docker/triton-24.10.constraints.txt).
COPY locks/triton-24.10.txt /tmp/lock.txt
RUN python3 -m pip install --no-cache-dir --target /opt/nlg/site-packages -c /tmp/lock.txt ".[serving]"

FROM python:3.10-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY triton_backend triton_backend
COPY autoscaler autoscaler
COPY locks/requirements.txt /tmp/lock.txt
# The install writes every console script of the project; nlg-demo's package (nlg_demo) is not here.
RUN python -m pip install --no-cache-dir -c /tmp/lock.txt ".[autoscaler]" && rm -rf /src /tmp/lock.txt /usr/local/bin/nlg-demo
COPY --from=package /opt/nlg/site-packages /opt/nlg/site-packages
COPY model_repository /opt/nlg/model_repository
WORKDIR /
# The chart runs the autoscaler as 65532 with a read-only root filesystem.
USER 65532:65532
CMD ["nlg-autoscaler", "--help"]

# syntax=docker/dockerfile:1
# gpuadvisor: one image for the node agent, the queue exporter and the advisor (docs/deploy.md).
#
#   docker build -t gpuadvisor:0.1.0 .
#   docker run --rm -p 19844:19844 -v "$PWD/advisor.yaml:/etc/gpuadvisor/advisor.yaml:ro" \
#     gpuadvisor:0.1.0 advisor --config /etc/gpuadvisor/advisor.yaml
#
# The agent needs the NVIDIA container runtime (it injects libnvidia-ml.so.1 and /dev/nvidia*);
# the queue exporter on Slurm needs squeue and munge, so it runs on the head node (systemd) or
# in an image built FROM this one that adds the cluster's own Slurm client.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Build stage: a wheel from the sources, installed with its dependencies into a venv that has
# no pip or setuptools of its own (the builder's pip installs into it with --python). No extras:
# the `report` extra (matplotlib, for simulate's plots) stays out of the servers' image.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY gpuadvisor ./gpuadvisor
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/gpuadvisor \
 && python -m pip --python /opt/gpuadvisor/bin/python install /wheels/gpuadvisor-*.whl

# Runtime stage: the venv only (no compiler, no sources, no pip or setuptools: the base image's
# own are removed, so nothing in the image can install packages), run as an unprivileged user.
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
# The source revision (docker build --build-arg REVISION=$(git rev-parse HEAD) .): shown as the
# revision label of gpuadvisor_build_info; empty when not given. Nothing runs git in the image.
ARG REVISION=""
LABEL org.opencontainers.image.title="gpuadvisor" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.description="Makes GPU-cluster queueing waste visible and recommends what to reorder: node agent, queue exporter and advisor." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN python -m pip uninstall --yes --no-input pip setuptools wheel \
 && groupadd --system --gid 10001 gpuadvisor \
 && useradd --system --uid 10001 --gid gpuadvisor --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin gpuadvisor
COPY --from=builder /opt/gpuadvisor /opt/gpuadvisor
ENV PATH=/opt/gpuadvisor/bin:$PATH \
    GPUADVISOR_REVISION=${REVISION} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
# agent, queue exporter, advisor (gpuadvisor/cli/listen.py)
EXPOSE 19842 19843 19844
ENTRYPOINT ["gpuadvisor"]
CMD ["advisor", "--help"]

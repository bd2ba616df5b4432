# One image for both commands: `ascend-dra run` (node daemon, DaemonSet) and `ascend-dra webhook`.
#
#   make image                                   # podman build -t ascend-dra:<version> .
#   podman build --build-arg BASE_IMAGE=registry.example.com/python:3.11-slim-bookworm -t ascend-dra .
#
# BASE_IMAGE must be a Debian-based CPython 3.11 image with python3.11 at /usr/local/bin (the
# official python:3.11-slim layout): the venv built in the first stage points at that interpreter.
# Default user 65532 (the webhook runs so); the chart runs the daemon as root, privileged where its
# profiles read real NPUs (deployments/helm/ascend-dra/README.md, docs/operations.md).
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY ascend_dra ./ascend_dra
# Every dependency at the version in requirements.lock (runtime only: no test/gen/dev extras),
# then a consistency check of the whole environment.
RUN python3.11 -m venv /opt/ascend-dra \
 && /opt/ascend-dra/bin/pip install -c requirements.lock . \
 && /opt/ascend-dra/bin/pip check \
 && /opt/ascend-dra/bin/ascend-dra --help >/dev/null

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="ascend-dra" \
      org.opencontainers.image.description="Kubernetes DRA driver for Huawei Ascend NPUs (node daemon and admission webhook)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/ascend-dra/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=builder /opt/ascend-dra /opt/ascend-dra
USER 65532:65532
ENTRYPOINT ["ascend-dra"]
CMD ["--help"]

# One image for both commands: `ascend-dra run` (node daemon, DaemonSet) and `ascend-dra webhook`.
#
#   make image      # hack/build-image.sh: a Debian bookworm base made with mmdebstrap and the locked
#                   # wheels fetched on the host; no registry, no network in the build
#   podman build -t ascend-dra .                                      # python:3.11-slim-bookworm, PyPI
#   podman build --build-arg BASE_IMAGE=registry.example.com/python:3.11-slim-bookworm -t ascend-dra .
#
# BASE_IMAGE: a Debian-based image with CPython 3.11 as `python3.11` on PATH. BUILDER_IMAGE (the first
# stage; default BASE_IMAGE) must have the same interpreter at the same path plus a working
# `python3.11 -m venv`: the venv it builds is copied into BASE_IMAGE and points at that interpreter.
# WHEELS: empty (default) installs from the package index; a directory in the build (`make image`
# mounts one with `podman build --volume DIR:/wheels:ro`) installs only from the wheels in it.
# Default user 65532 (the webhook runs so); the chart runs the daemon as root, privileged where its
# profiles read real NPUs (deployments/helm/ascend-dra/README.md, docs/operations.md).
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm
ARG BUILDER_IMAGE=${BASE_IMAGE}

FROM ${BUILDER_IMAGE} AS builder
ARG WHEELS=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The dependencies first, in a layer of their own that a change of the code does not rebuild: exactly
# pyproject.toml's dependencies at the versions in requirements.lock (runtime only: no extras).
COPY pyproject.toml requirements.lock ./
RUN python3.11 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' >dependencies.txt \
 && python3.11 -m venv /opt/ascend-dra \
 && /opt/ascend-dra/bin/pip install --quiet ${WHEELS:+--no-index --find-links "$WHEELS"} -c requirements.lock -r dependencies.txt
# Then ascend-dra itself, a consistency check of the whole environment, and pip and setuptools
# leave the venv (nothing installs at run time).
COPY LICENSE README.md ./
COPY ascend_dra ./ascend_dra
RUN /opt/ascend-dra/bin/pip install --quiet ${WHEELS:+--no-index --find-links "$WHEELS"} --no-deps . \
 && /opt/ascend-dra/bin/pip check \
 && /opt/ascend-dra/bin/ascend-dra --help >/dev/null \
 && /opt/ascend-dra/bin/pip uninstall --quiet --yes pip setuptools

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="ascend-dra" \
      org.opencontainers.image.description="Kubernetes DRA driver for Huawei Ascend NPUs (node daemon and admission webhook)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/ascend-dra/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=builder /opt/ascend-dra /opt/ascend-dra
USER 65532:65532
ENTRYPOINT ["ascend-dra"]
CMD ["--help"]

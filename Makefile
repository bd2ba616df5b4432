# ascend-dra developer commands. `make test` is what CI runs (.ci/run).
PYTHON ?= python3.11
VENV ?= .venv
# The venv of `make test-floors`: every runtime dependency at its lower bound (hack/floors.txt).
FLOORS_VENV ?= .venv-floors
PY := $(VENV)/bin/python
CLUSTER_DIR ?= .cluster
# Kubernetes minor versions the cluster suite runs on (`make test`); the first is the default of every
# other target. Each has a wrapper module tests/cluster/go-k8s-<minor>/.
K8S_VERSIONS ?= 1.35 1.36 1.37
K8S ?= $(firstword $(K8S_VERSIONS))

.PHONY: venv test test-unit test-floors test-integration test-cluster test-container test-kubelet test-plugins proto \
        proto-check lint demo cluster-bins node-bins container-deps observe-deps cluster-up cluster-down webhook-up webhook-down bench scale soak clean helm-bin \
        chart-check image test-e2e e2e-bins e2e-up e2e-down

# The venv is (re)built when pyproject.toml changes; the stamp records the last install.
$(VENV)/.installed: pyproject.toml plugins/example-profile/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,gen,dev]' -e plugins/example-profile
	touch $@

venv: $(VENV)/.installed

# Rebuilt from scratch when pyproject.toml or the floors change (measured: 70 s on 2 cores, pip cache warm).
$(FLOORS_VENV)/.installed: pyproject.toml hack/floors.txt plugins/example-profile/pyproject.toml
	rm -rf $(FLOORS_VENV)
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FLOORS_VENV)/bin/python -m pip install --quiet -c hack/floors.txt -e '.[test]' -e plugins/example-profile
	touch $@

# `pytest tests` (all but tests/cluster) on the first version includes tests/kubelet (the real kubelet and
# containerd; 1.35 only, it skips itself with the reason on another version) and tests/e2e (our image and
# chart on two kubelet 1.37 nodes, whatever the version: its control plane is 1.37); its 20 slowest tests
# are listed at the end. Then tests/cluster on every version side by side: each run starts its own control
# plane and mostly waits on it (the three took 9 min 11 s side by side in a warm CI run, one alone about 7.5).
test: venv proto-check lint chart-check cluster-bins node-bins e2e-bins container-deps observe-deps test-floors
	ASCEND_DRA_K8S=$(firstword $(K8S_VERSIONS)) $(PY) -m pytest tests -q --ignore=tests/cluster --durations=20
	hack/test-versions.sh $(PY) $(K8S_VERSIONS)
	$(PY) -m pytest plugins/example-profile/tests -q

test-unit: venv
	$(PY) -m pytest tests/unit -q

# The unit tests with every runtime dependency at the lower bound pyproject.toml allows (about 95 s).
test-floors: $(FLOORS_VENV)/.installed
	$(FLOORS_VENV)/bin/python -m pytest tests/unit -q

test-integration: venv
	$(PY) -m pytest tests/integration -q

test-cluster: venv cluster-bins observe-deps
	for v in $(K8S_VERSIONS); do ASCEND_DRA_K8S=$$v $(PY) -m pytest tests/cluster -q || exit 1; done

test-container: venv container-deps
	$(PY) -m pytest tests/container -q

test-kubelet: venv node-bins container-deps
	tests/cluster/build.sh --k8s 1.35
	ASCEND_DRA_K8S=1.35 $(PY) -m pytest tests/kubelet -q

# The end-to-end tier alone: our image and chart on two kubelet 1.37 nodes (tests/e2e/README.md).
test-e2e: venv e2e-bins container-deps
	$(PY) -m pytest tests/e2e -q

# The same bed left running with the chart installed, to try ascend-dra on (README.md); prints the
# KUBECONFIG export. `make e2e-down` stops it and removes $(E2E_DIR).
E2E_DIR ?= .e2e
e2e-up: venv e2e-bins image
	$(PY) -m tests.e2e.cli up --dir $(E2E_DIR)

e2e-down:
	@if [ ! -x $(PY) ]; then echo "nothing to stop (no $(VENV) yet)"; exit 0; fi; \
	$(PY) -m tests.e2e.cli down --dir $(E2E_DIR)

# Control plane, kubelet + kubectl 1.37, containerd and helm of the bed, only what is missing.
e2e-bins: helm-bin
	tests/cluster/build.sh --k8s 1.37
	tests/kubelet/build.sh --k8s 1.37

# podman, runc and busybox for tests/container, from Debian, only what is missing (apt needs root or sudo).
container-deps:
	hack/install-container-deps.sh

# Prometheus for the monitoring test of tests/cluster, from Debian, only when missing (apt needs root or sudo).
observe-deps:
	hack/install-observe-deps.sh

proto: venv
	PYTHON=$(PY) hack/gen-proto.sh

# Fails when the checked-in generated code differs from what the .proto files generate.
proto-check: proto
	git diff --exit-code --stat -- ascend_dra/kubelet/_gen tests/kubelet_pb
	test -z "$$(git status --porcelain -- ascend_dra/kubelet/_gen tests/kubelet_pb)"

lint: venv
	$(VENV)/bin/ruff check ascend_dra tests plugins bench
	$(VENV)/bin/lint-imports --no-cache --no-logo

demo: venv
	PY=$(PY) hack/demo.sh

# helm, built from its Go module (hack/go-helm) into ~/.cache/ascend-dra/helm-<version>/bin, only
# when missing (hack/build-helm.sh).
HELM = $(shell hack/build-helm.sh --print)
CHART = deployments/helm/ascend-dra
helm-bin:
	hack/build-helm.sh >/dev/null

# helm lint --strict and helm template of the chart with its default values and every ci/*-values.yaml.
chart-check: helm-bin
	$(HELM) lint --strict --kube-version 1.35 $(CHART)
	$(HELM) template ascend-dra $(CHART) --kube-version 1.35 >/dev/null
	for f in $(CHART)/ci/*-values.yaml; do \
	  $(HELM) lint --strict --kube-version 1.35 $(CHART) -f $$f && \
	  $(HELM) template ascend-dra $(CHART) --kube-version 1.35 -f $$f >/dev/null || exit 1; done

# The image (Dockerfile), with podman, from Debian's packages and PyPI only (hack/build-image.sh): a
# Debian bookworm base made with mmdebstrap and the locked wheels fetched on the host, both cached in
# ~/.cache/ascend-dra; the build itself needs no network. BASE_IMAGE=... builds on another base
# (python:3.11-slim-bookworm, the Dockerfile's default); WHEELS=index has pip in the build use its
# index (docs/operations.md, "Image"). tests/container/test_image.py builds it in `make test`.
IMAGE ?= ascend-dra:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
BASE_IMAGE ?=
WHEELS ?= host
image: container-deps
	IMAGE=$(IMAGE) BASE_IMAGE=$(BASE_IMAGE) WHEELS=$(WHEELS) PYTHON=$(PYTHON) hack/build-image.sh

# Control-plane binaries (kube-apiserver, kube-scheduler, kube-controller-manager, etcd) are
# built from their Go modules into ~/.cache/ascend-dra/controlplane-<version>, only when missing
# (cold: ~7 min for the first version; the next one shares the Go caches, see tests/cluster/README.md),
# and cert-manager's CRDs (hack/fetch-cert-manager-crds.sh; 4 MB from the Go module proxy).
cluster-bins:
	for v in $(K8S_VERSIONS); do tests/cluster/build.sh --k8s $$v || exit 1; done
	hack/fetch-cert-manager-crds.sh >/dev/null   # cert-manager's CRDs from its Go module, for the chart tests

# The kubelet 1.35 (same k8s.io/kubernetes modules as its control plane) for tests/kubelet and containerd
# 2.x + ctr, into ~/.cache/ascend-dra/{kubelet,containerd}-<version>, only when missing (tests/e2e's
# kubelet 1.37 and kubectl: e2e-bins).
node-bins:
	tests/kubelet/build.sh

cluster-up: venv
	tests/cluster/build.sh --k8s $(K8S)
	$(PY) tests/cluster/controlplane.py up --dir $(CLUSTER_DIR) --k8s $(K8S)   # prints the export lines

# Nothing to stop before the first `make venv` (a fresh clone): say so instead of failing.
cluster-down:
	@if [ ! -x $(PY) ]; then echo "nothing to stop (no $(VENV) yet)"; exit 0; fi; \
	$(PY) -m tests.cluster.webhook_process down --dir $(CLUSTER_DIR) && \
	$(PY) tests/cluster/controlplane.py down --dir $(CLUSTER_DIR)

# The admission webhook on the cluster-up control plane (docs/webhook.md, "On the local control plane").
webhook-up: venv
	$(PY) -m tests.cluster.webhook_process up --dir $(CLUSTER_DIR)

webhook-down: venv
	$(PY) -m tests.cluster.webhook_process down --dir $(CLUSTER_DIR)

bench: venv cluster-bins node-bins container-deps
	$(PY) bench/bench_matrix.py
	$(PY) bench/bench_prepare.py
	$(PY) bench/bench_discovery.py
	$(PY) bench/bench_dcmi.py
	$(PY) bench/bench_startup.py
	$(PY) bench/bench_webhook.py
	$(PY) bench/bench_kubelet.py

# The scale bed (tests/scale, issue 37): 100 simulated nodes, one daemon each, ClusterLoader2's DRA
# workloads, ours beside the Go example driver (bench/README.md builds it); prints the report. About
# an hour on 2 cores; SCALE_ARGS=--quick for 10 nodes. Not in `make test` (its smoke test is).
SCALE_ARGS ?=
scale: venv cluster-bins
	$(PY) -m tests.scale.run $(SCALE_ARGS)

# The full kill -9 storm (tests/storm.py): 200 trials per profile, prints the tallies (all must be 0);
# then the same with ENOSPC and EIO at random durable writes (--disk-faults).
soak: venv
	$(PY) -m tests.storm --trials 200
	$(PY) -m tests.storm --trials 200 --disk-faults

clean:
	rm -rf $(VENV) $(FLOORS_VENV) demo demo-hard-vnpu .cluster $(E2E_DIR)

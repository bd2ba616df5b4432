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
        proto-check lint demo cluster-bins node-bins container-deps cluster-up cluster-down webhook-up webhook-down bench soak clean helm-bin \
        chart-check image

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

# `pytest tests` on the first version includes tests/kubelet (the real kubelet and containerd; 1.35 only,
# it skips itself with the reason on another version).
test: venv proto-check lint chart-check cluster-bins node-bins container-deps test-floors
	ASCEND_DRA_K8S=$(firstword $(K8S_VERSIONS)) $(PY) -m pytest tests -q
	for v in $(wordlist 2,9,$(K8S_VERSIONS)); do ASCEND_DRA_K8S=$$v $(PY) -m pytest tests/cluster -q || exit 1; done
	$(PY) -m pytest plugins/example-profile/tests -q

test-unit: venv
	$(PY) -m pytest tests/unit -q

# The unit tests with every runtime dependency at the lower bound pyproject.toml allows (about 95 s).
test-floors: $(FLOORS_VENV)/.installed
	$(FLOORS_VENV)/bin/python -m pytest tests/unit -q

test-integration: venv
	$(PY) -m pytest tests/integration -q

test-cluster: venv cluster-bins
	for v in $(K8S_VERSIONS); do ASCEND_DRA_K8S=$$v $(PY) -m pytest tests/cluster -q || exit 1; done

test-container: venv container-deps
	$(PY) -m pytest tests/container -q

test-kubelet: venv node-bins container-deps
	tests/cluster/build.sh --k8s 1.35
	ASCEND_DRA_K8S=1.35 $(PY) -m pytest tests/kubelet -q

# podman, runc and busybox for tests/container, from Debian, only what is missing (apt needs root or sudo).
container-deps:
	hack/install-container-deps.sh

proto: venv
	PYTHON=$(PY) hack/gen-proto.sh

# Fails when the checked-in generated code differs from what the .proto files generate.
proto-check: proto
	git diff --exit-code --stat -- ascend_dra/kubelet/_gen tests/kubelet_pb
	test -z "$$(git status --porcelain -- ascend_dra/kubelet/_gen tests/kubelet_pb)"

lint: venv
	$(VENV)/bin/ruff check ascend_dra tests plugins bench

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

# The image (Dockerfile), with podman; not part of `make test`. Needs the base image's registry
# and PyPI; BASE_IMAGE=... picks another base (docs/operations.md, "Image").
IMAGE ?= ascend-dra:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
BASE_IMAGE ?=
image:
	podman build $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) -t $(IMAGE) .

# Control-plane binaries (kube-apiserver, kube-scheduler, kube-controller-manager, etcd) are
# built from their Go modules into ~/.cache/ascend-dra/controlplane-<version>, only when missing
# (cold: ~7 min for the first version; the next one shares the Go caches, see tests/cluster/README.md).
cluster-bins:
	for v in $(K8S_VERSIONS); do tests/cluster/build.sh --k8s $$v || exit 1; done

# The kubelet (same k8s.io/kubernetes 1.35 modules as the control plane) and containerd 2.x + ctr for
# tests/kubelet, into ~/.cache/ascend-dra/{kubelet,containerd}-<version>, only when missing.
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

# The full kill -9 storm (tests/storm.py): 200 trials per profile, prints the tallies (all must be 0).
soak: venv
	$(PY) -m tests.storm --trials 200

clean:
	rm -rf $(VENV) $(FLOORS_VENV) demo demo-hard-vnpu .cluster

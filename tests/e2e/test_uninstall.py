"""After the tier's work: what the daemon and webhook pods use, then ``helm uninstall`` of both
releases (docs/operations.md, "Uninstall"):
every object, socket, registration and ResourceSlice of ours goes; a running claim pod keeps its
container, and its node keeps what the docs list (the checkpoint, the pod's CDI spec) until the
documented commands remove it.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e import usage
from tests.e2e.claims import CLAIMS_NS, LAB_NS, running_state
from tests.e2e.nodeview import kubelet_lines
from tests.e2e.release import (
    DRIVER,
    FAKE_NODE,
    FAKE_RELEASE,
    LAB_NODE,
    LAB_RELEASE,
    NAMESPACE,
    WEBHOOK,
    daemon_pods,
    webhook_pods,
)
from tests.kubelet.pods import RES, delete_pod, ok, our_slices, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CDI = "/var/run/cdi"
PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRIVER}"
#: docs/operations.md, "Uninstall": what removes the files it leaves on a node.
DOCS_CLEANUP = f"rm -f /var/run/cdi/k8s.{DRIVER}-*.yaml; rm -rf /var/lib/kubelet/plugins/{DRIVER}"


def test_the_pods_of_the_roll_stay_within_their_memory_requests_and_limits(bed, installed):
    """The daemon and webhook pods the upgrade started, after the pods created during the roll
    (tests/e2e/usage.py; the chart's requests and limits come from these figures)."""
    assert not usage.outgrown(usage.snapshot(bed, "after the roll"))


def _gone(cp, path: str) -> bool:
    return cp.api("GET", path)[0] == 404


def test_helm_uninstall_removes_ours_and_leaves_on_the_node_what_the_docs_say(bed, tools, installed, fake_pod):
    cp = bed.cp
    # The workloads first (docs/operations.md), all but one running claim pod on the fake node.
    for ns in (CLAIMS_NS, LAB_NS):
        status, reply = cp.api("GET", f"/api/v1/namespaces/{ns}/pods")
        for pod in reply.get("items", []) if status == 200 else []:
            if (ns, pod["metadata"]["name"]) != (CLAIMS_NS, "fake-1"):
                delete_pod(cp, ns, pod["metadata"]["name"], within=120)
    kept = running_state(cp, CLAIMS_NS, "fake-1")
    kept_uid = fake_pod["claim"]["metadata"]["uid"]
    began = time.time()
    tools.helm("uninstall", FAKE_RELEASE, "-n", NAMESPACE)
    tools.helm("uninstall", LAB_RELEASE, "-n", NAMESPACE)

    # Every object of the chart.
    for path in (f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{FAKE_RELEASE}-kubeletplugin",
                 f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{LAB_RELEASE}-kubeletplugin",
                 f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{WEBHOOK}",
                 f"/api/v1/namespaces/{NAMESPACE}/services/{WEBHOOK}",
                 f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK}",
                 f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{WEBHOOK}",
                 *(f"/apis/admissionregistration.k8s.io/v1/{kind}/{r}-{p}" for r in (FAKE_RELEASE, LAB_RELEASE)
                   for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings")
                   for p in ("resourceslices-own-node", "resourceclaim-status")),
                 f"{RES}/deviceclasses/fake.{DRIVER}", f"{RES}/deviceclasses/hami-vnpu-core.project-hami.io",
                 *(f"/apis/rbac.authorization.k8s.io/v1/{kind}/{name}"
                   for kind in ("clusterroles", "clusterrolebindings")
                   for name in (f"{FAKE_RELEASE}-kubeletplugin", f"{LAB_RELEASE}-kubeletplugin", WEBHOOK)),
                 *(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}"
                   for name in (f"{FAKE_RELEASE}-kubeletplugin", f"{LAB_RELEASE}-kubeletplugin", WEBHOOK)),
                 *(f"/api/v1/namespaces/{NAMESPACE}/resourcequotas/{r}-priority" for r in (FAKE_RELEASE, LAB_RELEASE)),
                 f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{WEBHOOK}"):
        assert _gone(cp, path), path
    wait_for(lambda: not daemon_pods(cp, FAKE_RELEASE) and not daemon_pods(cp, LAB_RELEASE)
             and not webhook_pods(cp), "the chart's pods gone", within=120)
    for name, node in bed.nodes.items():
        # The daemon removed its sockets; the kubelet unregistered it and, 30 s later, wiped its slices.
        wait_for(lambda n=node: [ln for ln in kubelet_lines(n, "Unregistered DRA plugin", since=began)
                                 if 'numPlugins=0' in ln and DRIVER in ln], f"{name}: plugin unregistered", within=60)
        wait_for(lambda n=name: not our_slices(cp, n), f"{name}: our ResourceSlices deleted", within=120)
        registry = node.host_path("/var/lib/kubelet/plugins_registry")
        assert not list(registry.glob(f"{DRIVER}*")), list(registry.iterdir())
        assert not list(node.host_path(PLUGIN_DIR).glob("*.sock")), name
    # Left on purpose on the fake node: the running pod, its CDI spec, the checkpoint with its claim.
    fake = bed.nodes[FAKE_NODE]
    assert running_state(cp, CLAIMS_NS, "fake-1") == kept
    left = [p.name for p in fake.host_path(CDI).glob(f"k8s.{DRIVER}-*.yaml")]
    assert [n for n in left if kept_uid in n] and [n for n in left if n.endswith("_common.yaml")], left
    assert kept_uid in fake.host_path(f"{PLUGIN_DIR}/checkpoint.json").read_text() + (
        fake.host_path(f"{PLUGIN_DIR}/checkpoint.journal").read_text())
    assert ok(cp, "GET", f"{RES}/namespaces/{CLAIMS_NS}/resourceclaims/{fake_pod['claim']['metadata']['name']}")
    # Helm never owned the webhook's Secret (hack/webhook-certs.sh made it): the documented command.
    assert ok(cp, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{WEBHOOK}-tls")
    tools.kubectl("-n", NAMESPACE, "delete", "secret", f"{WEBHOOK}-tls")
    # The lab node has no pod left: the documented commands remove the rest.
    lab = bed.nodes[LAB_NODE]
    assert lab.host_path(f"{PLUGIN_DIR}/checkpoint.json").exists()
    bed.run_in(LAB_NODE, "sh", "-c", DOCS_CLEANUP)
    assert not list(lab.host_path(CDI).glob(f"k8s.{DRIVER}-*")) and not lab.host_path(PLUGIN_DIR).exists()
    assert not list(lab.host_path("/usr/local/hami-vnpu-core/containers").iterdir())

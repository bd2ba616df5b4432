"""The chart's deployment defaults against defects reported publicly for other drivers' charts: what
``helm template`` renders is checked here without an API server (the server-side dry runs are in
test_chart.py).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.cluster.chart import by_kind, render

pytestmark = pytest.mark.cluster

#: A label value (apimachinery's validation.IsValidLabelValue): at most 63 characters.
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
#: A Service name (an RFC 1035 label): at most 63 characters.
_DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")

#: Helm refuses release names over 53 characters; these are as long as it allows, one containing
#: the chart's name (fullname = the release name) and one not (fullname = "<release>-ascend-dra").
LONG_RELEASES = ("ascend-dra-" + "x" * 42, "npu-production-cluster-eu-west-1-primary-" + "y" * 12)


def _labels(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """Every label of ``obj``: its own, its selector's and its pod template's."""
    found = list(obj["metadata"].get("labels", {}).items())
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    if isinstance(selector, dict):
        found += list(selector.get("matchLabels", {}).items())
    template = spec.get("template") or {}
    found += list(template.get("metadata", {}).get("labels", {}).items())
    return found


@pytest.mark.parametrize("release", LONG_RELEASES)
def test_the_longest_release_names_render_valid_labels_and_names(release):
    """modelplaneai/modelplane#215 (the NVIDIA DRA driver's kubelet-plugin ServiceAccount name over 63
    characters), Kong/charts#675, helm/charts#7317: a suffix added after the fullname's truncation
    made a label value of 64 characters, which the API server refuses (the DaemonSet never exists)."""
    assert len(release) == 53
    objects = render("ascend-dra-system", "certmanager-values.yaml", release=release)
    for obj in objects:
        where = f"{obj['kind']} {obj['metadata']['name']}"
        for key, value in _labels(obj):
            assert len(value) <= 63 and _LABEL_VALUE.fullmatch(value), f"{where}: label {key}={value!r}"
    for kind in ("ServiceAccount", "Service", "DaemonSet", "Deployment"):
        for obj in by_kind(objects, kind):
            name = obj["metadata"]["name"]
            # A Service name is a DNS label; a ServiceAccount's name becomes a label value where the
            # CNI keys identities on it (Cilium); a workload's name is its pods' app.kubernetes.io/name.
            assert len(name) <= 63 and _DNS_1035_LABEL.fullmatch(name), f"{kind} {name!r}"
    [ds] = by_kind(objects, "DaemonSet")
    [policy] = [p for p in by_kind(objects, "ValidatingAdmissionPolicy") if "resourceslices" in p["metadata"]["name"]]
    account = ds["spec"]["template"]["spec"]["serviceAccountName"]
    assert f'"system:serviceaccount:ascend-dra-system:{account}"' in policy["spec"]["matchConditions"][0]["expression"]


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


@pytest.mark.parametrize("value_files", [(), ("fake-values.yaml",)], ids=["default", "fake"])
def test_the_daemon_tolerates_every_taint_of_an_accelerator_node_noexecute_included(value_files):
    """kubernetes/kubernetes#129402: the kubelet must call NodeUnprepareResources before a pod with
    claims may go, so pods evicted by a NoExecute taint the plugin does not tolerate stay Terminating
    (the plugin is evicted with them and the DaemonSet does not bring it back while the taint is there)."""
    [ds] = by_kind(render("ns", *value_files), "DaemonSet")
    tolerations = ds["spec"]["template"]["spec"].get("tolerations", [])
    for taint in ({"key": "huawei.com/Ascend910", "value": "present", "effect": "NoSchedule"},
                  {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                  {"key": "maintenance.example.com/drain", "value": "true", "effect": "NoExecute"},
                  {"key": "huawei.com/Ascend910", "value": "present", "effect": "NoExecute"}):
        assert _tolerates(tolerations, taint), f"the DaemonSet does not tolerate {taint}: {tolerations}"


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_the_webhook_pdb_lets_a_drain_evict_one_replica_at_any_replica_count(replicas):
    """Project-HAMi/HAMi-DRA#79, helm/charts#7127: minAvailable 1 over a single replica allows no
    voluntary disruption, so `kubectl drain` of its node never finishes."""
    objects = render("ns", "webhook-values.yaml", set_values=(f"webhook.replicas={replicas}",))
    [pdb] = by_kind(objects, "PodDisruptionBudget")
    [deployment] = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == replicas
    spec = pdb["spec"]
    # Disruptions allowed with every replica healthy (the disruption controller's arithmetic).
    allowed = spec["maxUnavailable"] if "maxUnavailable" in spec else replicas - spec["minAvailable"]
    assert allowed >= 1, f"a drain can never evict the webhook's last replica: {spec}"
    if replicas > 1:
        assert allowed < replicas, f"a drain may evict every replica at once: {spec}"


def test_a_quota_admits_the_critical_priority_classes_in_the_release_namespace():
    """kubernetes/perf-tests#3481, kubernetes/test-infra#35233, kubernetes-sigs/dra-example-driver#168:
    where the ResourceQuota admission limits system-node-critical and system-cluster-critical to
    namespaces with a quota for them (GKE's default), the DaemonSet's pods are refused with
    "insufficient quota to match these scopes" unless the release's namespace has one."""
    objects = render("ascend-dra-system", "certmanager-values.yaml")
    [quota] = by_kind(objects, "ResourceQuota")
    assert quota["metadata"]["namespace"] == "ascend-dra-system"
    [expression] = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert expression["scopeName"] == "PriorityClass" and expression["operator"] == "In"
    [ds] = by_kind(objects, "DaemonSet")
    [deployment] = by_kind(objects, "Deployment")
    for workload in (ds, deployment):
        assert workload["spec"]["template"]["spec"]["priorityClassName"] in expression["values"]
    # It admits, it does not limit: one pod per node, two during a surge, on any cluster size.
    assert int(quota["spec"]["hard"]["pods"]) >= 100_000
    without = render("ns", set_values=("priorityQuota.enabled=false",))
    assert not by_kind(without, "ResourceQuota")
    no_class = render("ns", set_values=("daemon.priorityClassName=",))
    assert not by_kind(no_class, "ResourceQuota")
    assert "priorityClassName" not in by_kind(no_class, "DaemonSet")[0]["spec"]["template"]["spec"]


def test_an_upgrade_with_reuse_values_from_a_chart_without_priority_quota_still_renders():
    """openeverest/openeverest#2610, cilium/cilium#18115: `helm upgrade --reuse-values` takes the old
    release's values, without the new chart's new keys; a template that reads a new key's field then
    fails with "nil pointer evaluating interface {}". `--set KEY=null` leaves the key out the same way."""
    objects = render("ns", set_values=("priorityQuota=null",))
    [quota] = by_kind(objects, "ResourceQuota")
    assert quota["spec"]["hard"]["pods"] == "1000000"

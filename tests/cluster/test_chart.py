"""The Helm chart against the real API server: every rendered object is accepted (server-side dry
run), the probes point at what the container serves, the profiles decide mounts and privileges.

The policy and RBAC tests, which need v1beta2 served too, are in test_chart_policy.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.cluster.chart import (
    CERT_MANAGER_KINDS,
    CHART,
    by_kind,
    collection_path,
    helm,
    install_cert_manager_crds,
    render,
)

pytestmark = pytest.mark.cluster

VALUE_SETS = {
    "default": (),
    "fake": ("fake-values.yaml",),
    "webhook": ("webhook-values.yaml",),
    "cert-manager": ("certmanager-values.yaml",),
}


@pytest.fixture
def namespace(control_plane):
    """A fresh namespace for one release (DaemonSets and Deployments are validated inside it)."""
    name = f"chart-{uuid.uuid4().hex[:8]}"
    status, reply = control_plane.api("POST", "/api/v1/namespaces",
                                      {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert status == 201, reply
    yield name
    control_plane.api("DELETE", f"/api/v1/namespaces/{name}")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _plugin(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [ds] = by_kind(objects, "DaemonSet")
    [container] = ds["spec"]["template"]["spec"]["containers"]
    return container


@pytest.fixture(scope="module")
def cert_manager(control_plane):
    """cert-manager's kinds in the API server, under its own schemas (chart.install_cert_manager_crds)."""
    install_cert_manager_crds(control_plane)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_rendered_object_is_accepted_by_a_server_side_dry_run(control_plane, cert_manager, namespace,
                                                                     value_set):
    """Every object, cert-manager's Issuers and Certificates included, passes a strict server-side
    dry run (an unknown or misplaced field is an error, not silently dropped)."""
    objects = render(namespace, *VALUE_SETS[value_set])
    for obj in objects:
        path = collection_path(control_plane, obj)
        # A server-side apply (kubectl apply --server-side --dry-run=server): valid whether or not an
        # object of that name exists already (another test's DeviceClass, say), where a create is 409.
        status, reply = control_plane.api(
            "PATCH", f"{path}/{obj['metadata']['name']}?dryRun=All&fieldValidation=Strict&fieldManager=chart-test"
            "&force=true", obj, content_type="application/apply-patch+yaml")
        assert status in (200, 201), f"{value_set}: {obj['kind']} {obj['metadata']['name']}: {status} {reply}"
    kinds = {o["kind"] for o in objects}
    assert {"DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DeviceClass",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    if value_set in ("webhook", "cert-manager"):
        assert {"Deployment", "Service", "PodDisruptionBudget", "ValidatingWebhookConfiguration",
                "MutatingWebhookConfiguration"} <= kinds
    if value_set == "cert-manager":
        assert {(o["apiVersion"], o["kind"]) for o in objects} >= CERT_MANAGER_KINDS


def test_helm_lint_passes_for_every_value_set():
    for files in VALUE_SETS.values():
        args = ["lint", str(CHART), "--strict", "--kube-version", "1.35"]
        for name in files:
            args += ["-f", str(CHART / "ci" / name)]
        assert "0 chart(s) failed" in helm(*args)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_probes_point_at_the_ports_the_container_is_told_to_serve(value_set):
    container = _plugin(render("ns", *VALUE_SETS[value_set]))
    env = _env(container)
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    health, metrics = int(env["HEALTHCHECK_PORT"]), int(env["METRICS_PORT"])
    assert health and container["startupProbe"]["grpc"]["port"] == health == ports["healthcheck"]
    assert container["livenessProbe"]["grpc"]["port"] == health
    if metrics:
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": metrics}
        assert ports["metrics"] == metrics
    else:
        assert container["readinessProbe"]["grpc"]["port"] == health
        assert "metrics" not in ports


def test_without_the_health_service_there_is_no_probe_and_no_port():
    container = _plugin(render("ns", set_values=("daemon.healthcheckPort=0", "daemon.metricsPort=0",
                                                 "daemon.rollingUpdate=false")))
    assert _env(container)["HEALTHCHECK_PORT"] == "0"
    assert not {"startupProbe", "livenessProbe", "readinessProbe", "ports"} & container.keys()


def test_a_surge_without_a_readiness_probe_is_refused_at_render():
    """Without readiness the surge would retire the old pod before the kubelet registered the new one."""
    with pytest.raises(AssertionError) as failed:  # chart.helm() asserts helm's exit code, with its stderr
        render("ns", set_values=("daemon.healthcheckPort=0", "daemon.metricsPort=0"))
    assert "daemon.rollingUpdate needs a readiness probe" in str(failed.value)


def test_no_profile_is_refused_at_render():
    """``profiles: []`` rendered PROFILES="", which the daemon read as unset and loaded npu-910."""
    with pytest.raises(AssertionError) as failed:
        render("ns", set_values=("profiles=null",))
    assert "profiles is empty: name at least one of fake, npu-310P" in str(failed.value)


@pytest.mark.parametrize(("value", "said"), [
    ("fakeDevices=abc", "at '/fakeDevices': got string, want integer"),
    ("logFormat=xml", "at '/logFormat': value must be one of 'text', 'json'"),
    ("logLevel=verbose", "at '/logLevel'"),
    ("webhook.conversionMode=direct", "at '/webhook/conversionMode': value must be one of 'template', 'claim'"),
    ("webhook.failurePolicy.validating=ignore", "at '/webhook/failurePolicy/validating'"),
    ("webhook.timeoutSeconds.mutating=60", "at '/webhook/timeoutSeconds/mutating'"),
    ("webhook.hamiDeviceConfig.configMap=HAMi_Device", "at '/webhook/hamiDeviceConfig/configMap'"),
    ("daemon.metricsPort=70000", "at '/daemon/metricsPort'"),
    ("kubeletRootDir=relative/kubelet", "at '/kubeletRootDir'"),
    ("daemon.metricPort=1", "at '/daemon': additional properties 'metricPort' not allowed"),
    ("profiles=npu-910", "at '/profiles': got string, want"),
    ("daemon.metricsPort=51515", "daemon.metricsPort and daemon.healthcheckPort are both 51515"),
    ("webhook.metricsPort=8443", "webhook.metricsPort and webhook.port are both 8443"),
    # PROFILE_OPTIONS is comma-separated: the daemon read the rest as an entry "b" (not KEY=VALUE).
    ("profileOptions.npu-910.simulate=a\\,b", "at '/profileOptions/npu-910/simulate'"),
], ids=lambda v: v.split("=")[0] if "=" in v else "")
def test_a_value_of_the_wrong_kind_is_refused_at_render_naming_it(value, said):
    """Without a schema these rendered, and failed later as a crash loop, an API server refusal or,
    for a typo'd key, not at all (an audit of configuration errors)."""
    with pytest.raises(AssertionError) as failed:
        render("ns", "webhook-values.yaml", set_values=(value,))
    assert said in str(failed.value)


def test_rolling_update_uses_max_surge_and_the_pod_uid_and_can_be_turned_off():
    on, off = (by_kind(render("ns", set_values=(f"daemon.rollingUpdate={v}",)), "DaemonSet")[0]
               for v in ("true", "false"))
    assert on["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    [container] = on["spec"]["template"]["spec"]["containers"]
    assert _env(container)["ROLLING_UPDATE_ID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert off["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert "ROLLING_UPDATE_ID" not in _env(off["spec"]["template"]["spec"]["containers"][0])


def test_device_metadata_is_on_by_default_and_can_be_turned_off():
    """daemon.deviceMetadata is the daemon's DEVICE_METADATA (KEP-5304, --device-metadata)."""
    for value, env in ((None, "true"), ("false", "false")):
        [daemon] = by_kind(render("ns", set_values=(f"daemon.deviceMetadata={value}",) if value else ()), "DaemonSet")
        [container] = daemon["spec"]["template"]["spec"]["containers"]
        assert _env(container)["DEVICE_METADATA"] == env


def test_node_name_priority_and_resources():
    [ds] = by_kind(render("ns"), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    env = _env(pod["containers"][0])
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "50m", "memory": "96Mi"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "accelerator", "operator": "In",
                                            "values": ["huawei-Ascend910", "huawei-Ascend310P"]}]}]


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_no_pod_gets_the_namespaces_service_links(value_set):
    """Kubernetes sets ``<SERVICE>_PORT=tcp://...`` in every container for every Service of its
    namespace unless told not to: a Service named ``metrics`` or ``webhook`` beside ours set
    METRICS_PORT or WEBHOOK_PORT, settings of ours, and start-up stopped on a port that is no number."""
    import yaml

    from tests.cluster.chart import ROOT

    pods = [obj["spec"]["template"]["spec"] for obj in render("ns", *VALUE_SETS[value_set])
            if obj["kind"] in ("DaemonSet", "Deployment")]
    assert pods and all(pod.get("enableServiceLinks") is False for pod in pods)
    [plain] = [obj for obj in yaml.safe_load_all((ROOT / "deployments" / "webhook" / "deployment.yaml").read_text())
               if obj and obj["kind"] == "Deployment"]
    assert plain["spec"]["template"]["spec"]["enableServiceLinks"] is False


def _mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container["volumeMounts"]}


def test_the_fake_profile_gets_no_privilege_no_device_and_no_driver_mount():
    objects = render("ns", "fake-values.yaml")
    container = _plugin(objects)
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["runAsUser"] == 0
    assert set(_mounts(container)) == {"plugins-registry", "plugins", "cdi", "tmp"}
    assert "affinity" not in by_kind(objects, "DaemonSet")[0]["spec"]["template"]["spec"]
    assert [c["metadata"]["name"] for c in by_kind(objects, "DeviceClass")] == ["fake.ascend.project-hami.io"]


def test_ascend_profiles_are_privileged_and_see_dev_and_the_driver_at_host_paths():
    container = _plugin(render("ns", set_values=("kubeletRootDir=/data/kubelet",)))
    assert container["securityContext"]["privileged"] is True
    mounts = _mounts(container)
    assert mounts["dev"] == "/dev" and mounts["ascend-driver"] == "/usr/local/Ascend/driver"
    assert mounts["npu-smi"] == "/usr/local/bin/npu-smi" and mounts["ascend-dcmi"] == "/usr/local/dcmi"
    assert mounts["plugins"] == "/data/kubelet/plugins"
    assert mounts["plugins-registry"] == "/data/kubelet/plugins_registry"
    assert _env(container)["KUBELET_ROOT_DIR"] == "/data/kubelet"
    assert "vnpu-core" not in mounts


def test_hami_vnpu_core_mounts_its_dirs_and_passes_them_as_profile_options():
    objects = render("ns", "webhook-values.yaml", set_values=("vnpuCore.vnpuCoreDir=/opt/vnpu",))
    container = _plugin(objects)
    assert _mounts(container)["vnpu-core"] == "/opt/vnpu"
    options = _env(container)["PROFILE_OPTIONS"].split(",")
    assert "HAMivNPUCore.vnpuCoreDir=/opt/vnpu" in options
    assert "HAMivNPUCore.sharedRegionDir=/usr/local/hami-shared-region" in options
    assert [c["metadata"]["name"] for c in by_kind(objects, "DeviceClass")] == ["hami-vnpu-core.project-hami.io"]
    [deployment] = by_kind(objects, "Deployment")
    webhook = deployment["spec"]["template"]["spec"]
    assert webhook["securityContext"]["runAsNonRoot"] is True
    assert _env(webhook["containers"][0])["PROFILES"] == "HAMivNPUCore,npu-910,npu-310P"


def test_a_hami_device_config_is_mounted_into_the_webhook_and_named_to_it():
    """docs/webhook.md#a-hami-device-config: the ConfigMap's key is the file HAMI_DEVICE_CONFIG names."""
    def webhook(*values: str) -> dict:
        [deployment] = by_kind(render("ns", "webhook-values.yaml", set_values=values), "Deployment")
        return deployment["spec"]["template"]["spec"]

    spec = webhook("webhook.hamiDeviceConfig.configMap=hami-device", "webhook.hamiDeviceConfig.key=vnpus.yaml")
    [container] = spec["containers"]
    assert _env(container)["HAMI_DEVICE_CONFIG"] == "/etc/ascend-dra/hami/vnpus.yaml"
    assert _mounts(container)["hami-device-config"] == "/etc/ascend-dra/hami"
    assert {"name": "hami-device-config", "configMap": {"name": "hami-device"}} in spec["volumes"]
    default = webhook()
    assert "HAMI_DEVICE_CONFIG" not in _env(default["containers"][0])
    assert [v["name"] for v in default["volumes"]] == ["tls", "tmp"]


def test_user_profile_options_are_passed_and_win_over_the_charts_paths():
    objects = render("ns", set_values=(
        "profiles={HAMivNPUCore}", "profileOptions.HAMivNPUCore.vnpuCoreDir=/x",
        "profileOptions.npu-910.simulate=never"))
    container = _plugin(objects)
    options = _env(container)["PROFILE_OPTIONS"].split(",")
    assert "HAMivNPUCore.vnpuCoreDir=/x" in options and "npu-910.simulate=never" in options
    assert [o for o in options if o.startswith("HAMivNPUCore.vnpuCoreDir=")] == ["HAMivNPUCore.vnpuCoreDir=/x"]
    # ... and the dirs they name are the ones mounted (values.yaml's own example moved the option only).
    assert _mounts(container)["vnpu-core"] == "/x"
    [volume] = [v for v in by_kind(objects, "DaemonSet")[0]["spec"]["template"]["spec"]["volumes"]
                if v["name"] == "vnpu-core"]
    assert volume["hostPath"]["path"] == "/x"


def test_a_custom_npu_smi_path_is_mounted_and_passed_to_the_daemon():
    """The daemon looks for npu-smi on $PATH and in the driver's install locations only: a file
    mounted elsewhere was never run (an operator's trial)."""
    container = _plugin(render("ns", set_values=("profiles={npu-910}", "ascend.npuSmi=/opt/bin/npu-smi")))
    assert _mounts(container)["npu-smi"] == "/opt/bin/npu-smi"
    assert _env(container)["NPU_SMI"] == "/opt/bin/npu-smi"
    assert "NPU_SMI" not in _env(_plugin(render("ns", set_values=("profiles={fake}",))))


def test_fake_devices_also_sizes_the_simulated_chips_of_the_ascend_profiles():
    """``fakeDevices`` is how many chips a profile's ``simulate`` option invents too (a trial node
    without an NPU); the chart passed it only with the ``fake`` profile (an operator's trial)."""
    container = _plugin(render("ns", set_values=("profiles={hard-vNPU}", "fakeDevices=2",
                                                 "profileOptions.hard-vNPU.simulate=always")))
    assert _env(container)["FAKE_DEVICES"] == "2"
    assert "hard-vNPU.simulate=always" in _env(container)["PROFILE_OPTIONS"]


def test_the_webhook_certificate_modes():
    secret = render("ns", "webhook-values.yaml", set_values=("webhook.certificate.caBundle=Q0E=",))
    [vwc] = by_kind(secret, "ValidatingWebhookConfiguration")
    assert vwc["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    assert "annotations" not in vwc["metadata"] and not by_kind(secret, "Certificate")
    managed = render("ns", "certmanager-values.yaml")
    ca, cert = sorted(by_kind(managed, "Certificate"), key=lambda c: not c["spec"].get("isCA"))
    assert cert["spec"]["secretName"] == "ascend-dra-webhook-tls"
    assert cert["spec"]["dnsNames"][0] == "ascend-dra-webhook.ns.svc"
    # The leaf comes from the release's CA, so the trusted bundle survives the leaf's renewals.
    issuers = {i["metadata"]["name"]: i["spec"] for i in by_kind(managed, "Issuer")}
    assert issuers[cert["spec"]["issuerRef"]["name"]] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    assert issuers[ca["spec"]["issuerRef"]["name"]] == {"selfSigned": {}}
    own_issuer = render("ns", "certmanager-values.yaml", set_values=("webhook.certificate.issuerRef.name=corp",
                                                                     "webhook.certificate.issuerRef.kind=ClusterIssuer"))
    [cert] = by_kind(own_issuer, "Certificate")
    assert cert["spec"]["issuerRef"] == {"name": "corp", "kind": "ClusterIssuer"} and not by_kind(own_issuer, "Issuer")
    [mwc] = by_kind(managed, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "ns/ascend-dra-webhook"}

"""Device metadata for pods (KEP-5304) on the bed's kubelet 1.37, from the chart's daemon pod: a pod on
the lab node whose claim comes from a ResourceClaimTemplate reads its file under
``resourceclaimtemplates/<pod claim name>/``, with its chip's attributes and its HAMivNPUCore quota, and
still gets the quota env (the fallback for workloads that do not read the file).
"""

from __future__ import annotations

import pytest

from tests.cluster.test_publish import pod_claim
from tests.e2e.claims import SECOND_CHIP_UUID, on_pod_network, pod_log, printed_env
from tests.e2e.release import DRIVER, LAB_NODE
from tests.kubelet.pods import RES, delete_pod, ok, pod_manifest, wait_for, wait_running
from tests.metadatastream import json_stream

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

FILE = f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/npu/npu/{DRIVER}-metadata.json"
END = "--metadata-end--"


def test_a_lab_pod_from_a_template_reads_its_share_in_its_device_metadata_file(bed, claims_ns):
    cp, ns, name = bed.cp, claims_ns, "reads-metadata"
    status, reply = cp.api("POST", f"{RES}/namespaces/{ns}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "npu", "exactly": {
            "deviceClassName": "hami-vnpu-core.project-hami.io",
            "capacity": {"requests": {"memory": "4Gi", "cores": "20"}},
            "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].uuid == "{SECOND_CHIP_UUID}"'}}],
        }}]}}}}, json_style="kubectl")
    assert status == 201, reply
    script = f"echo {END}-start; cat {FILE}; echo {END};"
    ok(cp, "POST", f"/api/v1/namespaces/{ns}/pods",
       on_pod_network(pod_manifest(name, claim_template=name, script=script), LAB_NODE))
    try:
        wait_running(cp, ns, name, within=120)
        log = wait_for(lambda: (t := pod_log(cp, ns, name)) and END + "\n" in t.split(f"{END}-start", 1)[-1] and t,
                       "the pod printed its device metadata", within=30)
        beta, alpha = json_stream(log.split(f"{END}-start", 1)[1].split(END, 1)[0])
        assert (beta["apiVersion"], alpha["apiVersion"]) == ("metadata.resource.k8s.io/v1beta1",
                                                             "metadata.resource.k8s.io/v1alpha1")
        claim = pod_claim(cp, ns, name)
        assert claim is not None and beta["podClaimName"] == "npu"
        assert beta["metadata"]["uid"] == claim["metadata"]["uid"]
        [request] = beta["requests"]
        [device] = request["devices"]
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (device["pool"], device["name"]) == (LAB_NODE, result["device"])
        attributes = device["attributes"]
        assert attributes["uuid"] == {"string": SECOND_CHIP_UUID}
        assert attributes["memoryQuotaMiB"] == {"int": 4096} and attributes["coresQuotaPercent"] == {"int": 20}
        physical = attributes["physicalID"]["int"]
        env = printed_env(log)  # the env stays, for workloads that do not read the file
        assert (env["NPU_MEM_QUOTA"], env["NPU_PRIORITY"], env["ASCEND_VISIBLE_DEVICES"]) == ("4096", "20",
                                                                                                str(physical))
    finally:
        delete_pod(cp, ns, name)

"""``helm upgrade`` while claims are prepared on both nodes (docs/operations.md, "Upgrade"): the fake
release to another image tag, the lab release to other values. Each DaemonSet surges (the new pod
beside the old one, each with its own sockets), the running pods keep their containers and their
CDI specs, a pod created during the roll starts, and no daemon unprepares a claim in use.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cluster.test_publish import pod_claim
from tests.e2e.claims import (
    CLAIMS_NS,
    LAB_NS,
    SECOND_CHIP_UUID,
    create_claim_pod,
    lab_pod,
    pod_log,
    printed_env,
    running_state,
)
from tests.e2e.release import (
    CHART,
    DRIVER,
    FAKE_NODE,
    FAKE_RELEASE,
    LAB_NODE,
    LAB_RELEASE,
    NAMESPACE,
    WEBHOOK,
    ca_bundle,
    daemon_pods,
    ready,
    wait_rolled_out,
)
from tests.kubelet.pods import ok, wait_for, wait_running

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CHECKPOINT_DIR = f"/var/lib/kubelet/plugins/{DRIVER}"


def checkpoint_claims(directory: Path) -> set[str]:
    """The claim UIDs the checkpoint holds: the snapshot with the journal applied (docs/durable-state.md)."""
    claims = set(json.loads((directory / "checkpoint.json").read_text())["data"]["claims"])
    journal = directory / "checkpoint.journal"
    for line in (journal.read_text().splitlines() if journal.exists() else [])[1:]:
        entry = json.loads(line.split(" ", 1)[1])
        (claims.discard if entry.get("deleted") else claims.add)(entry["uid"])
    return claims


def in_use(cp, bed) -> dict[tuple[str, str], dict]:
    """Every running claim pod of the tier: its node, container, claim UID and the claim's CDI specs."""
    found = {}
    for ns in (CLAIMS_NS, LAB_NS):
        status, reply = cp.api("GET", f"/api/v1/namespaces/{ns}/pods")
        for pod in reply.get("items", []) if status == 200 else []:
            if pod["status"].get("phase") != "Running" or not pod["spec"].get("resourceClaims"):
                continue
            name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
            uid = pod_claim(cp, ns, name)["metadata"]["uid"]
            specs = [p for p in bed.nodes[node].host_path("/var/run/cdi").glob(f"k8s.{DRIVER}-*.yaml") if uid in p.name]
            found[(ns, name)] = {"node": node, "container": running_state(cp, ns, name), "uid": uid, "specs": specs}
    return found


def follow_logs(tools, pod: dict, path: Path) -> subprocess.Popen:
    """``kubectl logs -f`` of a daemon pod into ``path`` until its container ends."""
    with open(path, "wb") as out:
        return subprocess.Popen([str(tools.bed.kubectl_bin()), "-n", NAMESPACE, "logs", "-f", pod["metadata"]["name"]],
                                stdout=out, stderr=subprocess.STDOUT, env=tools.env)


def surged(cp, release: str, old_uid: str) -> bool:
    """The roll has started on the release's node: a new pod exists beside the old one."""
    return any(p["metadata"]["uid"] != old_uid for p in daemon_pods(cp, release))


def test_helm_upgrade_rolls_both_daemonsets_while_claims_are_prepared(bed, tools, installed, image, fake_pod,
                                                                     bed_dir):
    cp = bed.cp
    before = in_use(cp, bed)
    assert (CLAIMS_NS, "fake-1") in before and all(v["specs"] for v in before.values()), before
    old = {r: daemon_pods(cp, r) for r in (FAKE_RELEASE, LAB_RELEASE)}
    assert all(len(pods) == 1 for pods in old.values()), old
    followers = [follow_logs(tools, pods[0], bed_dir / f"old-{r}.log") for r, pods in old.items()]
    repository, tag = image
    new_tag = f"{tag}-e2e-roll"
    for node in bed.nodes.values():  # the same image under a new tag: a changed image reference
        node.ctr("images", "tag", f"{repository}:{tag}", f"{repository}:{new_tag}")
    try:
        tools.helm("upgrade", FAKE_RELEASE, str(CHART), "-n", NAMESPACE, "--reset-then-reuse-values",
                   "--set", f"image.tag={new_tag}")
        wait_for(lambda: surged(cp, FAKE_RELEASE, old[FAKE_RELEASE][0]["metadata"]["uid"]), "the fake node's surge",
                 within=60)
        # Created while two daemons run on node-a: the kubelet prepares it through one of them.
        create_claim_pod(cp, CLAIMS_NS, "fake-during-roll", FAKE_NODE)
        tools.helm("upgrade", LAB_RELEASE, str(CHART), "-n", NAMESPACE, "--reset-then-reuse-values",
                   "--set", "logLevel=debug")
        wait_for(lambda: surged(cp, LAB_RELEASE, old[LAB_RELEASE][0]["metadata"]["uid"]), "the lab node's surge",
                 within=60)
        # A HAMi pod on the lab node's other chip, through the webhook, while both roll.
        ok(cp, "POST", f"/api/v1/namespaces/{LAB_NS}/pods", lab_pod("ascend-during-roll", chip_uuid=SECOND_CHIP_UUID))
        wait_rolled_out(tools)
    finally:
        for f in followers:
            try:
                f.wait(60)
            except subprocess.TimeoutExpired:
                f.kill()
                f.wait()
    # hack/webhook-certs.sh patched caBundle into the live configurations, not into the release's
    # values: helm's three-way merge keeps a field neither the old nor the new manifest names, so the
    # upgrade without webhook.certificate.caBundle kept it (the pod above went through the webhook).
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        config = ok(cp, "GET", f"/apis/admissionregistration.k8s.io/v1/{kind}/{WEBHOOK}")
        assert {w["clientConfig"].get("caBundle") for w in config["webhooks"]} == {ca_bundle(tools)}, kind
    # The pods created during the roll run with their devices.
    pod = wait_running(cp, CLAIMS_NS, "fake-during-roll", within=120)
    assert pod["spec"]["nodeName"] == FAKE_NODE
    log = pod_log(cp, CLAIMS_NS, "fake-during-roll")
    assert printed_env(log)["FAKE_NPU_AICORE_LIMIT"] == "40" and "Version=simulated" in log, log
    hami = wait_running(cp, LAB_NS, "ascend-during-roll", within=120)
    assert hami["spec"]["nodeName"] == LAB_NODE
    env = printed_env(pod_log(cp, LAB_NS, "ascend-during-roll", container="app"))
    assert (env.get("NPU_MEM_QUOTA"), env.get("NPU_PRIORITY")) == ("8192", "50"), env
    # The new pods replaced the old ones, with the new image / values.
    for release, pods in old.items():
        [new] = daemon_pods(cp, release)
        assert new["metadata"]["uid"] != pods[0]["metadata"]["uid"] and ready(new)
        env = {e["name"]: e.get("value") for e in new["spec"]["containers"][0]["env"]}
        if release == FAKE_RELEASE:
            assert new["spec"]["containers"][0]["image"] == f"{repository}:{new_tag}"
        else:
            assert env["LOG_LEVEL"] == "debug", env
    # The pods running before kept their containers, CDI specs and records; nothing in use was unprepared.
    old_logs = "".join((bed_dir / f"old-{r}.log").read_text(errors="replace") for r in old)
    new_logs = "".join(ok(cp, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{p['metadata']['name']}/log")
                       for r in old for p in daemon_pods(cp, r))
    assert "registered with the kubelet" in old_logs, old_logs[-2000:]
    for text in (old_logs, new_logs):
        assert not [ln for ln in text.splitlines() if '"level":"error"' in ln or "status.devices failed" in ln], text
    for (ns, name), was in before.items():
        assert running_state(cp, ns, name) == was["container"], (ns, name)
        assert all(p.exists() for p in was["specs"]), (name, was["specs"])
        directory = bed.nodes[was["node"]].host_path(CHECKPOINT_DIR)
        assert was["uid"] in checkpoint_claims(directory), (name, was["uid"])
        for text in (old_logs, new_logs):
            assert not [ln for ln in text.splitlines() if "unprepared claim" in ln and was["uid"] in ln], name

"""``ascend-dra call`` against a cluster-mode daemon: the claim's uid from the API server
(``--kubeconfig``, kubernetes-asyncio's ResourceV1Api) or from ``--uid``; a dead daemon is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.test_admin_access import allocated_and_reserved, claim_pod
from tests.cluster.test_publish import RES, apply_examples, our_slices, wait_until
from tests.integration.daemon import DRIVER

pytestmark = pytest.mark.cluster

SCRIPT = str(Path(sys.executable).parent / "ascend-dra")


def call(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, "call", *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})


def one_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def test_call_prepares_a_cluster_claim_by_name_and_by_uid(cp, start_daemon):
    d = start_daemon(fake_devices=1)
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    pod = claim_pod(cp, "default", admin=False)
    dirs = ["--kubelet-root-dir", str(d.root)]
    try:
        claim = allocated_and_reserved(cp, "default", pod)
        uid = claim["metadata"]["uid"]
        # The uid is read from the API server through the kubeconfig.
        prepared = call(*dirs, "--kubeconfig", str(cp.kubeconfig), "prepare", f"default/{pod}")
        assert prepared.returncode == 0, prepared.stderr + prepared.stdout
        reply = json.loads(prepared.stdout[:prepared.stdout.index("\n}\n") + 3])
        assert [dev["deviceName"] for dev in reply["claims"][uid]["devices"]] == ["npu-0-0"]
        assert (d.cdi_dir / f"k8s.{DRIVER}-npu_{uid}.yaml").exists()
        assert uid in d.records()
        # --uid needs no API access at all.
        unprepared = call(*dirs, "--uid", uid, "unprepare", f"default/{pod}")
        assert unprepared.returncode == 0, unprepared.stderr + unprepared.stdout
        assert uid not in d.records()
        missing = call(*dirs, "--kubeconfig", str(cp.kubeconfig), "prepare", "default/no-such-claim")
        one_line(missing, "ResourceClaim default/no-such-claim does not exist")
        neither = call(*dirs, "prepare", f"default/{pod}")
        one_line(neither, "--uid", "--kubeconfig")
    finally:
        cp.api("DELETE", f"/api/v1/namespaces/default/pods/{pod}?gracePeriodSeconds=0")
        cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{pod}")
    d.stop()
    one_line(call(*dirs, "--uid", uid, "prepare", f"default/{pod}"), "does not exist", "ascend-dra run")

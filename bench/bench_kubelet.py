"""Pod creation to container running on the real node (kubelet 1.35 + containerd 2.2, tests/kubelet),
with a claim for one fake NPU against the same pod without a claim, in the same run.

Per repetition, alternating so drift hits both alike: ``POST`` the pod, poll it (every ``--poll``
seconds) until its container is ``running``, note the time, delete it and wait until it is gone (the
claim pod's device is free again). The claim pod comes from a ResourceClaimTemplate made beforehand,
so its time includes what DRA adds: the controller-manager creating the claim, the scheduler
allocating it, the kubelet's NodePrepareResources (our daemon writing the CDI spec) and containerd
applying the spec. Both pods are the busybox pod of tests/kubelet/pods.py (host network, no
service-account token, image present).

Prints p50 / p90 / min / max in milliseconds for both, the p50 and p90 ratios (claim / plain) and
the p50 difference. Needs the control-plane and node binaries (tests/cluster/build.sh,
tests/kubelet/build.sh) and root.

    python bench/bench_kubelet.py [--reps 10] [--poll 0.02]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.cluster.controlplane import ControlPlane, default_bin_dir, exit_on_sigterm  # noqa: E402
from tests.integration.daemon import DaemonProcess  # noqa: E402
from tests.kubelet.conftest import GATES, _node_bin_dirs  # noqa: E402
from tests.kubelet.node import Node, kubelet_client_pki  # noqa: E402
from tests.kubelet.pods import RES, create_namespace, delete_pod, fake_template, ok, pod_manifest, running  # noqa: E402

NS = "bench"


def one(cp: ControlPlane, name: str, template: str | None, poll: float) -> float:
    """Seconds from the create request to the container running; the pod is deleted afterwards."""
    body = pod_manifest(name, claim_template=template)
    t0 = time.monotonic()
    ok(cp, "POST", f"/api/v1/namespaces/{NS}/pods", body)
    deadline = t0 + 120
    while not running(cp, NS, name):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod {name} not running after 120 s")
        time.sleep(poll)
    elapsed = time.monotonic() - t0
    delete_pod(cp, NS, name)
    return elapsed


def summary(label: str, xs: list[float]) -> str:
    ms = sorted(x * 1000 for x in xs)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return (f"{label:<10} n={len(ms):<3} p50 {statistics.median(ms):7.0f} ms  p90 {p90:7.0f} ms  "
            f"min {ms[0]:7.0f} ms  max {ms[-1]:7.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10, help="repetitions of each pod (default 10)")
    ap.add_argument("--poll", type=float, default=0.02, help="status poll interval, seconds (default 0.02)")
    args = ap.parse_args()
    exit_on_sigterm()  # a stopped run still stops its control plane
    kubelet_bin, containerd_bin = _node_bin_dirs()
    with tempfile.TemporaryDirectory(prefix="adra-bk-", dir="/tmp") as tmp:
        w = Path(tmp)
        cp = ControlPlane(w / "cp", default_bin_dir("1.35"), feature_gates=GATES, fake_node=False,
                          extra_apiserver_args=kubelet_client_pki(w / "cp" / "pki"))
        cp.start()
        node = daemon = None
        try:
            node = Node(w / "n", cp, kubelet_bin / "kubelet", containerd_bin, feature_gates=GATES).start()
            daemon = DaemonProcess(node.kubelet_root, node=node.node_name, kubeconfig=cp.kubeconfig).start()
            for doc in yaml.safe_load_all((ROOT / "examples" / "deviceclasses" / "fake.yaml").read_text()):
                cp.api("POST", f"{RES}/deviceclasses", doc)
            create_namespace(cp, NS)
            fake_template(cp, NS, "one-npu")
            # Warm-up (first sandbox, first claim, the daemon's first Prepare), not counted.
            one(cp, "warm-plain", None, args.poll)
            one(cp, "warm-claim", "one-npu", args.poll)
            plain, claim = [], []
            for i in range(args.reps):
                plain.append(one(cp, f"plain-{i}", None, args.poll))
                claim.append(one(cp, f"claim-{i}", "one-npu", args.poll))
            print(f"pod creation -> container running, kubelet 1.35.4 + containerd 2.2.9, {args.reps} reps each")
            print(summary("no claim", plain))
            print(summary("claim", claim))
            med_p, med_c = statistics.median(plain), statistics.median(claim)
            p90 = [sorted(x)[min(len(x) - 1, round(0.9 * (len(x) - 1)))] for x in (plain, claim)]
            print(f"ratio claim/plain: p50 {med_c / med_p:.2f}x  p90 {p90[1] / p90[0]:.2f}x; "
                  f"p50 difference {1000 * (med_c - med_p):.0f} ms")
        finally:
            if daemon is not None:
                daemon.stop()
            if node is not None:
                node.stop()
            cp.stop()


if __name__ == "__main__":
    main()

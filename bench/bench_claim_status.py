"""What one ``status.devices`` write costs the control plane, by the way it is sent.

Run: ``.venv/bin/python bench/bench_claim_status.py [--claims 200] [--rounds 3]``; needs the test
control plane's binaries (``make cluster-bins``).

The daemon writes each prepared claim's ``status.devices`` (claimstatus.py) with a server-side
apply. This asks whether another request would cost the API server less: ``--claims`` allocated
claims get one entry each and then lose it again, one request after another over one keep-alive TLS
connection, sent as

* ``apply``: server-side apply under a field manager, ``force=true`` (what the daemon sends);
* ``merge (rv known)``: a JSON merge patch of the whole list with ``metadata.resourceVersion`` from
  the previous answer, the cheapest merge patch there is (it assumes nobody else wrote the claim);
* ``GET + merge``: the same after a GET of the claim, what ``ClaimStatusWriter._merge`` does;
* ``GET`` (the floor): a keep-alive GET of the claim, what a Prepare itself costs the API server.

For each way: ms per request, and CPU per request of etcd, kube-apiserver, kube-controller-manager
and kube-scheduler (utime + stime from ``/proc/PID/stat`` over the phase and a 0.5 s tail in which
the watchers catch up, minus each process's idle rate measured first). Rounds are interleaved; the
table gives each figure's median over the rounds.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_startup import cpu_s  # noqa: E402

from tests.claimfiles import claim_object, create_in_api  # noqa: E402
from tests.cluster.controlplane import ControlPlane, default_bin_dir, exit_on_sigterm  # noqa: E402

RES = "/apis/resource.k8s.io/v1"
FIELD_MANAGER = "bench.ascend-dra"
class Api:
    """Requests over one keep-alive TLS connection to the test API server."""

    def __init__(self, cp: ControlPlane) -> None:
        url = urllib.parse.urlsplit(cp.server)
        self.conn = http.client.HTTPSConnection(url.hostname, url.port, context=cp._ssl())
        self.headers = {"Authorization": f"Bearer {cp.token}", "Accept": "application/json"}

    def call(self, method: str, path: str, body: object = None, content_type: str | None = None) -> dict:
        headers = dict(self.headers, **({"Content-Type": content_type} if content_type else {}))
        self.conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
        response = self.conn.getresponse()
        raw = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {raw[:300]!r}")
        return json.loads(raw)


def ways(api: Api, claims: list[dict]) -> dict[str, tuple[Callable[[], None], Callable[[dict, bool], None]]]:
    """Way name -> ``(setup, write(claim, with_entry))``; ``setup`` runs before the phase is timed."""
    versions: dict[str, str] = {}

    def claim_path(claim: dict) -> str:
        m = claim["metadata"]
        return f"{RES}/namespaces/{m['namespace']}/resourceclaims/{m['name']}"

    def entries(claim: dict, with_entry: bool) -> list[dict]:
        result = claim["status"]["allocation"]["devices"]["results"][0]
        entry = {"driver": result["driver"], "pool": result["pool"], "device": result["device"],
                 "data": {"physicalID": 0, "env": {"ASCEND_VISIBLE_DEVICES": "0"}}}
        return [entry] if with_entry else []

    def apply(claim: dict, with_entry: bool) -> None:
        m = claim["metadata"]
        api.call("PATCH", f"{claim_path(claim)}/status?fieldManager={FIELD_MANAGER}&force=true",
                 {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                  "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"]},
                  "status": {"devices": entries(claim, with_entry)}}, "application/apply-patch+yaml")

    def read_versions() -> None:
        for claim in claims:
            versions[claim["metadata"]["uid"]] = api.call("GET", claim_path(claim))["metadata"]["resourceVersion"]

    def merge(claim: dict, with_entry: bool, *, get: bool = False) -> None:
        uid = claim["metadata"]["uid"]
        if get:
            versions[uid] = api.call("GET", claim_path(claim))["metadata"]["resourceVersion"]
        stored = api.call("PATCH", f"{claim_path(claim)}/status?fieldManager={FIELD_MANAGER}",
                          {"metadata": {"resourceVersion": versions[uid]},
                           "status": {"devices": entries(claim, with_entry)}}, "application/merge-patch+json")
        versions[uid] = stored["metadata"]["resourceVersion"]

    def get_merge(claim: dict, with_entry: bool) -> None:
        merge(claim, with_entry, get=True)

    def get(claim: dict, _: bool) -> None:
        api.call("GET", claim_path(claim))

    def nothing() -> None:
        pass

    return {"apply": (nothing, apply), "merge (rv known)": (read_versions, merge),
            "GET + merge": (nothing, get_merge), "GET": (nothing, get)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    exit_on_sigterm()  # a stopped run still stops its control plane
    cp = ControlPlane(Path(tempfile.mkdtemp(prefix="adm-cp-")), default_bin_dir())
    cp.start()
    try:
        for doc in yaml.safe_load_all((ROOT / "examples/deviceclasses/fake.yaml").read_text()):
            cp.api("POST", f"{RES}/deviceclasses", doc)
        claims = [create_in_api(cp, claim_object(f"st-{uuid.uuid4().hex[:10]}", node=cp.node_name,
                                                 results=[("npu", f"npu-{i}-0")])) for i in range(args.claims)]
        pids = {name: proc.pid for name, proc in cp.procs.items()}
        time.sleep(2.0)  # the claim controller and the scheduler catch up with the creations
        start = {n: cpu_s(p) for n, p in pids.items()}
        time.sleep(2.0)
        idle = {n: (cpu_s(p) - start[n]) / 2.0 for n, p in pids.items()}  # CPU s per s
        api = Api(cp)
        table = ways(api, claims)
        figures: dict[str, list[dict[str, float]]] = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, (setup, write) in table.items():
                setup()
                before = {n: cpu_s(p) for n, p in pids.items()}
                t0 = time.perf_counter()
                for claim in claims:
                    write(claim, True)
                for claim in claims:
                    write(claim, False)
                elapsed = time.perf_counter() - t0
                time.sleep(0.5)
                spent = time.perf_counter() - t0
                calls = 2 * len(claims)
                row = {n: (cpu_s(p) - before[n] - idle[n] * spent) / calls * 1000 for n, p in pids.items()}
                row["ms per request"] = elapsed / calls * 1000
                figures[name].append(row)
        api.conn.close()
    finally:
        cp.stop()
    columns = ["ms per request", *pids]
    print(f"\nclaim status write: {args.claims} claims, one entry written then removed each, {args.rounds} rounds "
          f"(median), {os.cpu_count()} CPUs; CPU in ms per request, idle rate taken out")
    header = f"{'way':<18}" + "".join(f"{c:>24}" for c in columns) + f"{'apiserver/GET':>15}"
    print(header)
    print("-" * len(header))
    median = {name: {c: statistics.median(r[c] for r in rows) for c in columns} for name, rows in figures.items()}
    for name, row in median.items():
        ratio = row["kube-apiserver"] / median["GET"]["kube-apiserver"]
        print(f"{name:<18}" + "".join(f"{row[c]:>24.2f}" for c in columns) + f"{ratio:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

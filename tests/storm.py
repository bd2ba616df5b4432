"""A kill -9 storm: the daemon dies at random instants while Prepares and Unprepares are in flight.

Each trial starts the daemon over the state the previous trial left, lets worker threads (playing
the kubelet's pod workers: one claim is only ever handled by one worker at a time) prepare and
unprepare claims at random, kills the daemon with SIGKILL at a random instant, restarts it, checks
what survived, then replays what the kubelet would resend (the last operation asked of every
claim, until it succeeds) and checks again. Tallies, all of which must stay 0:

* ``lost``: a claim whose Prepare was acknowledged (and no Unprepare asked since) with no
  ``PrepareCompleted`` record after the restart;
* ``orphan_specs``: a claim CDI spec on disk that no record backs, after the restart;
* ``double_held``: an exclusive device held by two records, or a shared device whose records
  consume more than its capacity;
* ``unresolved``: an answered CDI id that names no device of a spec on disk, when it is answered;
* ``replay_failed``: a replayed operation that failed for another reason than the device being
  held by another claim (contention pairs are allocated the same exclusive device on purpose);
* ``orphan_side_effects``: HAMivNPUCore only, a per-claim local dir that no record owns;
* ``leaked``: a claim whose Unprepare was acknowledged (and not prepared since) with a
  ``PrepareCompleted`` record after the restart (its devices held for a claim the kubelet released);
* ``rpc_failed``: a call that failed at the gRPC level while the daemon was alive (an error the
  daemon did not turn into the claim's answer), or a daemon that died by itself.

With ``--disk-faults`` (``Storm(disk_faults=True)``) ENOSPC and EIO come and go at random durable
writes all through each trial (ascend_dra/observe/faults.py ``DISK_POINTS``, one or two at a time, and now
and then already at start-up), and besides:

* ``unnamed_fault``: a claim's error that gives a disk error's cause without the file it hit;
* ``not_recovered``: once the faults are gone, and before the kill, the same daemon process answers
  the kubelet's retries (the last operation of every claim) with an error other than contention.

Standalone mode reads claim files; cluster mode (``--profiles fake@cluster``) puts the claims in a
test control plane's API server, so every Prepare GETs its claim and every answer queues a claim
status write, both cut off by the kill.

Run ``python -m tests.storm --trials 200 [--disk-faults]`` (``make soak``: the fake profile and
HAMivNPUCore standalone, the fake profile in cluster mode, each without and with disk faults);
``tests/integration/test_storm.py`` and ``tests/cluster/test_storm_cluster.py`` run short storms in
``make test``.
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ascend_dra.observe.faults import DISK_POINTS  # noqa: E402
from tests.claimfiles import claim_object, create_in_api, write_claim  # noqa: E402
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet  # noqa: E402

TALLIES = ("lost", "orphan_specs", "double_held", "unresolved", "replay_failed", "orphan_side_effects", "leaked",
           "rpc_failed", "unnamed_fault", "not_recovered")
#: What a disk fault's cause reads as in a claim's error, and that cause followed by the file.
DISK_ERRORS = re.compile("|".join(os.strerror(e) for e in (errno.ENOSPC, errno.EIO)))
NAMED_DISK_ERROR = re.compile(rf"(?:{DISK_ERRORS.pattern}) \(/[^)]+\)")
LAB_NODE = "aio-node74-arm"
MEMORY_MIB = 21525  # per lab chip (HAMivNPUCore capacity ``memory``)


class Storm:
    """One node directory and its claims, driven through ``trials`` crash-restart rounds.

    :param profile: ``fake`` (exclusive devices; claims in pairs on the same device) or
        ``HAMivNPUCore`` (the lab node: shares with consumed capacity, a local dir per claim).
    """

    #: The file of armed disk faults (``ASCEND_DRA_DISK_FAULTS``), or None: no faults.
    faults: Path | None = None
    #: Answers that failed for a disk fault (so the faults did bite).
    disk_errors = 0

    def __init__(self, root: Path, profile: str, *, claims: int = 8, seed: int = 0, cp: Any = None,
                 disk_faults: bool = False) -> None:
        """:param cp: a running test control plane (tests/cluster/controlplane.py): cluster mode, the
            claims in its API server (the fake profile only), the daemon GETting them and writing their
            status; without it, standalone mode with claim files.
        :param disk_faults: arm disk faults at random during each trial (the module docstring)."""
        self.root = root
        self.profile = profile
        self.cp = cp
        self.rng = random.Random(seed)
        self.faults = root / "disk-faults" if disk_faults else None
        env = {"ASCEND_DRA_DISK_FAULTS": str(self.faults)} if self.faults else {}
        self.tallies: Counter[str] = Counter({t: 0 for t in TALLIES})
        self.details: list[str] = []
        if profile == "HAMivNPUCore":
            from ascend_dra.profiles.ascend.sim import labnode

            self.lab = labnode.build(root / "lab")
            self.daemon = DaemonProcess(root / "node", node=LAB_NODE, profiles=profile, extra_args=self.lab.flags(),
                                        env=env)
        elif cp is not None:
            self.lab = None
            self.daemon = DaemonProcess(root / "node", node=cp.node_name, profiles="fake", fake_devices=claims // 2,
                                        kubeconfig=cp.kubeconfig, env=env)
        else:
            self.lab = None
            self.daemon = DaemonProcess(root / "node", node=LAB_NODE, profiles="fake", fake_devices=claims // 2,
                                        env=env)
        if cp is not None:
            self.namespace = f"storm-{root.name.lower().replace('_', '-')[-20:].strip('-')}"
            cp.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": self.namespace}})
            self.claims = [create_in_api(cp, self._claim(i)) for i in range(claims)]
        else:
            self.namespace = "storm"
            self.claims = [write_claim(self.daemon.root, self._claim(i)) for i in range(claims)]
        # What the kubelet believes: the last operation it asked per claim, and whether it was acknowledged.
        self.asked: dict[str, str] = {}
        self.acked: dict[str, str] = {}
        self.lock = threading.Lock()

    def _claim(self, i: int) -> dict[str, Any]:
        if self.profile == "HAMivNPUCore":
            result = {"request": "npu", "driver": DRIVER, "pool": LAB_NODE, "device": f"npu-{i % 2}-0",
                      "shareID": f"share-{i}", "consumedCapacity": {"memory": "8Gi", "cores": "30", "containers": "1"}}
            return claim_object(f"c{i}", namespace="storm", node=LAB_NODE, results=[result])
        node = self.cp.node_name if self.cp is not None else LAB_NODE
        namespace = self.namespace if self.cp is not None else "storm"
        return claim_object(f"c{i}", namespace=namespace, node=node, results=[("npu", f"npu-{i // 2}-0")])

    # -- one trial ------------------------------------------------------------------------------

    def trial(self) -> None:
        try:
            self._trial()
        finally:
            self.daemon.stop()  # never leave a daemon behind, whatever failed

    def _trial(self) -> None:
        d = self.daemon
        self._arm(self.rng.random() < 0.3)  # now and then the start-up meets a fault too
        d.start()
        k = Kubelet(d)
        if self.faults is not None:  # stormed with faults, then served again once they are gone
            self._storm(k, self.rng.uniform(0.0, 0.4), kill=False)
            self._arm(False)
            self._replay(k, tally="not_recovered")
        self._storm(k, self.rng.uniform(0.0, 0.4), kill=True)
        k.close()

        self._arm(self.rng.random() < 0.3)
        d.start()
        self._check_after_restart()
        self._arm(False)
        k = Kubelet(d)
        try:
            self._replay(k)
        finally:
            k.close()
            d.stop()

    def _storm(self, k: Kubelet, seconds: float, *, kill: bool) -> None:
        """Run the pod workers (and the disk faults) for ``seconds``; then kill the daemon with their
        calls in flight, or (``kill`` False) let their calls end."""
        stop = threading.Event()
        owned = [self.claims[i::4] for i in range(4)]  # 4 pod workers, each with its own claims
        threads = [threading.Thread(target=self._work, args=(k, mine, stop), daemon=True) for mine in owned]
        if self.faults is not None:
            threads.append(threading.Thread(target=self._toggle_faults, args=(stop, self.rng.random()), daemon=True))
        for t in threads:
            t.start()
        time.sleep(seconds)
        if self.daemon.proc.poll() is not None:
            self._fail("rpc_failed", f"the daemon died by itself: {self.daemon.log_text()[-2000:]}")
        if kill:
            self.daemon.kill9()
        stop.set()
        for t in threads:
            t.join(60)

    def _work(self, k: Kubelet, mine: list[dict[str, Any]], stop: threading.Event) -> None:
        rng = random.Random(self.rng.random())
        while not stop.is_set():
            if self.operate(k, mine, rng) is None:
                try:  # the daemon died with this call in flight: that was the kill, or a failure
                    self.daemon.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self._fail("rpc_failed", "a call failed while the daemon lived")
                return

    # -- disk faults ------------------------------------------------------------------------------

    def _arm(self, on: bool, rng: random.Random | None = None) -> None:
        """Arm one or two random disk points with ENOSPC or EIO (``on``), or none; the file is replaced
        atomically, as the daemon may read it at any instant."""
        if self.faults is None:
            return
        rng = rng or self.rng
        entries = ""
        if on:
            points = rng.sample([*DISK_POINTS, "*"], rng.choice((1, 1, 2)))
            entries = " ".join(f"{p}={rng.choice(('ENOSPC', 'EIO'))}" for p in points)
        tmp = self.faults.with_name(f".{self.faults.name}.{threading.get_ident()}")
        tmp.write_text(entries)
        os.replace(tmp, self.faults)

    def _toggle_faults(self, stop: threading.Event, seed: float) -> None:
        rng = random.Random(seed)
        while not stop.wait(rng.uniform(0.005, 0.05)):
            self._arm(rng.random() < 0.5, rng)

    def operate(self, k: Kubelet, mine: list[dict[str, Any]], rng: random.Random) -> bool | None:
        """One random Prepare or Unprepare of one of ``mine``, as a pod worker sends it, tallied.

        :return: True acknowledged, False answered with an error, None failed in flight.
        """
        claim = rng.choice(mine)
        uid = claim["metadata"]["uid"]
        op = rng.choice(("prepare", "prepare", "unprepare"))
        with self.lock:
            self.asked[uid] = op
            if self.acked.get(uid, op) != op:
                # The other operation's acknowledgement no longer says what the claim is: this one may
                # fail half-way (an Unprepare whose last write fails leaves the claim PrepareStarted).
                del self.acked[uid]
        try:
            reply = (k.prepare if op == "prepare" else k.unprepare)(claim)
        except grpc.RpcError:
            return None
        answer = reply.claims[uid]
        if answer.error:
            if DISK_ERRORS.search(answer.error):
                with self.lock:
                    self.disk_errors += 1
                if not NAMED_DISK_ERROR.search(answer.error):
                    self._fail("unnamed_fault", answer.error)
            return False
        if op == "prepare":
            self._check_resolves(answer)
        with self.lock:
            self.acked[uid] = op
        return True

    # -- checks ---------------------------------------------------------------------------------

    def _fail(self, tally: str, detail: str) -> None:
        self.tallies[tally] += 1
        self.details.append(f"{tally}: {detail}")

    def _spec_ids(self) -> set[str]:
        ids = set()
        for file in self.daemon.cdi_dir.glob("*.yaml"):
            try:
                spec = yaml.safe_load(file.read_text())
            except (OSError, yaml.YAMLError):
                continue
            ids.update(f"{spec['kind']}={dev['name']}" for dev in spec.get("devices") or ())
        return ids

    def _check_resolves(self, answer) -> None:
        ids = {cdi_id for device in answer.devices for cdi_id in device.cdi_device_ids}
        missing = ids - self._spec_ids()
        if not ids or missing:
            self._fail("unresolved", f"answered {sorted(missing) or 'no ids'}")

    def _check_after_restart(self) -> None:
        records = self.daemon.records()
        completed = {uid for uid, r in records.items() if r.get("state") == "PrepareCompleted"}
        for uid, op in self.acked.items():
            if op == "prepare" and self.asked.get(uid) == "prepare" and uid not in completed:
                self._fail("lost", f"claim {uid} was acknowledged prepared and has no completed record")
            if op == "unprepare" and self.asked.get(uid) == "unprepare" and uid in completed:
                self._fail("leaked", f"claim {uid} was acknowledged unprepared and has a completed record")
        backed = {f for r in records.values() for f in r.get("cdi_specs") or ()}
        for file in self.daemon.cdi_dir.glob("*.yaml"):
            if not file.name.endswith("_common.yaml") and file.name not in backed:
                self._fail("orphan_specs", file.name)
        metadata = self.daemon.checkpoint.parent / "device-metadata"  # device metadata files (KEP-5304)
        for directory in metadata.iterdir() if metadata.exists() else ():
            if directory.name not in records:
                self._fail("orphan_specs", f"device metadata {directory.name} has no record")
        self._check_holds(records)
        if self.lab is not None:
            containers = self.lab.host_root / "usr/local/hami-vnpu-core/containers"
            for local in containers.iterdir() if containers.exists() else ():
                if local.name not in records:
                    self._fail("orphan_side_effects", f"local dir {local.name} has no record")

    def _check_holds(self, records: dict[str, Any]) -> None:
        by_device: dict[str, list[dict[str, Any]]] = {}
        holders: dict[str, list[str]] = {}
        for uid, record in records.items():
            for device in record.get("devices") or ():
                by_device.setdefault(device["device"], []).append(device)
                holders.setdefault(device["device"], []).append(f"{uid} ({record.get('state')})")
        for name, holds in by_device.items():
            if self.profile == "HAMivNPUCore":
                used = sum(int(h.get("consumed_capacity", {}).get("memory", "0Gi").removesuffix("Gi")) * 1024
                           for h in holds)
                if used > MEMORY_MIB:
                    self._fail("double_held", f"{name}: {used} MiB of {MEMORY_MIB} consumed")
            elif len(holds) > 1:
                self._fail("double_held", f"{name} held by {len(holds)} records: {', '.join(holders[name])}")

    def _replay(self, k: Kubelet, tally: str = "replay_failed") -> None:
        """What the kubelet resends: the last operation of every claim, until it succeeds; a failure
        (but contention) is counted under ``tally``."""
        for claim in self.claims:
            uid = claim["metadata"]["uid"]
            op = self.asked.get(uid)
            if op is None:
                continue
            reply = (k.prepare if op == "prepare" else k.unprepare)(claim)
            answer = reply.claims[uid]
            if answer.error:
                if op == "prepare" and ("is already prepared for" in answer.error or "is free" in answer.error):
                    self.acked.pop(uid, None)  # contention: the kubelet's pod stays pending
                    self.asked[uid] = "unprepare"
                    continue
                self._fail(tally, f"{op} {uid}: {answer.error}")
                continue
            if op == "prepare":
                self._check_resolves(answer)
            self.acked[uid] = op
        self._check_holds(self.daemon.records())


def run(trials: int, profile: str, seed: int = 0, root: Path | None = None, cp: Any = None, *,
        disk_faults: bool = False) -> Storm:
    """Run a storm of ``trials`` rounds and return it (its ``tallies`` and ``details``); with ``cp``
    (a running control plane) in cluster mode, its namespace deleted at the end; with
    ``disk_faults``, ENOSPC and EIO at random durable writes (the module docstring)."""
    storm = Storm(root or Path(tempfile.mkdtemp(prefix="adra-storm-", dir="/tmp")), profile, seed=seed, cp=cp,
                  disk_faults=disk_faults)
    try:
        for _ in range(trials):
            storm.trial()
    finally:
        if cp is not None:
            cp.api("DELETE", f"/api/v1/namespaces/{storm.namespace}")
    return storm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profiles", default="fake,HAMivNPUCore,fake@cluster",
                        help="comma-separated; PROFILE@cluster runs in cluster mode against a test control "
                             "plane started for it (tests/cluster, its binaries built by make cluster-bins)")
    parser.add_argument("--disk-faults", action="store_true",
                        help="arm ENOSPC and EIO at random durable writes during every trial "
                        "(ascend_dra/observe/faults.py)")
    args = parser.parse_args(argv)
    failed = False
    cp = None
    print(f"{'profile':14} {'trials':>6} " + " ".join(f"{t:>19}" for t in TALLIES) + "  seconds"
          + ("  (disk faults on)" if args.disk_faults else ""))
    try:
        for name in args.profiles.split(","):
            profile, _, mode = name.partition("@")
            if mode == "cluster" and cp is None:
                cp = _control_plane()
            started = time.monotonic()
            storm = run(args.trials, profile, seed=args.seed, cp=cp if mode == "cluster" else None,
                        disk_faults=args.disk_faults)
            print(f"{name:14} {args.trials:>6} " + " ".join(f"{storm.tallies[t]:>19}" for t in TALLIES)
                  + f"  {time.monotonic() - started:7.1f}"
                  + (f"  ({storm.disk_errors} answers failed for a disk fault)" if args.disk_faults else ""))
            for detail in storm.details[:20]:
                print(f"  {detail}")
            failed |= any(storm.tallies.values())
    finally:
        if cp is not None:
            cp.stop()
    return 1 if failed else 0


def _control_plane() -> Any:
    """A fresh test control plane with the fake DeviceClass (for cluster-mode storms)."""
    from tests.cluster.controlplane import ControlPlane, default_bin_dir

    cp = ControlPlane(Path(tempfile.mkdtemp(prefix="adra-storm-cp-")), default_bin_dir())
    cp.start()
    for doc in yaml.safe_load_all((ROOT / "examples/deviceclasses/fake.yaml").read_text()):
        cp.api("POST", "/apis/resource.k8s.io/v1/deviceclasses", doc)
    return cp


if __name__ == "__main__":
    sys.exit(main())

"""A rolling update on one node (``--rolling-update-id``): two daemon instances share the plugin
directory and serve at once, while a storm of Prepares and Unprepares is sent to both in turn and
the older one is stopped (SIGTERM) and replaced by a newer one, round after round. Nothing is lost,
nothing is held twice, every answered CDI id resolves (the tallies of tests/storm.py)."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests import storm
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet


class RollingStorm(storm.Storm):
    """tests/storm.py's claims and checks, with instances that overlap instead of crashing.

    ``fake``: claims come in pairs allocated the same exclusive device, so two instances preparing
    a pair's claims at once is exactly the double booking the shared checkpoint must prevent.
    ``HAMivNPUCore``: shares of two chips with consumed capacity and a local dir per claim (a node
    side effect, so three durable writes per Prepare).
    """

    def __init__(self, root: Path, profile: str = "fake", *, claims: int = 8, seed: int = 0) -> None:
        super().__init__(root, profile, claims=claims, seed=seed)
        self.ids = (f"pod-{n}" for n in itertools.count())
        self.served: Counter[str] = Counter()  # rolling-update id -> acknowledged operations

    def instance(self) -> DaemonProcess:
        d = self.daemon
        return DaemonProcess(d.root, node=d.node, profiles=d.profiles, fake_devices=d.fake_devices,
                             extra_args=d.extra_args, rolling_update_id=next(self.ids)).start()

    def _work_on(self, kubelets: list[tuple[str, Kubelet]], mine: list[dict[str, Any]], stop: threading.Event,
                 seed: float) -> None:
        rng = random.Random(seed)
        turn = itertools.count()
        while not stop.is_set():
            alive = list(kubelets)  # the test swaps instances under us
            rolling_update_id, k = alive[next(turn) % len(alive)]
            # A call that fails in flight hit the instance being stopped: the kubelet retries it on the other.
            if self.operate(k, mine, rng):
                with self.lock:
                    self.served[rolling_update_id] += 1

    def sockets(self) -> set[str]:
        root = self.daemon.root
        dirs = (root / "plugins_registry", root / "plugins" / DRIVER)
        return {p.name for where in dirs for p in where.glob("*.sock")}

    def run(self, rounds: int, *, kill9: bool = False) -> None:
        """``rounds`` times: start a new instance beside the old one, storm both, stop the old one
        (SIGTERM; with ``kill9`` every other round SIGKILL instead) and go on with the new one."""
        old = self.instance()
        kubelets: list[tuple[str, Kubelet]] = [(old.rolling_update_id, Kubelet(old))]
        try:
            for number in range(rounds + 1):
                new = self.instance()  # its start-up ran with `old` serving
                self._check_after_restart()
                # Only live instances' sockets are left: a killed one's were removed by the next start-up.
                assert self.sockets() == {p.name for d in (old, new) for p in (d.registration_socket, d.dra_socket)}
                kubelets.append((new.rolling_update_id, Kubelet(new)))
                for rid, k in kubelets:  # both registered: both answer GetInfo, each with its own socket
                    assert k.get_info().endpoint.endswith(f"dra-{rid}.sock")
                if number == rounds:
                    break
                stop = threading.Event()
                workers = [threading.Thread(target=self._work_on, args=(kubelets, self.claims[i::4], stop,
                                                                         self.rng.random()), daemon=True)
                           for i in range(4)]
                for w in workers:
                    w.start()
                time.sleep(self.rng.uniform(0.2, 0.6))
                gone, kept = kubelets.pop(0)[1], kubelets[0][1]
                if kill9 and number % 2:
                    old.kill9()  # with calls in flight, maybe holding the checkpoint lock
                else:
                    assert old.stop() == 0, old.log_text()  # SIGTERM, with calls in flight on it
                    assert not old.registration_socket.exists() and not old.dra_socket.exists()
                assert new.registration_socket.exists() and kept.get_info().name == DRIVER
                time.sleep(self.rng.uniform(0.1, 0.3))
                stop.set()
                for w in workers:
                    w.join(60)
                gone.close()
                old = new
            self._replay(kubelets[-1][1])
            self._check_after_restart()
        finally:
            for _, k in kubelets:
                k.close()
            old.stop()
            new.stop()


@pytest.mark.parametrize(("profile", "kill9"), [("fake", False), ("HAMivNPUCore", False), ("fake", True),
                                                ("HAMivNPUCore", True)],
                         ids=["fake", "HAMivNPUCore", "fake-kill9", "HAMivNPUCore-kill9"])
def test_two_instances_serve_at_once_and_a_rolling_update_storm_loses_and_doubles_nothing(short_tmp, profile, kill9):
    s = RollingStorm(short_tmp, profile, seed=3)
    s.run(rounds=5, kill9=kill9)
    assert dict(s.tallies) == dict.fromkeys(storm.TALLIES, 0), "\n".join(s.details)
    assert len(s.served) == 6 and all(n > 0 for n in s.served.values()), s.served  # each stormed instance served
    assert sorted(p.name for p in short_tmp.rglob("*.sock")) == []
    assert sorted(p.name for p in (short_tmp / "node" / "plugins" / DRIVER).glob("daemon-*.lock")) == []
    records = s.daemon.records()
    assert any(r["state"] == "PrepareCompleted" for r in records.values())  # the storm left claims prepared
    assert (short_tmp / "node" / "plugins" / DRIVER / "checkpoint.journal").read_bytes().count(b"\n") == 1


def test_without_the_flag_a_second_instance_still_waits_for_the_first(short_tmp):
    first = DaemonProcess(short_tmp / "sa").start()
    second = DaemonProcess(short_tmp / "sa", env={}, rolling_update_id="pod-b")
    second.start(wait=False)
    try:
        deadline = time.monotonic() + 20  # the second process's start-up on a loaded machine
        while "waiting for it to stop" not in second.log_text():
            assert time.monotonic() < deadline, second.log_text()
            time.sleep(0.05)
        time.sleep(1)  # it would have made its socket by now had it not waited
        assert not second.registration_socket.exists()  # an instance without the flag excludes the others
        first.stop()
        second.wait_serving()
    finally:
        second.stop()
        first.stop()

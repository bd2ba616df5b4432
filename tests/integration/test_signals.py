"""Stop signals at any instant of start-up or serving: SIGTERM, SIGINT and SIGHUP (once, or twice in
a row) always leave no socket file behind and a checkpoint that loads (signals.py, kubelet/sockets.py)."""

from __future__ import annotations

import signal
import time

import pytest

from ascend_dra.durable.journal import load_state
from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def serving_after(root) -> float:
    """Seconds from the process start to serving, measured once (start-up instants are fractions of it)."""
    d = DaemonProcess(root)
    started = time.monotonic()
    d.start()
    took = time.monotonic() - started
    k = Kubelet(d)
    k.prepare(write_claim(d.root, claim_object("held")))  # a record for every later start to recover
    k.close()
    assert d.stop() == 0
    return took


def assert_clean(d: DaemonProcess, code: int, sig: signal.Signals) -> None:
    left = sorted(str(p.relative_to(d.root)) for p in d.root.rglob("*.sock"))
    assert left == [], f"{sig.name}: stale sockets {left} (exit {code})\n{d.log_text()}"
    assert "held" in {r.name for r in load_state(d.root / "plugins" / DRIVER).claims.values()}


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_stop_signal_at_any_instant_of_start_up_leaves_no_socket(short_tmp, sig):
    root = short_tmp / "sa"
    took = serving_after(root)
    for fraction in (0.3, 0.6, 0.8, 0.9, 0.95, 1.0, 1.1, 1.5, 3.0):
        d = DaemonProcess(root)
        d.start(wait=False)
        time.sleep(took * fraction)
        d.proc.send_signal(sig)
        code = d.wait_exit(20)
        assert_clean(d, code, sig)
        # Before Python installed its handlers the default action ends the process; after, it stops cleanly.
        assert code in (0, -sig, 1 if sig == signal.SIGINT else 0), f"{sig.name} at {fraction}: exit {code}"


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_stop_signal_while_serving_stops_cleanly_and_a_second_one_changes_nothing(short_tmp, sig):
    d = DaemonProcess(short_tmp / "sa").start()
    k = Kubelet(d)
    k.prepare(write_claim(d.root, claim_object("held")))
    k.close()
    d.proc.send_signal(sig)
    time.sleep(0.01)
    d.proc.send_signal(sig)  # impatient operators and kubelets signal twice
    code = d.wait_exit(20)
    assert code == 0, d.log_text()
    assert_clean(d, code, sig)
    assert f"stopping signal={sig.name}" in d.log_text()

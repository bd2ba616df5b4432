"""tests.cluster.controlplane.exit_on_sigterm: a benchmark stopped by SIGTERM still runs its clean-up."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# What a benchmark does: start something (here: nothing), then clean up in `finally`.
_SCRIPT = """
import sys, time
sys.path.insert(0, {root!r})
from tests.cluster.controlplane import exit_on_sigterm
if {install}:
    exit_on_sigterm()
try:
    print("ready", flush=True)
    time.sleep(120)
finally:
    open({marker!r}, "w").write("cleaned up")
"""


def _stopped(tmp_path: Path, install: bool) -> tuple[int, bool]:
    marker = tmp_path / f"marker-{install}"
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT.format(root=str(ROOT), install=install, marker=str(marker))],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    # Generous: one CI run (loaded 2 cores, the kubelet suite just before) saw no exit within 10 s.
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    proc.stdout.close()
    return proc.wait(), marker.exists()


def test_sigterm_runs_the_finally_that_stops_the_control_plane(tmp_path):
    assert _stopped(tmp_path, install=True) == (128 + signal.SIGTERM, True)


def test_without_it_sigterm_skips_the_finally(tmp_path):
    # Python's default: the process ends at once, and a control plane it started keeps running.
    assert _stopped(tmp_path, install=False) == (-signal.SIGTERM, False)

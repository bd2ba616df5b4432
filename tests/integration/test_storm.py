"""A short kill -9 storm in ``make test`` (``make soak`` runs 200 trials per profile): the daemon is
killed at random instants with Prepares and Unprepares in flight, restarted, and replayed; no claim is
lost, no spec is orphaned, no device is held twice, and every answered CDI id resolves (tests/storm.py).
With disk faults, ENOSPC and EIO come and go at random durable writes all through each trial besides."""

from __future__ import annotations

import pytest

from tests import storm


@pytest.mark.parametrize(("profile", "trials"), [("fake", 20), ("HAMivNPUCore", 10)])
def test_a_kill9_storm_loses_nothing_and_double_books_nothing(short_tmp, profile, trials):
    result = storm.run(trials, profile, seed=trials, root=short_tmp)
    assert dict(result.tallies) == dict.fromkeys(storm.TALLIES, 0), "\n".join(result.details)


@pytest.mark.parametrize(("profile", "trials"), [("fake", 10), ("HAMivNPUCore", 4)])
def test_a_kill9_storm_with_disk_faults_names_every_fault_and_recovers_without_a_restart(short_tmp, profile, trials):
    result = storm.run(trials, profile, seed=trials, root=short_tmp, disk_faults=True)
    assert dict(result.tallies) == dict.fromkeys(storm.TALLIES, 0), "\n".join(result.details)
    assert result.disk_errors > 0  # the faults did fail answers

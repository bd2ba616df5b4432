"""A short kill -9 storm in ``make test`` (``make soak`` runs 200 trials per profile): the daemon is
killed at random instants with Prepares and Unprepares in flight, restarted, and replayed; no claim is
lost, no spec is orphaned, no device is held twice, and every answered CDI id resolves (tests/storm.py)."""

from __future__ import annotations

import pytest

from tests import storm


@pytest.mark.parametrize(("profile", "trials"), [("fake", 20), ("HAMivNPUCore", 10)])
def test_a_kill9_storm_loses_nothing_and_double_books_nothing(short_tmp, profile, trials):
    result = storm.run(trials, profile, seed=trials, root=short_tmp)
    assert dict(result.tallies) == dict.fromkeys(storm.TALLIES, 0), "\n".join(result.details)

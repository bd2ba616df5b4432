"""A short kill -9 storm in cluster mode (tests/storm.py): the claims are in the real API server, so
each Prepare GETs its claim and each answer queues a claim-status write when the daemon is killed."""

from __future__ import annotations

import pytest

from tests import storm

pytestmark = pytest.mark.cluster


def test_a_kill9_storm_in_cluster_mode_loses_nothing_and_double_books_nothing(cp, short_tmp):
    from tests.cluster.test_publish import apply_examples

    apply_examples(cp)
    result = storm.run(12, "fake", seed=12, root=short_tmp, cp=cp)
    assert dict(result.tallies) == dict.fromkeys(storm.TALLIES, 0), "\n".join(result.details)

"""The bed's arithmetic: the figures of the report are computed from these."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

from tests.scale.observe import DRIVER_USER, audit_requests, bucket_delta, bucket_quantile, parse_histogram, percentile


def test_percentile_is_the_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100
    assert percentile([7.0], 0.99) == 7.0
    assert math.isnan(percentile([], 0.5))


def test_bucket_quantile_interpolates_inside_the_bucket_as_prometheus_does():
    buckets = [(0.001, 0.0), (0.005, 50.0), (0.01, 100.0), (math.inf, 100.0)]
    assert bucket_quantile(buckets, 0.5) == 0.005
    assert math.isclose(bucket_quantile(buckets, 0.75), 0.0075)
    assert math.isnan(bucket_quantile([(math.inf, 0.0)], 0.5))


def test_a_histogram_is_read_from_metrics_text_and_two_scrapes_subtract():
    text = "\n".join([
        '# HELP x_seconds time', '# TYPE x_seconds histogram',
        'x_seconds_bucket{endpoint="mutate-pods",outcome="converted",le="0.005"} 3.0',
        'x_seconds_bucket{endpoint="mutate-pods",outcome="converted",le="+Inf"} 4.0',
        'x_seconds_bucket{endpoint="mutate-pods",outcome="allowed",le="0.005"} 9.0',
    ])
    after = parse_histogram(text, "x_seconds", {"endpoint": "mutate-pods", "outcome": "converted"})
    assert after == [(0.005, 3.0), (math.inf, 4.0)]
    assert bucket_delta(after, [(0.005, 1.0), (math.inf, 1.0)]) == [(0.005, 2.0), (math.inf, 3.0)]


def _event(stage: str, verb: str, at: float, user: str = DRIVER_USER, resource: str = "resourceclaims",
           sub: str | None = None) -> str:
    ref = {"resource": resource, **({"subresource": sub} if sub else {})}
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return json.dumps({"stage": stage, "verb": verb, "user": {"username": user}, "objectRef": ref,
                       "requestReceivedTimestamp": stamp})


def test_audit_requests_count_each_request_once_by_the_time_it_was_received(tmp_path: Path):
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        _event("ResponseComplete", "get", 100.5),
        _event("ResponseComplete", "patch", 101.0, sub="status"),
        _event("ResponseStarted", "watch", 102.0, resource="resourceslices"),
        _event("ResponseComplete", "watch", 102.0, resource="resourceslices"),  # its end: not counted again
        _event("ResponseComplete", "get", 100.7, user="someone-else"),
        _event("ResponseComplete", "get", 99.0),  # before the window
        _event("ResponseComplete", "list", 110.0, resource="resourceslices"),  # at its end: outside
    ]) + "\n")
    counts = audit_requests(log, 100.0, 110.0)
    assert counts == {"get resourceclaims": 1, "patch resourceclaims/status": 1, "watch resourceslices": 1}

"""The benchmark client's pipelined mode (bench/bench_prepare.py): N calls in flight, every item sent
once, answers checked, the first refusal stops it. grpcio futures are stood in for by
``concurrent.futures`` ones answered from a thread pool (the same done-callback contract)."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_prepare import Call, Stats, run_calls


class Server:
    """Answers ``item * 2`` after a short wait, counting the calls in flight."""

    def __init__(self, workers: int = 8, instant: bool = False) -> None:
        self.pool = ThreadPoolExecutor(workers)
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.seen: list[int] = []
        self.instant = instant

    def answer(self, item: int) -> int:
        time.sleep(0.002)
        with self.lock:
            self.in_flight -= 1
        return item * 2

    def future(self, item: int, timeout: float) -> Future:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.seen.append(item)
        if self.instant:  # answered before the caller adds its callback: it runs at once, in the caller
            done: Future = Future()
            with self.lock:
                self.in_flight -= 1
            done.set_result(item * 2)
            return done
        return self.pool.submit(self.answer, item)

    def __call__(self, item: int, timeout: float) -> int:
        return self.future(item, timeout).result()


def checked(item: int, answer: int) -> None:
    if answer != item * 2:
        raise AssertionError(f"{item} answered {answer}")


@pytest.mark.parametrize("instant", [False, True])
def test_every_item_is_sent_once_with_at_most_n_in_flight(instant: bool) -> None:
    server = Server(instant=instant)
    stats = run_calls(range(200), Call(server, lambda item: item, checked), 4)
    assert sorted(server.seen) == list(range(200))
    assert len(stats.latencies) == 200
    assert server.most <= 4
    if not instant:
        assert server.most == 4  # the pipeline was kept full


def test_a_refused_answer_stops_sending_and_raises() -> None:
    server = Server()

    def refuse_7(item: int, answer: int) -> None:
        if item == 7:
            raise RuntimeError("claim 7 refused")

    with pytest.raises(RuntimeError, match="claim 7 refused"):
        run_calls(range(1000), Call(server, lambda item: item, refuse_7), 4)
    assert len(server.seen) < 1000


def test_no_items_returns_at_once() -> None:
    stats = run_calls([], Call(Server(), lambda item: item), 16)
    assert stats.latencies == []


def test_pooled_rounds_are_one_phase_of_all_their_samples():
    """bench_matrix pools the rounds of a figure: the percentiles over every sample, the rate over
    the rounds' wall times added (not their mean rate)."""
    first = Stats([0.001] * 98 + [0.100] * 2, wall_s=1.0)
    second = Stats([0.002] * 300, wall_s=3.0)
    pooled = Stats.pooled([first, second])
    assert len(pooled.latencies) == 400
    assert pooled.per_s == 400 / 4.0
    assert pooled.p50_ms == pytest.approx(2.0)
    assert pooled.p99_ms == pytest.approx(2.0)  # two slow calls in 400 are not the p99 any more
    assert first.p99_ms == pytest.approx(100.0)  # as they were of their own round

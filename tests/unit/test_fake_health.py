"""The fake profile's simulated health marks (``<state dir>/fake-health/<device>``)."""

from __future__ import annotations

import logging

from ascend_dra.profiles.base import Inventory
from ascend_dra.profiles.fake import _device, _read_health


def test_a_mark_is_read_in_any_case_and_a_word_it_does_not_know_is_unknown_with_one_warning(tmp_path, caplog):
    """``Unhealthy`` (capitalised) or ``alarm`` in a mark left the device healthy without a word."""
    inventory = Inventory(devices=tuple(_device("n", i) for i in range(6)), source="simulated")
    marks = tmp_path / "fake-health"
    marks.mkdir()
    for name, text in {"npu-0-0": "Unhealthy\n", "npu-1-0": " UNKNOWN", "npu-2-0": "healthy\n",
                       "npu-3-0": "", "npu-4-0": "alarm\n"}.items():
        (marks / name).write_text(text)
    warned: set[tuple[str, str]] = set()
    with caplog.at_level(logging.WARNING, logger="ascend_dra.profiles.fake"):
        first = _read_health(marks, inventory, warned)
        again = _read_health(marks, inventory, warned)
    expected = {"npu-0-0": False, "npu-1-0": None, "npu-2-0": True, "npu-3-0": True, "npu-4-0": None,
                "npu-5-0": True}
    assert first == again == expected
    assert len(caplog.records) == 1, caplog.records  # once per mark and word, not at every health poll
    record = caplog.records[0]
    assert (record.word, record.file) == ("alarm", str(marks / "npu-4-0"))
    assert record.allowed == "healthy, unhealthy, unknown"

    (marks / "npu-4-0").write_text("critical")  # another word is named again
    with caplog.at_level(logging.WARNING, logger="ascend_dra.profiles.fake"):
        assert _read_health(marks, inventory, warned)["npu-4-0"] is None
    assert len(caplog.records) == 2 and caplog.records[1].word == "critical"

"""When DCMI does not answer: an absent or broken library, a call that fails, hangs or crashes the
worker. The chain falls back to npu-smi, for the whole answer or for the one field, and says so."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from ascend_dra.profiles.ascend.dcmi.client import DCMI_DIRS, DcmiClient
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.ascend.sim import npusmi_sim
from tests.dcmisim import SIM, FakeHost, build, fake_host, install, set_fault
from tests.unit.test_ascend_dcmi import chips
from tests.unit.test_ascend_support import script

pytestmark = pytest.mark.anyio

LAB18 = chips([(4, 0, 0, 0, "310P3"), (5, 0, 1, 2, "310P3")])
B4 = chips([(0, 0, 0, 0, "910B4"), (1, 0, 1, 1, "910B4"), (2, 0, 2, 2, "910B4")])


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> FakeHost:
    made = fake_host(tmp_path, getattr(request, "param", LAB18))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(made.sim_dir))
    return made


def recording_npu_smi(host: FakeHost) -> tuple[str, Path]:
    """An npu-smi that logs its arguments, then runs the simulator."""
    log = host.sim_dir / "npu-smi.log"
    exe = script(host.sim_dir, f'#!/bin/sh\necho "$*" >> {log}\nexec {SIM} "$@"\n', name="npu-smi")
    return str(exe), log


def set_health(host: FakeHost, *health: str) -> None:
    """Rewrite Lab 18's ``host.json`` with these health values (both the simulator and DCMI read it)."""
    npusmi_sim.write_host(host.sim_dir, [{**c, "health": h} for c, h in zip(LAB18, health, strict=True)])


async def discover_both(host: FakeHost, profile_type: type = Npu310PProfile, **dcmi: float):
    """(npu-smi's inventory, the DCMI profile, its inventory); ``dcmi`` sets the DCMI source's timeouts."""
    expected = await profile_type(host_root=host.plain_root).discover(host.ctx())
    profile = profile_type(host_root=host.dcmi_root)
    for key, value in dcmi.items():
        setattr(profile.dcmi, key, value)
    return expected, profile, await profile.discover(host.ctx())


async def test_without_a_library_npu_smi_answers_and_the_absence_is_logged_once(
        host: FakeHost, caplog: pytest.LogCaptureFixture) -> None:
    profile = Npu310PProfile(host_root=host.plain_root)
    with caplog.at_level(logging.INFO):
        first = await profile.discover(host.ctx())
        await profile.discover(host.ctx())
    assert first.source == "npu-smi"
    dirs = ", ".join(str(host.plain_root / d) for d in DCMI_DIRS)
    assert profile.discovery_notes()[0] == f"dcmi: no libdcmi.so in {dirs}"
    assert [r.message for r in caplog.records].count("DCMI library not found; npu-smi answers") == 1


@pytest.mark.parametrize(("library", "error"), [
    ("garbage", "{path}: cannot load {path}: {path}: invalid ELF header"),
    ("minimal", "{path}: {path} does not export dcmi_get_card_list, dcmi_get_device_id_in_card, "
                "dcmi_get_device_logic_id, dcmi_get_device_phyid_from_logicid"),
    ("init fails", "{path}: dcmi_init returned -8005 (internal error)"),
    ("card list fails", "DCMI cannot list the chips: dcmi_get_card_list(): -8008 (device does not exist)"),
    ("logic ID fails", "DCMI cannot list the chips: dcmi_get_device_logic_id(5, 0): -8005 (internal error)"),
], ids=["not a library", "lacks the calls the tier needs", "dcmi_init fails", "the card list fails",
        "a logic ID fails"])
async def test_a_broken_library_falls_back_to_npu_smi_with_one_warning(
        host: FakeHost, caplog: pytest.LogCaptureFixture, library: str, error: str) -> None:
    path = host.dcmi_root / "usr/local/dcmi/libdcmi.so"
    if library == "garbage":
        path.write_text("not a shared object\n" * 100)
    elif library == "minimal":
        install(host.dcmi_root, build(minimal=True))
    else:
        set_fault(host.sim_dir, {"init fails": "dcmi_init -8005", "card list fails": "dcmi_get_card_list -8008",
                                 "logic ID fails": "dcmi_get_device_logic_id -8005 5 0"}[library])
    with caplog.at_level(logging.INFO):
        expected, profile, got = await discover_both(host)
        again = await profile.discover(host.ctx())
    profile.close()
    assert (got.source, again.source) == ("npu-smi", "npu-smi")
    assert got.devices == expected.devices
    assert f"tier dcmi failed, npu-smi answered: {error.format(path=path)}" in profile.discovery_notes()
    # One line for two discoveries: the same failure is logged again only at DEBUG.
    failed = [r for r in caplog.records if r.message == "discovery tier failed; trying the next"]
    assert [(r.levelname, r.tier) for r in failed] == [("WARNING", "dcmi")]  # type: ignore[attr-defined]


async def test_a_library_that_cannot_start_is_not_started_again_until_it_changes(
        host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every health pass started a Python worker to fail again (7 a minute on each such node)."""
    starts: list[Path] = []
    start = DcmiClient._start

    async def counted(self: DcmiClient) -> object:
        starts.append(self.library)
        return await start(self)

    monkeypatch.setattr(DcmiClient, "_start", counted)
    path = host.dcmi_root / "usr/local/dcmi/libdcmi.so"
    path.write_text("not a shared object\n" * 100)
    profile = Npu310PProfile(host_root=host.dcmi_root)
    found = [await profile.discover(host.ctx()) for _ in range(3)]
    health = await profile.health(host.ctx(), found[-1])
    assert [f.source for f in found] == ["npu-smi"] * 3 and set(health.values()) == {True}
    assert len(starts) == 1
    # A driver reinstalled: another file at the path, tried at once.
    path.unlink()
    install(host.dcmi_root, build())
    back = await profile.discover(host.ctx())
    profile.close()
    assert back.source == "dcmi" and len(starts) == 2


async def test_a_hung_call_kills_the_worker_and_dcmi_rests_then_answers_again(host: FakeHost) -> None:
    set_fault(host.sim_dir, "dcmi_get_device_logic_id hang 5 0")
    expected, profile, got = await discover_both(host, timeout_s=1.0)
    assert got.source == "npu-smi" and got.devices == expected.devices
    assert ("tier dcmi failed, npu-smi answered: DCMI cannot list the chips: dcmi_get_device_logic_id(5, 0): "
            "no answer within 1 s; the DCMI worker was killed") in profile.discovery_notes()
    set_fault(host.sim_dir)
    resting = await profile.discover(host.ctx())
    assert resting.source == "npu-smi"
    assert any(line.startswith("tier dcmi failed, npu-smi answered: ") and
               ": not asked: dcmi_get_device_logic_id hung; asked again " in line
               for line in profile.discovery_notes())
    assert profile.dcmi.client is not None
    profile.dcmi.client.retry_after_s = 0  # the rest is over
    back = await profile.discover(host.ctx())
    profile.close()
    assert back.source == "dcmi" and back.devices == expected.devices


@pytest.mark.parametrize("host", [B4], indirect=True)
@pytest.mark.parametrize(("fault", "note"), [
    ("dcmi_get_device_die_v2 -8005 1 0",
     "dcmi: dcmi_get_device_die_v2(1, 0, 1): -8005 (internal error); from npu-smi: uuid (1 chip)"),
    ("dcmi_get_device_die_v2 hang 1 0",
     "dcmi: dcmi_get_device_die_v2(1, 0, 1): no answer within 1 s; the DCMI worker was killed; "
     "dcmi_get_device_die_v2(2, 0, 1): not made: dcmi_get_device_die_v2 did not answer; "
     "dcmi_get_device_hbm_info(1, 0): not made: dcmi_get_device_die_v2 did not answer; and 1 more; "
     "from npu-smi: memory_mib (2 chips), uuid (2 chips)"),
    # The last call of its round: the next round starts a new worker, which answers.
    ("dcmi_get_device_health crash 2 0",
     "dcmi: dcmi_get_device_health(2, 0): the DCMI worker was killed by signal 6; from npu-smi: health (1 chip)"),
], ids=["a die ID fails", "a die ID hangs", "the worker crashes"])
async def test_a_field_whose_call_fails_comes_from_npu_smi(host: FakeHost, fault: str, note: str) -> None:
    set_fault(host.sim_dir, fault)
    expected, profile, got = await discover_both(host, Npu910Profile, timeout_s=1.0)
    profile.close()
    assert got.source == "dcmi"
    assert got.devices == expected.devices
    assert note in profile.discovery_notes()


@pytest.mark.parametrize("host", [B4], indirect=True)
async def test_not_supported_is_unknown_and_npu_smi_is_not_asked(host: FakeHost) -> None:
    """-8255 is not an error: npu-smi asks the same call and would not know the value either."""
    set_fault(host.sim_dir, "dcmi_get_device_die_v2 -8255 1 0")
    exe, log = recording_npu_smi(host)
    profile = Npu910Profile(host_root=host.dcmi_root)
    inventory = await profile.discover(host.ctx(exe))
    profile.close()
    assert inventory.source == "dcmi"
    assert [d.attributes.get("uuid") is None for d in inventory.devices] == [False, True, False]
    assert log.read_text().splitlines() == ["info -t topo"]  # the topology only
    assert not any(line.startswith("dcmi: dcmi_get") for line in profile.discovery_notes())


async def test_what_the_library_prints_on_stdout_is_not_an_answer(host: FakeHost) -> None:
    """The worker answers on its own descriptor: a library that prints (as npu-smi's code around it
    does) garbled the answers, and every discovery fell back to npu-smi."""
    set_fault(host.sim_dir, "dcmi_get_card_list print", "dcmi_get_device_health print")
    expected, profile, got = await discover_both(host)
    profile.close()
    assert got.source == "dcmi"
    assert got.devices == expected.devices


async def test_the_dcmi_option_never_leaves_dcmi_out(host: FakeHost) -> None:
    exe, log = recording_npu_smi(host)
    profile = Npu310PProfile(host_root=host.dcmi_root)
    ctx = attrs.evolve(host.ctx(exe), options={"npu-310P.dcmi": "never"})
    inventory = await profile.discover(ctx)
    assert inventory.source == "npu-smi"
    assert not any(n.startswith("dcmi") or "tier dcmi" in n for n in profile.discovery_notes())
    before = len(log.read_text().splitlines())
    assert await profile.health(ctx, inventory) == {"npu-0-0": True, "npu-1-0": True}
    assert log.read_text().splitlines()[before:] == ["info"]
    assert profile.dcmi.client is None


async def test_health_comes_from_dcmi_without_a_process(host: FakeHost) -> None:
    exe, log = recording_npu_smi(host)
    profile = Npu310PProfile(host_root=host.dcmi_root)
    inventory = await profile.discover(host.ctx(exe))
    assert inventory.source == "dcmi" and not log.exists()  # 310P: no topology call either
    set_health(host, "Alarm", "Warning")
    assert await profile.health(host.ctx(exe), inventory) == {"npu-0-0": False, "npu-1-0": True}
    set_health(host, "Critical", "UNKNOWN")
    assert await profile.health(host.ctx(exe), inventory) == {"npu-0-0": False, "npu-1-0": None}
    profile.close()
    assert not log.exists()


async def test_health_of_a_chip_dcmi_does_not_answer_for_comes_from_npu_smi(host: FakeHost) -> None:
    exe, log = recording_npu_smi(host)
    profile = Npu310PProfile(host_root=host.dcmi_root)
    inventory = await profile.discover(host.ctx(exe))
    set_health(host, "Alarm", "Alarm")
    set_fault(host.sim_dir, "dcmi_get_device_health -8005 5 0")
    assert await profile.health(host.ctx(exe), inventory) == {"npu-0-0": False, "npu-1-0": False}
    assert log.read_text().splitlines() == ["info"]
    set_fault(host.sim_dir, "dcmi_get_device_health hang")
    profile.dcmi.client.timeout_s = 1.0  # type: ignore[union-attr]
    assert await profile.health(host.ctx(exe), inventory) == {"npu-0-0": False, "npu-1-0": False}
    # DCMI rests after the hang: the next pass asks npu-smi straight away.
    assert await profile.health(host.ctx(exe), inventory) == {"npu-0-0": False, "npu-1-0": False}
    profile.close()
    assert log.read_text().splitlines() == ["info", "info", "info"]


#: Per-chip readings both the npu-smi simulator and the test libdcmi.so answer from host.json.
READINGS = ({"aicore_util": 42, "memory_used_mib": 9000, "temperature_c": 51, "power_w": 88.5},
            {"aicore_util": 7, "memory_used_mib": 1200, "temperature_c": 44, "power_w": 70.1})


async def readings_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, object]],
                        profile_type: type):
    """A host whose first chips report :data:`READINGS` (no power on 310P: npu-smi prints NA, DCMI says
    not supported), npu-smi's profile after one health pass and its health, a DCMI profile that has
    discovered the host through a recording npu-smi, and that npu-smi's log."""
    p310 = profile_type is Npu310PProfile
    readings = [{k: v for k, v in r.items() if not (p310 and k == "power_w")} for r in (*READINGS, {})]
    host = fake_host(tmp_path, [{**c, **r} for c, r in zip(rows, readings, strict=False)])
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    by_npu_smi = profile_type(host_root=host.plain_root)
    expected = await by_npu_smi.health(host.ctx(), await by_npu_smi.discover(host.ctx()))
    exe, log = recording_npu_smi(host)
    profile = profile_type(host_root=host.dcmi_root)
    inventory = await profile.discover(host.ctx(exe))
    return host, by_npu_smi, expected, profile, inventory, host.ctx(exe), log


@pytest.mark.parametrize(("rows", "profile_type"), [(LAB18, Npu310PProfile), (B4, Npu910Profile)],
                         ids=["310P3", "910B4"])
async def test_readings_come_from_dcmi_as_npu_smi_gives_them_without_a_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows, profile_type) -> None:
    """The usage metrics read AI core use, memory used, temperature and power at the health interval
    (profiles/ascend/usage.py); when DCMI answers every chip's health, they come from DCMI too (they
    were empty: npu-smi, which gave them, was no longer asked), the same values npu-smi prints."""
    _, by_npu_smi, expected, profile, inventory, ctx, log = await readings_host(tmp_path, monkeypatch, rows,
                                                                              profile_type)
    before = log.read_text().splitlines() if log.exists() else []
    try:
        assert await profile.health(ctx, inventory) == expected
    finally:
        profile.close()
    assert (log.read_text().splitlines() if log.exists() else []) == before  # no npu-smi for health
    assert profile.readings() == by_npu_smi.readings()
    first = profile.readings()["npu-0-0"]
    assert (first.core_percent, first.memory_used_mib, first.temperature_c) == (42.0, 9000, 51.0)
    assert first.power_w == (None if profile_type is Npu310PProfile else 88.5)
    assert len(profile.readings()) == len(rows)


async def test_a_reading_dcmi_does_not_give_comes_from_npu_smi_with_the_chips_health(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host, by_npu_smi, expected, profile, inventory, ctx, log = await readings_host(tmp_path, monkeypatch, B4,
                                                                                 Npu910Profile)
    set_fault(host.sim_dir, "dcmi_get_device_temperature -8005 1 0")
    try:
        assert await profile.health(ctx, inventory) == expected
    finally:
        profile.close()
    assert log.read_text().splitlines() == ["info -t topo", "info"]
    assert profile.readings() == by_npu_smi.readings()

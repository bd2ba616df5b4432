"""registry.py: entry-point loading, the contract check, and isolation of broken profiles.

Broken profiles are real distributions: each test writes a throw-away ``<name>-<version>.dist-info``
(METADATA + entry_points.txt) and a module into ``tmp_path`` and puts it on ``sys.path``, so
``importlib.metadata`` finds them exactly as it finds an installed wheel.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import threading
import types
import uuid
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import anyio
import pytest
import yaml

from ascend_dra.cli import profiles as profiles_command
from ascend_dra.model import Inventory
from ascend_dra.profiles import checks
from ascend_dra.profiles.base import ProfileContext
from ascend_dra.profiles.registry import (
    ENTRY_POINT_GROUP,
    LoadedProfile,
    ProfileLoadError,
    discover_isolated,
    installed,
    load_installed,
    load_one,
    load_profiles,
)

#: A working profile; tests replace pieces of it to break it one way at a time.
GOOD = '''
import anyio
import attrs
from ascend_dra.model import Capacity, Device, Inventory

@attrs.frozen
class ThingConfig:
    level: int = 1

class Thing:
    name = "{name}"
    cdi_class = "thing"
    config_types = {{"ThingConfig": ThingConfig}}

    def default_config(self):
        return ThingConfig()

    async def discover(self, ctx):
        {discover}

    def validate(self, config):
        pass

    def apply_config(self, config, devices, ctx):
        return {{}}

def factory():
    return Thing()
'''
GOOD_DISCOVER = ('return Inventory(devices=(Device("thing-0", {"index": 0}, {"memory": Capacity("1Gi")}),), '
                 'source="simulated")')


@pytest.fixture
def ctx(tmp_path: Path) -> ProfileContext:
    return ProfileContext(node_name="node-a", driver_name="example.com", fake_devices=2,
                          state_dir=tmp_path / "state")


@pytest.fixture
def make_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[EntryPoint]]]:
    """Write a distribution into tmp_path and return its entry points of our group (with ``.dist``)."""
    modules: list[str] = []

    def make(dist_name: str, version: str, profiles: dict[str, str]) -> list[EntryPoint]:
        """:param profiles: entry-point name -> module source."""
        lines = []
        for ep_name, source in profiles.items():
            module = f"thing_{uuid.uuid4().hex[:12]}"
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
            modules.append(module)
            lines.append(f"{ep_name} = {module}:factory")
        info = tmp_path / f"{dist_name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n" + "\n".join(lines) + "\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        return [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.dist and ep.dist.name == dist_name]

    yield make
    for module in modules:
        sys.modules.pop(module, None)


def good(name: str, discover: str = GOOD_DISCOVER) -> str:
    return GOOD.format(name=name, discover=discover)


# -- loading --------------------------------------------------------------------------------------


def test_the_example_distribution_is_found_through_its_entry_point() -> None:
    (ep,) = [ep for ep in installed() if ep.name == "example"]
    loaded = load_one(ep, log=False)
    assert (loaded.name, loaded.distribution, loaded.version, loaded.target, loaded.status) == (
        "example", "ascend-dra-example-profile", "0.1.0", "ascend_dra_example_profile:factory", "ok")
    assert type(loaded.profile).__name__ == "ExampleProfile"


def test_a_good_profile_from_a_distribution_loads_with_its_distribution(make_dist) -> None:
    (ep,) = make_dist("thing-profile", "2.3.4", {"thing": good("thing")})
    loaded = load_one(ep, log=False)
    assert (loaded.distribution, loaded.version, loaded.status) == ("thing-profile", "2.3.4", "ok")
    assert loaded.where == "thing-profile 2.3.4"


def test_an_import_error_is_reported_with_the_distribution(make_dist, caplog) -> None:
    (ep,) = make_dist("broken-import", "1.0", {"broken": "import no_such_module_anywhere\n"})
    loaded = load_one(ep)
    assert loaded.profile is None
    assert loaded.status == "broken: ModuleNotFoundError: No module named 'no_such_module_anywhere'"
    assert str(loaded.error) == (
        "profile 'broken' from broken-import 1.0: ModuleNotFoundError: No module named 'no_such_module_anywhere'")
    assert isinstance(loaded.error.__cause__, ModuleNotFoundError)
    (record,) = [r for r in caplog.records if r.name == "ascend_dra.profiles.registry"]
    assert (record.levelno, record.getMessage(), record.profile, record.distribution) == (
        logging.ERROR, "profile broken, skipped", "broken", "broken-import 1.0")
    assert record.exc_info is not None  # the traceback is logged once, here


def test_a_syntax_error_is_reported(make_dist) -> None:
    (ep,) = make_dist("broken-syntax", "1.0", {"broken": "def factory(:\n"})
    loaded = load_one(ep, log=False)
    assert loaded.status.startswith("broken: SyntaxError: ")


def test_a_raising_factory_is_reported(make_dist) -> None:
    source = "def factory():\n    raise RuntimeError('license server unreachable')\n"
    (ep,) = make_dist("broken-factory", "0.9", {"broken": source})
    loaded = load_one(ep, log=False)
    assert str(loaded.error) == "profile 'broken' from broken-factory 0.9: RuntimeError: license server unreachable"


def test_an_object_missing_methods_is_rejected_naming_what_is_missing(make_dist) -> None:
    source = "class P:\n    name = 'partial'\n    cdi_class = 'x'\n    config_types = {}\n" \
             "    def default_config(self):\n        return None\n" \
             "def factory():\n    return P()\n"
    (ep,) = make_dist("partial-profile", "1.0", {"partial": source})
    loaded = load_one(ep, log=False)
    assert loaded.error is not None
    assert loaded.error.reason == (
        f"TypeError: the object from {ep.value} does not satisfy the profile contract "
        "(ascend_dra/profiles/base.py): lacks the method(s) discover, validate, apply_config")


def test_contract_problems_are_all_listed(make_dist) -> None:
    source = good("other").replace('cdi_class = "thing"', 'cdi_class = "no/slash"') \
        .replace("async def discover", "def discover") \
        .replace('config_types = {"ThingConfig": ThingConfig}', 'config_types = {"ThingConfig": dict}') \
        + "\nThing.prepare_side_effects = lambda self: None\n"
    (ep,) = make_dist("sloppy-profile", "1.0", {"thing": source})
    loaded = load_one(ep, log=False)
    assert loaded.error is not None
    assert loaded.error.reason.split(": ", 2)[2].split("; ") == [
        "name 'other' differs from its entry-point name 'thing'",
        "cdi_class 'no/slash' is not a CDI class (a letter, then letters, digits, '_', '.', '-')",
        "discover is not an 'async def'",
        "config_types['ThingConfig'] is <class 'dict'>, not an attrs class",
        "default_config() returned a ThingConfig, not one of its config_types",
        "has prepare_side_effects without unprepare_side_effects",
        "prepare_side_effects is not an 'async def'",
    ]


def test_a_broken_profile_does_not_stop_the_others(make_dist) -> None:
    make_dist("mixed-profiles", "1.0", {"broken": "raise ImportError('missing libfoo.so')\n",
                                        "thing": good("thing")})
    results = load_profiles(["broken", "fake", "thing"], log=False)
    assert [(r.name, r.distribution, r.status) for r in results] == [
        ("broken", "mixed-profiles", "broken: ImportError: missing libfoo.so"),
        ("fake", "ascend-dra", "ok"),
        ("thing", "mixed-profiles", "ok"),
    ]


def test_an_unknown_name_lists_the_installed_profiles() -> None:
    eps = [EntryPoint("fake", "ascend_dra.profiles.fake:factory", ENTRY_POINT_GROUP),
           EntryPoint("gpu", "ascend_dra.profiles.gpu:factory", ENTRY_POINT_GROUP)]
    (result,) = load_profiles(["npu-920"], eps, log=False)
    assert str(result.error) == ("profile 'npu-920' from unknown: no profile 'npu-920' is installed; "
                                 "installed: fake, gpu")


def test_an_entry_point_without_a_distribution_is_unknown() -> None:
    loaded = load_one(EntryPoint("fake", "ascend_dra.profiles.fake:factory", ENTRY_POINT_GROUP), log=False)
    assert (loaded.distribution, loaded.version, loaded.status) == ("unknown", "", "ok")


def test_one_name_from_two_distributions_names_both_and_loads_neither(make_dist) -> None:
    first = make_dist("vendor-a-profile", "1.0", {"thing": good("thing")})
    second = make_dist("vendor-b-profile", "2.0", {"thing": good("thing")})
    (result,) = load_profiles(["thing"], first + second, log=False)
    assert result.profile is None
    assert str(result.error) == (
        "profile 'thing' from vendor-a-profile 1.0, vendor-b-profile 2.0: registered by 2 distributions "
        f"(vendor-a-profile 1.0: {first[0].value}; vendor-b-profile 2.0: {second[0].value}); "
        "uninstall all but one")
    listed = load_installed(first + second)
    assert [(r.distribution, r.target, r.profile) for r in listed] == [
        ("vendor-a-profile", first[0].value, None), ("vendor-b-profile", second[0].value, None)]


# -- discovery ------------------------------------------------------------------------------------


def loaded_from(make_dist, dist_name: str, discover: str) -> LoadedProfile:
    (ep,) = make_dist(dist_name, "1.0", {"thing": good("thing", discover)})
    loaded = load_one(ep, log=False)
    assert loaded.error is None
    return loaded


@pytest.mark.anyio
async def test_a_good_discovery_returns_the_inventory(make_dist, ctx) -> None:
    loaded = loaded_from(make_dist, "thing-profile", GOOD_DISCOVER)
    inventory = await discover_isolated(loaded, ctx, timeout_s=10)
    assert [d.name for d in inventory.devices] == ["thing-0"]


@pytest.mark.anyio
async def test_the_inventory_is_checked_off_the_event_loop_thread(make_dist, ctx, monkeypatch) -> None:
    # Checking grows with the devices; on the loop it held GetInfo and Prepare (15-28 ms, 1,300 devices).
    threads = []
    real = checks.inventory_problems

    def recording(inventory):
        threads.append(threading.current_thread())
        return real(inventory)

    monkeypatch.setattr(checks, "inventory_problems", recording)
    loaded = loaded_from(make_dist, "thing-profile", GOOD_DISCOVER)
    inventory = await discover_isolated(loaded, ctx, timeout_s=10)
    assert [d.name for d in inventory.devices] == ["thing-0"]
    assert threads and threads[0] is not threading.current_thread()


@pytest.mark.anyio
async def test_a_raising_discovery_is_reported_with_the_distribution(make_dist, ctx) -> None:
    loaded = loaded_from(make_dist, "raising-profile", "raise OSError(5, 'Input/output error')")
    with pytest.raises(ProfileLoadError) as caught:
        await discover_isolated(loaded, ctx, timeout_s=10)
    assert str(caught.value) == (
        "profile 'thing' from raising-profile 1.0: discovery failed: OSError: [Errno 5] Input/output error")
    assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.anyio
async def test_a_hanging_discovery_times_out(make_dist, ctx) -> None:
    loaded = loaded_from(make_dist, "hanging-profile", "await anyio.sleep_forever()")
    with pytest.raises(ProfileLoadError) as caught:
        await discover_isolated(loaded, ctx, timeout_s=0.05)
    assert str(caught.value) == "profile 'thing' from hanging-profile 1.0: discovery did not finish within 0.05 s"
    assert isinstance(caught.value.__cause__, TimeoutError)


@pytest.mark.anyio
async def test_a_timeout_raised_by_the_profile_itself_is_not_our_timeout(make_dist, ctx) -> None:
    loaded = loaded_from(make_dist, "slow-tool-profile", "raise TimeoutError('npu-smi took too long')")
    with pytest.raises(ProfileLoadError) as caught:
        await discover_isolated(loaded, ctx, timeout_s=10)
    assert caught.value.reason == "discovery failed: TimeoutError: npu-smi took too long"


@pytest.mark.anyio
async def test_invalid_devices_are_rejected_listing_every_problem(make_dist, ctx) -> None:
    discover = ('return Inventory(devices=(Device("Thing_0", {"productNameThatIsFarTooLongForTheApi": "x"}), '
                'Device("thing-1"), Device("thing-1")))')
    loaded = loaded_from(make_dist, "sloppy-devices", discover)
    with pytest.raises(ProfileLoadError) as caught:
        await discover_isolated(loaded, ctx, timeout_s=10)
    assert caught.value.reason == (
        "discovery returned an invalid inventory: "
        "devices[0] (Thing_0).name: 'Thing_0' is not a DNS label: lower-case letters, digits and '-', starting "
        "and ending with a letter or digit, at most 63 characters; "
        "devices[0] (Thing_0).attributes['productNameThatIsFarTooLongForTheApi']: name "
        "'productNameThatIsFarTooLongForTheApi' is 36 characters long (at most 32); "
        "devices[1] (thing-1).name: duplicate device name 'thing-1' (2 devices)")


@pytest.mark.anyio
async def test_a_discovery_returning_something_else_is_rejected(make_dist, ctx) -> None:
    loaded = loaded_from(make_dist, "list-profile", "return []")
    with pytest.raises(ProfileLoadError) as caught:
        await discover_isolated(loaded, ctx, timeout_s=10)
    assert caught.value.reason == "discovery returned a list, not an Inventory"


@pytest.mark.anyio
async def test_discovering_a_profile_that_did_not_load_raises_its_load_error(make_dist, ctx) -> None:
    (ep,) = make_dist("broken-import", "1.0", {"broken": "import no_such_module_anywhere\n"})
    loaded = load_one(ep, log=False)
    with pytest.raises(ProfileLoadError) as caught:
        await discover_isolated(loaded, ctx, timeout_s=10)
    assert caught.value is loaded.error


@pytest.mark.anyio
async def test_cancellation_from_outside_is_not_turned_into_an_error(make_dist, ctx) -> None:
    loaded = loaded_from(make_dist, "hanging-profile", "await anyio.sleep_forever()")
    outcome: list[Inventory] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            async def run() -> None:
                outcome.append(await discover_isolated(loaded, ctx, timeout_s=60))

            tg.start_soon(run)
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert scope.cancelled_caught
    assert outcome == []


@pytest.mark.anyio
async def test_the_others_keep_discovering_when_one_fails(make_dist, ctx) -> None:
    make_dist("mixed-profiles", "1.0", {"hangs": good("hangs", "await anyio.sleep_forever()"),
                                        "thing": good("thing")})
    found: dict[str, list[str]] = {}
    errors: list[str] = []
    for loaded in load_profiles(["hangs", "thing", "fake"], log=False):
        try:
            inventory = await discover_isolated(loaded, ctx, timeout_s=0.05)
        except ProfileLoadError as exc:
            errors.append(str(exc))
        else:
            found[loaded.name] = [d.name for d in inventory.devices]
    assert errors == ["profile 'hangs' from mixed-profiles 1.0: discovery did not finish within 0.05 s"]
    assert found == {"thing": ["thing-0"], "fake": ["npu-0-0", "npu-1-0"]}


# -- ascend-dra profiles --------------------------------------------------------------------------


def test_the_profiles_listing_shows_distribution_version_target_and_status(make_dist) -> None:
    eps = make_dist("vendor-profiles", "3.1.0", {"broken": "raise ImportError('missing libfoo.so')\n",
                                                  "thing": good("thing")})
    broken, thing = eps
    assert profiles_command.run("table", eps) == (
        "NAME    DISTRIBUTION     VERSION  TARGET                      STATUS\n"  # targets are 26 characters
        f"broken  vendor-profiles  3.1.0    {broken.value}  broken: ImportError: missing libfoo.so\n"
        f"thing   vendor-profiles  3.1.0    {thing.value}  ok\n"
    )
    assert json.loads(profiles_command.run("json", eps)) == [
        {"name": "broken", "distribution": "vendor-profiles", "version": "3.1.0", "target": broken.value,
         "status": "broken: ImportError: missing libfoo.so"},
        {"name": "thing", "distribution": "vendor-profiles", "version": "3.1.0", "target": thing.value,
         "status": "ok"},
    ]
    assert yaml.safe_load(profiles_command.run("yaml", eps)) == json.loads(profiles_command.run("json", eps))


def test_the_profiles_listing_includes_every_installed_distribution() -> None:
    rows = {row["name"]: row for row in profiles_command.rows()}
    assert rows["fake"] == {"name": "fake", "distribution": "ascend-dra", "version": "0.1.0",
                            "target": "ascend_dra.profiles.fake:factory", "status": "ok"}
    assert rows["example"]["distribution"] == "ascend-dra-example-profile"


@pytest.mark.parametrize("pynvml", [None, types.ModuleType("pynvml")], ids=["without-pynvml", "with-pynvml"])
def test_the_profiles_listing_says_when_a_profile_cannot_start_with_its_defaults(monkeypatch, pynvml) -> None:
    # A README trial: `profiles` said gpu "ok" while `run --profiles gpu` refused to start without pynvml.
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    status = {row["name"]: row["status"] for row in profiles_command.rows()}["gpu"]
    assert status == ("ok" if pynvml is not None else
                      "ok; cannot start with its default options: profile gpu needs the pynvml module: pip install "
                      "'ascend-dra[gpu]' (package nvidia-ml-py), or pass --profile-option gpu.simulate=always for "
                      "simulated GPUs")


def test_the_profiles_listing_refuses_an_unknown_output() -> None:
    with pytest.raises(ValueError, match=r"^profiles: output 'xml' is not one of table, json, yaml$"):
        profiles_command.run("xml")

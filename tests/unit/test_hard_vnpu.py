"""The hard-vNPU profile against the stateful npu-smi simulator: catalogue, counters, create/destroy,
half-way rollback, admin access, reboot, start-up repair; and the simulator's formats and rules."""

from __future__ import annotations

import itertools
from decimal import Decimal
from pathlib import Path

import attrs
import pytest

from ascend_dra.cluster.slices import MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS, build_slices
from ascend_dra.model import AllocatedDevice, ClaimAllocation, parse_quantity
from ascend_dra.profiles import checks
from ascend_dra.profiles.ascend.hardvnpu import templates
from ascend_dra.profiles.ascend.hardvnpu.ops import VnpuError
from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
from ascend_dra.profiles.ascend.npusmi import keyvalue, tables
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiFailed
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi
from ascend_dra.profiles.ascend.sim import npusmi_sim
from ascend_dra.profiles.base import ApplyContext
from tests.hardvnpu import TIERS, SimHost

FIXTURES = Path(__file__).parent.parent / "fixtures" / "npu-smi"
pytestmark = pytest.mark.anyio


@pytest.fixture(params=TIERS)
def sim(tmp_path, monkeypatch, request):
    """The Lab 18 host, its vNPUs made and listed through npu-smi, or through DCMI (the test libdcmi.so)."""
    host = SimHost(tmp_path, dcmi=request.param == "dcmi")
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    return host


async def discovered(host: SimHost) -> tuple[HardVnpuProfile, object]:
    profile = HardVnpuProfile()
    return profile, await profile.discover(host.ctx())


def claim(uid: str, *devices: str, admin: bool = False) -> ClaimAllocation:
    return ClaimAllocation(uid, "default", f"claim-{uid}", tuple(
        AllocatedDevice(f"r{i}", "ascend.project-hami.io", "node-1", d, admin_access=admin)
        for i, d in enumerate(devices)))


def apply_ctx(host: SimHost, inventory, c: ClaimAllocation) -> ApplyContext:
    return ApplyContext(host.ctx(), inventory, c.uid, c.namespace, c.name)


# -- catalogue ----------------------------------------------------------------------------------


def test_910b4_1_has_its_own_templates_not_910b4s():
    assert [t.name for t in templates.MODELS["910B4-1"].templates] == ["vir05_1c_16g", "vir10_3c_32g"]
    assert [t.name for t in templates.MODELS["910B4"].templates] == [
        "vir10_3c_16g", "vir10_4c_16g_m", "vir10_3c_16g_nm", "vir05_1c_8g"]
    assert templates.MODELS["910B4-1"].memory_mib == 65536


@pytest.mark.parametrize(("model", "template", "count"), [
    ("310P3", "vir01", 7),          # 7 AICPUs (and at most 7 vNPUs)
    ("310P3", "vir04", 1),          # 4 + 4 AICPUs > 7
    ("310P3", "vir04_3c", 2),       # 8 AI cores, 24 GiB
    ("910B4", "vir05_1c_8g", 4),    # 20 AI cores, 32 GiB, 24 JPEGD
    ("910B4", "vir10_4c_16g_m", 1),  # all 9 VPC
    ("910B4-1", "vir10_3c_32g", 2),  # 64 GiB (910B4-1_64G_info-vnpu sample: two fit)
    ("910B2", "vir03_1c_8g", 6),    # 6 AICPUs
], ids=["310P3 vir01 by AICPU", "310P3 vir04 by AICPU", "310P3 vir04_3c by cores", "910B4 vir05 by cores",
        "910B4 media template by VPC", "910B4-1 vir10_3c_32g by memory", "910B2 vir03 by AICPU"])
def test_max_instances_follow_the_tightest_counter(model, template, count):
    resources = templates.MODELS[model]
    assert templates.max_instances(resources, resources.template(template)) == count


def test_910a_with_32_cores_fits_two_vir16():
    resources = templates.resources_of("910A", 32)
    assert templates.max_instances(resources, resources.template("vir16")) == 2
    assert templates.max_instances(templates.resources_of("910A", 30), resources.template("vir16")) == 1


@pytest.mark.parametrize("fixture", ["310P3_info_-t_template-info_drv22.0.4.txt",
                                     "910B4_A2-inference_info_-t_template-info.txt"],
                         ids=["+===+ header rule (310P3 22.0.4)", "|===| header rule (910B4)"])
def test_template_info_of_the_node_replaces_the_tables(fixture):
    parsed = tables.parse_template_info((FIXTURES / fixture).read_text())
    model = "310P3" if fixture.startswith("310P3") else "910B4"
    merged = templates.from_template_info(templates.MODELS[model], parsed)
    assert merged.templates == templates.MODELS[model].templates


# -- the simulator --------------------------------------------------------------------------------


def sim_run(host: SimHost, *argv: str) -> str:
    return npusmi_sim.run(argv, host.sim_dir)


async def test_simulated_chips_keep_their_models_templates_whatever_the_nodes_npu_smi_prints(tmp_path, monkeypatch):
    """``simulate=always`` invents chips (a 910B4); asking the node's npu-smi (here one that knows a
    310P3) for their templates gave 310P3 templates cut by 910B4 counters (a hard-vNPU user's trial)."""
    host = SimHost(tmp_path, chips=((0, 0, 0, 0, "310P3"),))  # the NPU ID the simulated chip gets
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    ctx = attrs.evolve(host.ctx(), options={**host.options, "hard-vNPU.simulate": "always"}, fake_devices=1)
    inventory = await HardVnpuProfile().discover(ctx)
    chips = {d.attributes["chipName"] for d in inventory.devices}
    published = {d.attributes["vnpuTemplate"] for d in inventory.devices if "vnpuTemplate" in d.attributes}
    [model] = chips
    assert published == {t.name for t in templates.resources_of(str(model), None).templates}
    assert not published & {"vir01", "vir02", "vir04"}


def test_simulator_prints_formats_our_parsers_read(sim):
    info = tables.parse_info(sim_run(sim, "info"))
    assert [(c.npu_id, c.chip_id, c.name, c.hbm_total_mib) for c in info.chips] == [
        (4, 0, "910B4", 32768), (5, 0, "910B4", 32768)]
    mapping = tables.parse_mapping(sim_run(sim, "info", "-m"))
    assert [(m.npu_id, m.logic_id) for m in mapping] == [(4, 0), (5, 1)]
    assert len(tables.parse_template_info(sim_run(sim, "info", "-t", "template-info", "-i", "4"))) == 4


def test_simulator_info_vnpu_after_two_creates_reads_like_the_real_910b4(sim):
    for vnpu_id in ("100", "101"):
        out = sim_run(sim, "set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", "vir10_3c_16g", "-v", vnpu_id)
        assert out == "\tStatus                         : OK\n\tMessage                        : Create vnpu success\n"
    ours = tables.parse_vnpu_info(sim_run(sim, "info", "-t", "info-vnpu", "-i", "4", "-c", "0"))
    real = (FIXTURES / "910B4_A2-inference_info_-t_info-vnpu_empty_and_2vnpus.txt").read_text()
    after = tables.parse_vnpu_info(real.split("\n\n")[1])
    assert ours.resources == after.resources
    assert [(v.vnpu_id, v.vgroup_id, v.template_name) for v in ours.vnpus] == [
        (v.vnpu_id, v.vgroup_id, v.template_name) for v in after.vnpus]
    assert (sim.vdev / "vdavinci100").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (("-f", "vir01", "-v", "100"), "The template name is invalid: vir01 (this chip accepts vir10_3c_16g, "
                                   "vir10_4c_16g_m, vir10_3c_16g_nm, vir05_1c_8g)"),
    (("-f", "vir05_1c_8g", "-v", "116"), "The vnpu id is invalid: 116 (allowed 100-115)"),
    (("-f", "vir10_4c_16g_m", "-v", "102"), "The resource is insufficient: aicore needs 10, 0 free"),
    (("-f", "vir10_3c_16g", "-v", "100"), "The vnpu id already exists: 100"),
], ids=["template of another chip", "vNPU ID of another chip", "chip full", "ID in use"])
def test_simulator_refuses_what_the_chip_refuses(sim, argv, message):
    for vnpu_id in ("100", "101"):
        sim_run(sim, "set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", "vir10_3c_16g", "-v", vnpu_id)
    with pytest.raises(npusmi_sim.SimError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        sim_run(sim, "set", "-t", "create-vnpu", "-i", "4", "-c", "0", *argv)


def test_simulator_310p_stops_at_seven_vnpus(tmp_path):
    host = SimHost(tmp_path, chips=((7, 0, 0, 0, "310P3"),))
    for _ in range(7):
        sim_run(host, "set", "-t", "create-vnpu", "-i", "7", "-c", "0", "-f", "vir01")
    with pytest.raises(npusmi_sim.SimError, match="The number of vnpu reaches the upper limit: 7"):
        sim_run(host, "set", "-t", "create-vnpu", "-i", "7", "-c", "0", "-f", "vir01")


def test_simulator_restores_vnpus_after_a_reboot_unless_cfg_recover_is_off(sim):
    # vnpu-cfg-recover: Enable by default; "VNPU config recover mode : Enable" and the set answer are
    # those of MindCluster "Creating vNPUs", https://www.hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/cpaug_0011.html.
    assert keyvalue.parse_vnpu_cfg_recover(sim_run(sim, "info", "-t", "vnpu-cfg-recover")) is True
    sim_run(sim, "set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", "vir05_1c_8g", "-v", "100")
    sim.reboot("boot-2")
    assert [v["vnpu_id"] for v in sim.vnpus()] == [100] and (sim.vdev / "vdavinci100").exists()
    assert sim_run(sim, "set", "-t", "vnpu-cfg-recover", "-d", "0") == (
        "\tStatus                         : OK\n"
        "\tMessage                        : The VNPU config recover mode Disable is set successfully.\n")
    assert keyvalue.parse_vnpu_cfg_recover(sim_run(sim, "info", "-t", "vnpu-cfg-recover")) is False
    sim.reboot("boot-3")
    assert sim.vnpus() == [] and not (sim.vdev / "vdavinci100").exists()
    with pytest.raises(npusmi_sim.SimError, match=r"^Error: vnpu-cfg-recover -d takes 0 \(Disable\) or 1 "
                                                  r"\(Enable\), not 2$"):
        sim_run(sim, "set", "-t", "vnpu-cfg-recover", "-d", "2")


# -- discovery and publishing -----------------------------------------------------------------------


async def test_publishes_chip_and_instances_as_partitionable_devices_within_api_limits(sim):
    _, inventory = await discovered(sim)
    names = [d.name for d in inventory.devices]
    assert names[:10] == ["npu-0-0", "vnpu-0-0-vir10-3c-16g-0", "vnpu-0-0-vir10-3c-16g-1",
                          "vnpu-0-0-vir10-4c-16g-m-0", "vnpu-0-0-vir10-3c-16g-nm-0", "vnpu-0-0-vir10-3c-16g-nm-1",
                          "vnpu-0-0-vir05-1c-8g-0", "vnpu-0-0-vir05-1c-8g-1", "vnpu-0-0-vir05-1c-8g-2",
                          "vnpu-0-0-vir05-1c-8g-3"]
    assert [(c.name, dict(c.counters)) for c in inventory.counter_sets][1] == (
        "npu-1-0-counters", {"aicore": "20", "memory": "32768Mi", "aicpu": "7", "vpc": "9", "jpegd": "24",
                             "vdec": "2", "jpege": "4"})
    whole = inventory.device("npu-1-0")
    assert whole.consumes_counters[0].counters == inventory.counter_sets[1].counters
    vnpu = inventory.device("vnpu-1-0-vir05-1c-8g-3")
    assert {k: vnpu.attributes[k] for k in ("type", "vnpuTemplate", "vnpuID", "aicoreCount", "memoryMiB", "npuID",
                                            "physicalID")} == {
        "type": "vnpu", "vnpuTemplate": "vir05_1c_8g", "vnpuID": 2 * 16 + 100 + 8, "aicoreCount": 5,
        "memoryMiB": 8192, "npuID": 5, "physicalID": 2}
    assert vnpu.consumes_counters[0].counters == {"aicore": "5", "memory": "8192Mi", "aicpu": "1", "vpc": "2",
                                                  "jpegd": "6", "jpege": "1"}
    assert checks.inventory_problems(inventory) == []


async def test_310p_shares_vnpu_ids_through_counters_and_slices_split(tmp_path, monkeypatch):
    chips = tuple((i, 0, i, i, "310P3") for i in range(8))
    host = SimHost(tmp_path, chips=chips)
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    _, inventory = await discovered(host)
    assert checks.inventory_problems(inventory) == []
    per_chip = [d for d in inventory.devices if d.name.startswith("vnpu-0-0-")]
    # Each template gets an instance per vNPU ID it may need (templates.id_choices).
    assert len(per_chip) == 7 + 6 + 7 + 4 + 5 + 5 + 4
    slot_of = {d.name: next(k for k in d.consumes_counters[0].counters if k.startswith("vnpu-id-")) for d in per_chip}
    assert all(slot_of[d.name] == f"vnpu-id-{d.name.rsplit('-', 1)[1]}" for d in per_chip)  # instance k, ID k
    assert {d.attributes["vnpuID"] for d in per_chip} == set(range(100, 107))  # 7 vNPUs at most: 7 IDs
    slices = build_slices(inventory, driver_name="ascend.project-hami.io", node_name="node-1")
    device_slices = [s for s in slices if "devices" in s["spec"]]
    assert len(device_slices) == 5 and all(
        len(s["spec"]["devices"]) <= MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS for s in device_slices)
    assert sum(len(s["spec"].get("sharedCounters", [])) for s in slices) == 8


def _fits(resources, combo) -> bool:
    totals = templates.chip_counters(resources)
    used: dict[str, int] = {}
    for t in combo:
        for counter, need in templates.template_counters(resources, t).items():
            used[counter] = used.get(counter, 0) + need
    limit = min(resources.id_slots, resources.max_vnpus or resources.id_slots)
    return len(combo) <= limit and all(used.get(c, 0) <= total for c, total in totals.items())


def _schedule(inventory, set_name, order) -> bool:
    """Allocate one device per template in ``order`` as the scheduler does: the first instance of
    the template whose counters (the vnpu-id ones included) are all still free."""
    free = {c: Decimal(parse_quantity(v)) for c, v in next(
        s for s in inventory.counter_sets if s.name == set_name).counters.items()}
    devices = [d for d in inventory.devices if d.consumes_counters and d.consumes_counters[0].counter_set == set_name]
    taken = set()
    for template in order:
        for d in devices:
            if d.attributes.get("vnpuTemplate") != template.name or d.name in taken:
                continue
            needs = {c: parse_quantity(v) for c, v in d.consumes_counters[0].counters.items()}
            if all(free[c] >= n for c, n in needs.items()):
                for c, n in needs.items():
                    free[c] -= n
                taken.add(d.name)
                break
        else:
            return False
    return True


@pytest.mark.parametrize("model", ["310P3", "910B4"])
async def test_every_combination_the_chip_holds_is_schedulable_in_any_order(tmp_path, monkeypatch, model):
    """With vNPU IDs dealt round-robin over the templates, Huawei's own full 310P3 (six vir01 and one
    vir02_1c) and "three vir01 then two vir02" stayed pending: every free vir02_1c / vir02 instance
    shared an ID with a vir01 already allocated (a hard-vNPU user's trial)."""
    host = SimHost(tmp_path, chips=((0, 0, 0, 0, model),))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    _, inventory = await discovered(host)
    resources = templates.MODELS[model]
    limit = min(resources.id_slots, resources.max_vnpus or resources.id_slots)
    names = [t.name for t in resources.templates]
    combos = [c for n in range(1, limit + 1) for c in itertools.combinations_with_replacement(names, n)
              if _fits(resources, [resources.template(name) for name in c])]
    assert len(combos) > 10
    checked = 0
    for combo in combos:
        for order in set(itertools.permutations(combo)):
            assert _schedule(inventory, "npu-0-0-counters", [resources.template(name) for name in order]), order
            checked += 1
    assert checked >= len(combos)


def _full_needs(resources, device, shared_ids: bool) -> dict[str, int]:
    """What ``device`` consumes with every counter of the chip, rebuilt from its attributes."""
    totals = templates.chip_counters(resources)
    if shared_ids:
        totals.update({f"vnpu-id-{k}": 1 for k in range(resources.id_slots)})
    name = device.attributes.get("vnpuTemplate")
    if name is None:
        return totals  # the whole chip takes everything
    needs = templates.template_counters(resources, resources.template(name))
    if shared_ids:
        needs[f"vnpu-id-{device.attributes['vnpuID'] - templates.vnpu_id(device.attributes['physicalID'], 0)}"] = 1
    return needs


def _published_sets_are_safe(resources, inventory, set_name: str) -> int:
    """Every set of the chip's devices that the published counters let the scheduler allocate
    together fits the chip's full counters too; returns how many sets were checked."""
    published = {c: parse_quantity(v) for c, v in next(
        s for s in inventory.counter_sets if s.name == set_name).counters.items()}
    devices = [d for d in inventory.devices if d.consumes_counters and d.consumes_counters[0].counter_set == set_name]
    shared_ids = any(k.startswith("vnpu-id-") for k in published)
    totals = _full_needs(resources, devices[0], shared_ids)
    uses = [({c: parse_quantity(v) for c, v in d.consumes_counters[0].counters.items()},
             _full_needs(resources, d, shared_ids)) for d in devices]
    checked = 0

    def grow(start: int, used: dict, full: dict) -> None:
        nonlocal checked
        checked += 1
        assert all(full.get(c, 0) <= total for c, total in totals.items()), (set_name, full)
        for i in range(start, len(uses)):
            need, full_need = uses[i]
            after = {c: used.get(c, 0) + need.get(c, 0) for c in published}
            if all(after[c] <= published[c] for c in published):
                grow(i + 1, after, {c: full.get(c, 0) + full_need.get(c, 0) for c in totals})

    grow(0, {}, {})
    return checked


@pytest.mark.parametrize("model", ["310P3", "910B4"])
async def test_counters_left_out_never_let_a_chip_be_over_committed(tmp_path, monkeypatch, model):
    """Published counters are those the chip's devices together could exceed, plus one every device
    consumes (issue 37: a 310P3 with only vir04_3c published 8 counters a device, none of which its
    two instances could exceed, and the scheduler searched them for every claim). For every one
    and every two of the model's templates: whatever the published counters let the scheduler
    allocate together fits all of the chip's counters, and the whole chip never goes with a vNPU."""
    host = SimHost(tmp_path, chips=((0, 0, 0, 0, model),))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    resources = templates.MODELS[model]
    profile = HardVnpuProfile()
    names = [t.name for t in resources.templates]
    pruned = 0
    for chosen in [*([n] for n in names), *itertools.combinations(names, 2)]:
        ctx = attrs.evolve(host.ctx(), options={**host.options, "hard-vNPU.templates": ",".join(chosen)})
        inventory = await profile.discover(ctx)
        assert checks.inventory_problems(inventory) == []
        configured = attrs.evolve(resources, templates=tuple(t for t in resources.templates if t.name in chosen))
        assert _published_sets_are_safe(configured, inventory, "npu-0-0-counters") > len(chosen)
        pruned += len(templates.chip_counters(configured)) > len(inventory.counter_sets[0].counters)
    assert pruned > 0


def test_a_310p3_cut_only_into_vir04_3c_publishes_one_counter():
    """Two vir04_3c fill every counter of a 310P3 exactly, so none can be exceeded; ``aicore``, which
    every device consumes, keeps the whole chip apart from its vNPUs."""
    resources = templates.MODELS["310P3"]
    vir04_3c = resources.template("vir04_3c")
    needs = [templates.template_counters(resources, vir04_3c)] * 2
    assert templates.binding_counters(templates.chip_counters(resources), needs) == ("aicore",)
    # Four of them (were there IDs and room) would exceed every counter, venc's 3 too.
    assert templates.binding_counters(templates.chip_counters(resources), needs * 2) == tuple(
        templates.chip_counters(resources))
    assert templates.binding_counters({"a": 1, "b": 2}, [{"a": 1}, {"b": 1}]) == ("a", "b")  # none common: all


async def test_discover_says_which_npu_smi_it_used_and_why_it_fell_back(tmp_path, monkeypatch):
    """`ascend-dra discover --profiles hard-vNPU` printed no note at all, where the other Ascend
    profiles name the npu-smi they ran and the tier that failed (a new user's trial)."""
    host = SimHost(tmp_path, chips=((4, 0, 0, 0, "910B4"),))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    profile = HardVnpuProfile()
    await profile.discover(host.ctx())
    assert any("npu-smi" in note for note in profile.discovery_notes())
    missing = attrs.evolve(host.ctx(), npu_smi=str(tmp_path / "no-such" / "npu-smi"))
    await profile.discover(missing)
    notes = profile.discovery_notes()
    assert any(f"{tmp_path}/no-such/npu-smi" in note for note in notes), notes


def test_a_template_larger_than_the_chip_gets_no_instance():
    """A template-info template bigger than the chip got one instance with ID choices, a device
    that could never be allocated (a second review)."""
    resources = templates.MODELS["310P3"]
    huge = templates.VnpuTemplate("vir99", 4, 48 * 1024, 1, dict.fromkeys(templates.ENGINES, 0))
    bigger = attrs.evolve(resources, templates=(*resources.templates, huge))
    assert templates.max_instances(bigger, huge) == 0
    assert templates.id_choices(bigger, huge) == 0


async def test_template_info_missing_falls_back_to_the_reference_tables(tmp_path, monkeypatch):
    host = SimHost(tmp_path, chips=((0, 0, 0, 0, "910B4-1"),))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    _, inventory = await discovered(host)
    assert sorted({d.attributes.get("vnpuTemplate") for d in inventory.devices} - {None}) == [
        "vir05_1c_16g", "vir10_3c_32g"]
    # vir05_1c_16g's engines are unknown, so no engine counter could be trusted on this chip.
    assert set(inventory.counter_sets[0].counters) == {"aicore", "memory", "aicpu"}


# -- Prepare / Unprepare ----------------------------------------------------------------------------


async def test_prepare_creates_with_npu_id_and_edits_name_the_vdavinci_node(sim):
    profile, inventory = await discovered(sim)
    c = claim("uid-1", "vnpu-1-0-vir10-3c-16g-0", "vnpu-1-0-vir05-1c-8g-0")
    ctx = apply_ctx(sim, inventory, c)
    edits = profile.apply_config(None, c.results, ctx)
    assert profile.created_device_nodes(c.results, ctx) == [f"{sim.vdev}/vdavinci132", f"{sim.vdev}/vdavinci137"]
    effects = await profile.prepare_side_effects(c, c.results, ctx)
    assert [(v["npu_id"], v["chip_id"], v["vnpu_id"], v["template"]) for v in sim.vnpus()] == [
        (5, 0, 132, "vir10_3c_16g"), (5, 0, 137, "vir05_1c_8g")]
    assert [e["vnpu_id"] for e in effects["vnpus"]] == [132, 137]
    first = edits["vnpu-1-0-vir10-3c-16g-0"]
    assert first.device_nodes[0].path == "/dev/davinci132"  # as Huawei's device plugin mounts it
    assert first.device_nodes[0].host_path == f"{sim.vdev}/vdavinci132"
    assert (sim.vdev / "vdavinci132").exists()
    assert first.env[:1] == ("ASCEND_VISIBLE_DEVICES=132",) and "ASCEND_RUNTIME_OPTIONS=VIRTUAL" in first.env
    assert len(sim.ledger()) == 2

    await profile.unprepare_side_effects(effects, ctx)
    await profile.unprepare_side_effects(effects, ctx)  # idempotent
    assert sim.vnpus() == [] and sim.ledger() == []
    assert not (sim.vdev / "vdavinci132").exists()


async def test_a_claim_failing_half_way_destroys_what_it_made_and_leaves_foreign_vnpus(sim):
    profile, inventory = await discovered(sim)
    sim_run(sim, "set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", "vir05_1c_8g", "-v", "105")  # not ours
    c = claim("uid-2", "vnpu-0-0-vir10-3c-16g-0", "vnpu-0-0-vir05-1c-8g-0")
    with pytest.raises(VnpuError, match=r"^device vnpu-0-0-vir05-1c-8g-0: vNPU 105 \(vir05_1c_8g\) on NPU 4 chip 0: "
                                        r"a vNPU with that ID already exists \(template vir05_1c_8g\) and was not "
                                        "created by ascend-dra"):
        await profile.prepare_side_effects(c, c.results, apply_ctx(sim, inventory, c))
    assert [v["vnpu_id"] for v in sim.vnpus()] == [105]
    assert sim.ledger() == []


async def test_admin_access_creates_nothing_and_gets_the_chip(sim):
    profile, inventory = await discovered(sim)
    c = claim("uid-3", "vnpu-0-0-vir05-1c-8g-0", admin=True)
    ctx = apply_ctx(sim, inventory, c)
    edits = profile.apply_config(None, c.results, ctx)
    assert edits["vnpu-0-0-vir05-1c-8g-0"].device_nodes[0].path == "/dev/davinci0"
    assert profile.created_device_nodes(c.results, ctx) == []
    assert await profile.prepare_side_effects(c, c.results, ctx) == {"vnpus": []}
    assert sim.vnpus() == []


async def test_with_cfg_recover_off_vnpus_die_with_a_reboot_and_a_replayed_prepare_makes_them_again(sim):
    profile, inventory = await discovered(sim)
    c = claim("uid-4", "vnpu-0-0-vir05-1c-8g-1")
    ctx = apply_ctx(sim, inventory, c)
    old = await profile.prepare_side_effects(c, c.results, ctx)
    sim_run(sim, "set", "-t", "vnpu-cfg-recover", "-d", "0")  # not the default: the device forgets its vNPUs
    sim.reboot("boot-2")
    assert sim.vnpus() == []
    # A foreign vNPU took another ID after the reboot; unpreparing the old record must not touch it.
    sim_run(sim, "set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", "vir05_1c_8g", "-v", "107")
    await profile.unprepare_side_effects(old, ctx)
    assert [v["vnpu_id"] for v in sim.vnpus()] == [107]
    new = await profile.prepare_side_effects(c, c.results, ctx)
    assert [v["vnpu_id"] for v in sim.vnpus()] == [107, 106]  # 107 theirs, 106 ours again
    assert new["vnpus"][0]["boot_id"] == "boot-2"


async def test_unpreparing_a_record_of_an_earlier_boot_destroys_the_vnpu_a_replay_made_in_this_boot(sim):
    """A replay after a reboot made the vNPU again (cfg-recover off), then failed or was killed before
    the record took the new entry: the Unprepare of the old record destroyed nothing (its entry's boot
    was over) and dropped the new ledger entry, leaving a vNPU no ledger named (an audit against
    NVIDIA's dra-driver-nvidia-gpu#951)."""
    profile, inventory = await discovered(sim)
    c = claim("uid-15", "vnpu-0-0-vir05-1c-8g-1")
    ctx = apply_ctx(sim, inventory, c)
    old = await profile.prepare_side_effects(c, c.results, ctx)
    sim_run(sim, "set", "-t", "vnpu-cfg-recover", "-d", "0")
    sim.reboot("boot-2")
    await profile.prepare_side_effects(c, c.results, ctx)  # the replay; its result never reaches the record
    assert [v["vnpu_id"] for v in sim.vnpus()] == [106]
    await profile.unprepare_side_effects(old, ctx)
    assert sim.vnpus() == [] and sim.ledger() == []


async def test_vnpus_outlive_a_reboot_by_default_and_a_replayed_prepare_takes_them_back(sim):
    # npu-smi set -t vnpu-cfg-recover is Enable by default: the device keeps its vNPUs' configuration
    # through a restart (MindCluster "Creating vNPUs", https://www.hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/cpaug_0011.html).
    profile, inventory = await discovered(sim)
    c = claim("uid-11", "vnpu-0-0-vir05-1c-8g-1")
    ctx = apply_ctx(sim, inventory, c)
    await profile.prepare_side_effects(c, c.results, ctx)
    sim.reboot("boot-2")
    assert [v["vnpu_id"] for v in sim.vnpus()] == [106]
    new = await profile.prepare_side_effects(c, c.results, ctx)  # the kubelet's replayed Prepare
    assert [v["vnpu_id"] for v in sim.vnpus()] == [106] and new["vnpus"][0]["boot_id"] == "boot-2"
    await profile.unprepare_side_effects(new, ctx)
    assert sim.vnpus() == [] and sim.ledger() == []


async def test_unpreparing_a_record_of_an_earlier_boot_destroys_the_vnpu_the_device_restored(sim):
    profile, inventory = await discovered(sim)
    c = claim("uid-12", "vnpu-0-0-vir05-1c-8g-1")
    ctx = apply_ctx(sim, inventory, c)
    old = await profile.prepare_side_effects(c, c.results, ctx)
    sim.reboot("boot-2")
    await profile.unprepare_side_effects(old, ctx)
    assert sim.vnpus() == [] and sim.ledger() == []


async def test_startup_repair_after_a_reboot_destroys_restored_orphans_and_keeps_the_rest(sim):
    profile, inventory = await discovered(sim)
    kept, orphan = claim("uid-13", "vnpu-0-0-vir05-1c-8g-0"), claim("uid-14", "vnpu-0-0-vir05-1c-8g-1")
    kept_effects = await profile.prepare_side_effects(kept, kept.results, apply_ctx(sim, inventory, kept))
    await profile.prepare_side_effects(orphan, orphan.results, apply_ctx(sim, inventory, orphan))
    sim.reboot("boot-2")
    await profile.reconcile_side_effects([kept_effects], sim.ctx())
    assert [v["vnpu_id"] for v in sim.vnpus()] == [105]
    assert sim.ledger() == ["vnpu-4-0-105.json"]


async def test_when_cfg_recover_cannot_be_read_its_documented_default_is_assumed(sim, monkeypatch):
    async def fails(self):
        raise NpuSmiFailed("npu-smi info -t vnpu-cfg-recover", 2, "not supported")

    monkeypatch.setattr(NpuSmi, "vnpu_cfg_recover", fails)
    assert await HardVnpuProfile().ops(sim.ctx()).recovers() is True


async def test_startup_repair_destroys_only_ledger_orphans(sim):
    profile, inventory = await discovered(sim)
    kept, orphan = claim("uid-5", "vnpu-0-0-vir05-1c-8g-0"), claim("uid-6", "vnpu-0-0-vir05-1c-8g-1")
    kept_effects = await profile.prepare_side_effects(kept, kept.results, apply_ctx(sim, inventory, kept))
    await profile.prepare_side_effects(orphan, orphan.results, apply_ctx(sim, inventory, orphan))
    sim_run(sim, "set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", "vir05_1c_8g", "-v", "108")  # foreign
    await profile.reconcile_side_effects([kept_effects], sim.ctx())
    assert sorted(v["vnpu_id"] for v in sim.vnpus()) == [105, 108]
    assert sim.ledger() == ["vnpu-4-0-105.json"]


async def test_second_chip_of_a_two_chip_card_is_cut_with_its_chip_id(tmp_path, monkeypatch):
    # A 310P Duo card: one NPU ID, chips 0 and 1 (docs/ascend-hardware.md#chip-families,
    # docs/ascend-hardware.md#the-ids).
    host = SimHost(tmp_path, chips=((1, 0, 0, 0, "310P3"), (1, 1, 1, 1, "310P3")))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    profile, inventory = await discovered(host)
    c = claim("uid-7", "vnpu-1-1-vir04-0")
    effects = await profile.prepare_side_effects(c, c.results, apply_ctx(host, inventory, c))
    assert [(v["npu_id"], v["chip_id"], v["template"]) for v in host.vnpus()] == [(1, 1, "vir04")]
    assert effects["vnpus"][0]["vnpu_id"] == inventory.device("vnpu-1-1-vir04-0").attributes["vnpuID"]
    assert 116 <= effects["vnpus"][0]["vnpu_id"] < 124  # physical ID 1: 1 x 16 + 100 + k, k < 8


async def test_a_whole_chip_is_refused_while_foreign_vnpus_sit_on_it(sim):
    profile, inventory = await discovered(sim)
    c = claim("uid-8", "npu-0-0")
    assert await profile.prepare_side_effects(c, c.results, apply_ctx(sim, inventory, c)) == {"vnpus": []}
    sim_run(sim, "set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", "vir05_1c_8g", "-v", "110")
    with pytest.raises(VnpuError, match=r"^device npu-0-0: NPU 4 chip 0 holds vNPUs 110 \(vir05_1c_8g\) that "
                                        "ascend-dra did not make for this claim; a whole chip is given out only "
                                        "without vNPUs$"):
        await profile.prepare_side_effects(c, c.results, apply_ctx(sim, inventory, c))
    assert [v["vnpu_id"] for v in sim.vnpus()] == [110]


@pytest.mark.parametrize(("side_effects", "message"), [
    ([], "hard-vNPU side effects must be {'vnpus': [...]}, got []"),
    ({"vnpus": [{"npu_id": "4"}]}, "hard-vNPU side effects: vNPU record field npu_id: expected int, got '4'"),
    ({"vnpus": [{"npu_id": 4, "chip_id": 0, "vnpu_id": 100, "template": "vir01", "claim_uid": "u",
                 "device": "d"}]}, "hard-vNPU side effects: vNPU record field boot_id: expected str, got None"),
], ids=["not an object", "NPU ID as a string", "boot id missing"])
async def test_a_record_that_does_not_decode_fails_unprepare_naming_the_field(sim, side_effects, message):
    profile, inventory = await discovered(sim)
    with pytest.raises(VnpuError) as raised:
        await profile.unprepare_side_effects(side_effects, apply_ctx(sim, inventory, claim("u")))
    assert str(raised.value) == message


async def test_an_interrupted_prepare_rolled_back_with_none_destroys_what_the_ledger_names_for_the_claim(sim):
    profile, inventory = await discovered(sim)
    mine, other = claim("uid-9", "vnpu-0-0-vir05-1c-8g-0"), claim("uid-10", "vnpu-0-0-vir05-1c-8g-1")
    await profile.prepare_side_effects(mine, mine.results, apply_ctx(sim, inventory, mine))
    await profile.prepare_side_effects(other, other.results, apply_ctx(sim, inventory, other))
    await profile.unprepare_side_effects(None, apply_ctx(sim, inventory, mine))
    await profile.unprepare_side_effects(None, apply_ctx(sim, inventory, mine))  # idempotent
    assert [v["vnpu_id"] for v in sim.vnpus()] == [106]
    assert sim.ledger() == ["vnpu-4-0-106.json"]


def test_a_template_with_an_na_engine_drops_the_engine_counters_of_its_chip():
    text = (FIXTURES / "910B4_A2-inference_info_-t_template-info.txt").read_text()
    text = text.replace("|vir05_1c_8g         5         8         1         2 ",
                        "|vir05_1c_8g         5         8         1         NA")
    merged = templates.from_template_info(templates.MODELS["910B4"], tables.parse_template_info(text))
    assert merged.template("vir05_1c_8g").engines is None
    assert templates.chip_counters(merged) == {"aicore": 20, "memory": 32768, "aicpu": 7}


def test_the_boot_id_file_defaults_to_the_daemons(tmp_path: Path) -> None:
    from ascend_dra.profiles.base import ProfileContext

    ctx = ProfileContext(node_name="n", driver_name="d", boot_id_file=tmp_path / "boot_id", state_dir=tmp_path)
    assert HardVnpuProfile().ops(ctx).boot_id_file == tmp_path / "boot_id"
    overridden = ProfileContext(node_name="n", driver_name="d", boot_id_file=tmp_path / "boot_id",
                                state_dir=tmp_path, options={"hard-vNPU.boot-id-file": str(tmp_path / "other")})
    assert HardVnpuProfile().ops(overridden).boot_id_file == tmp_path / "other"


async def test_the_templates_option_publishes_only_the_configured_templates(tmp_path, monkeypatch):
    """A 310P3 publishes 39 devices with every template (the scale bed's hundred nodes: 31,200 on
    shared counters, which the scheduler searched for every claim); ``hard-vNPU.templates=vir04``
    publishes the chip and its one vir04 instance (two would need 8 AICPUs of 7), vir04_3c the chip
    and two, each with a vNPU ID of its own (no shared IDs)."""
    chips = tuple((i, 0, i, i, "310P3") for i in range(2))
    host = SimHost(tmp_path, chips=chips)
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
    profile = HardVnpuProfile()
    ctx = attrs.evolve(host.ctx(), options={**host.options, "hard-vNPU.templates": "vir04_3c, vir10_3c_16g"})
    inventory = await profile.discover(ctx)
    assert checks.inventory_problems(inventory) == []
    assert sorted(d.name for d in inventory.devices if d.name == "npu-0-0" or d.name.startswith("vnpu-0-0-")) == [
        "npu-0-0", "vnpu-0-0-vir04-3c-0", "vnpu-0-0-vir04-3c-1"]
    assert len(inventory.devices) == 2 * 3
    assert not any(k.startswith("vnpu-id-") for s in inventory.counter_sets for k in s.counters)
    # vir10_3c_16g is a 910B4 template: skipped here, with a warning naming the 310P3's templates.
    one = attrs.evolve(host.ctx(), options={**host.options, "hard-vNPU.templates": "vir04"})
    assert sorted(d.name for d in (await profile.discover(one)).devices) == [
        "npu-0-0", "npu-1-0", "vnpu-0-0-vir04-0", "vnpu-1-0-vir04-0"]

    only_foreign = attrs.evolve(host.ctx(), options={**host.options, "hard-vNPU.templates": "vir10_3c_16g"})
    assert (await profile.discover(only_foreign)).devices == ()
    assert [d.reason for d in profile._dropped] == [
        "none of the configured templates (vir10_3c_16g) is one of chip model 310P3's"] * 2


@pytest.mark.parametrize(("value", "problem"), [
    ("", "is empty"),
    (" , ", "is empty"),
    ("vir04,VIR02", "'vir04,VIR02' holds 'VIR02', not a template name (lower-case letters, digits, _); templates "
                    "of the known chip models: vir01, vir02, "),
    ("vir04;vir02", "holds 'vir04;vir02', not a template name"),
])
def test_a_bad_templates_option_is_refused_naming_the_value_and_the_known_templates(value, problem):
    option = HardVnpuProfile.profile_options["templates"]
    message = option.problem(value)
    assert message is not None and problem in message, message
    assert option.problem("vir04,vir02_1c") is None
    assert templates.parse_template_names(" vir04_3c  vir02,vir01 ") == ("vir04_3c", "vir02", "vir01")

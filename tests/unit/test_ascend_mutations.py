"""Every npu-smi parser, fed the real samples of ``tests/fixtures/npu-smi/`` mutated at random (lines
dropped, doubled, spliced, swapped; outputs repeated or cut; cells cut and widened; numbers made huge,
negative or other scripts' digits), gives either its documented error or values within the real
ranges of docs/ascend-hardware.md#value-ranges (written out again here, independently of the code).

The documented error is an ``NpuSmiParseError`` naming the command and either a line of the output
(its number and its text) or, with line 0, the output as a whole; ``version.info``'s is a
``VersionInfoError``. Anything else (a ValueError, an IndexError) would escape every fallback.

Examples per parser: the ``npu-smi-mutations`` hypothesis profile (150, derandomized, so CI runs the
same inputs every time; 100 of the npu-smi tier). ``NPU_SMI_MUTATIONS=thorough`` selects
``npu-smi-mutations-thorough`` (20,000 per parser, random; 2,000 of the tier) for a long run by hand.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_dra.profiles.ascend.discovery.npusmi_tier import NpuSmiAnswer, discover_npu_smi
from ascend_dra.profiles.ascend.npusmi import keyvalue, readings, remap, tables, topo, vnpu_tables
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError, NpuSmiFailed, NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi
from ascend_dra.profiles.ascend.vnpucore.versioninfo import VersionInfoError, parse_version_info
from tests.unit.test_ascend_discovery import ANSWERS_910A, tree_910a
from tests.unit.test_ascend_support import FIXTURES, fixture, parts

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("npu-smi-mutations", max_examples=150, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_HEALTH)
settings.register_profile("npu-smi-mutations-thorough", max_examples=20_000, database=None, deadline=None,
                          suppress_health_check=_HEALTH)
THOROUGH = os.environ.get("NPU_SMI_MUTATIONS") == "thorough"
PROFILE = settings.get_profile("npu-smi-mutations-thorough" if THOROUGH else "npu-smi-mutations")


# -- the parsers and their samples ----------------------------------------------------------------------


@attrs.frozen
class Parser:
    """One parser: ``parse(text, command)``, the samples it reads, and the error it documents."""

    name: str
    parse: Callable[[str, str], object]
    samples: tuple[str, ...]
    error: type[Exception] = NpuSmiParseError


def named(*patterns: str) -> tuple[str, ...]:
    """The fixture files whose names match one of ``patterns`` (globs), sorted."""
    return tuple(sorted({p.name for pattern in patterns for p in FIXTURES.glob(pattern)}))


#: Fixtures of several outputs (SOURCES.md): the parts that are the named command's (part 3 of the
#: info-vnpu files is a create-vnpu answer).
PARTS = {"310P3_info_host_and_hard-vnpu_in_container_drv22.0.4.txt": slice(0, 2),
         "910B4-1_64G_info_-t_info-vnpu_empty_and_2vnpus.txt": slice(0, 2),
         "910B4_A2-inference_info_-t_info-vnpu_empty_and_2vnpus.txt": slice(0, 2)}


def texts(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(part for name in names for part in (parts(name)[PARTS[name]] if name in PARTS else [fixture(name)]))


INFO = tuple(p.name for p in sorted(FIXTURES.glob("*.txt")) if re.search(r"\|\s*npu-smi\s.*Version:", p.read_text()))
PHYID = {name: int(re.search(r"-p_(\d+)", name).group(1)) for name in named("*phyid-remap*")}  # type: ignore[union-attr]
SAMPLES: dict[str, tuple[str, ...]] = {
    "info": INFO,
    "info -m": named("*_info_-m_*"),
    "info -l": named("*_info_-l*"),
    "info -h": named("npu-smi_info_-h_*"),
    "board -i": named("*_-t_board_-i.txt"),
    "board -i -c": named("*_-t_board_-i_*-c*"),
    "device-share": named("*device-share*"),
    "memory": named("*_-t_memory*"),
    "usages": named("*_-t_usages*"),
    "common": named("*_-t_common*"),
    "health": named("*_-t_health*"),
    "ecc (key/value)": named("*_-t_ecc*"),
    "topo": named("*_-t_topo*"),
    "phyid-remap": tuple(PHYID),
    "template-info": named("*template-info*"),
    "info-vnpu": named("*info-vnpu*"),
}
#: Files of the folder that are no npu-smi output.
NOT_NPU_SMI = {"910B1_dev_layout.txt"}


def remap_of(name: str) -> Callable[[str, str], object]:
    return lambda text, command: remap.parse_phyid_remap(text, physical_id=PHYID[name], command=command)


#: The parsers that take ``(text, *, command)``, by the sample set they read.
READERS: Mapping[str, Callable[..., object]] = {
    "info": tables.parse_info, "info -m": tables.parse_mapping, "info -l": keyvalue.parse_list,
    "info -h": tables.parse_help_types, "board -i": keyvalue.parse_board, "board -i -c": keyvalue.parse_chip_board,
    "device-share": keyvalue.parse_device_share, "memory": readings.parse_memory, "usages": readings.parse_usages,
    "common": readings.parse_common, "health": readings.parse_health, "ecc (key/value)": keyvalue.parse_key_values,
    "topo": topo.parse_topo, "template-info": vnpu_tables.parse_template_info, "info-vnpu": vnpu_tables.parse_vnpu_info,
}


def reader(parse: Callable[..., object]) -> Callable[[str, str], object]:
    return lambda text, command: parse(text, command=command)


PARSERS = [
    *[Parser(name, reader(parse), texts(SAMPLES[name])) for name, parse in READERS.items()],
    *[Parser(f"phyid-remap -p {PHYID[name]} ({name})", remap_of(name), (fixture(name),))
      for name in SAMPLES["phyid-remap"]],
    # No published sample: the line MindCluster's "Creating vNPUs" page prints (keyvalue.parse_vnpu_cfg_recover).
    Parser("vnpu-cfg-recover", reader(keyvalue.parse_vnpu_cfg_recover),
           ("\tVNPU config recover mode       : Enable\n", "VNPU config recover mode : Disable\n")),
    # version.info (docs/ascend-hardware.md#driver-paths): no npu-smi output, and its own error.
    Parser("version.info", lambda t, c: parse_version_info(t),
           ("Version=25.5.1\n", "Version=24.1.rc1.b030\npackage_version=24.1.rc1.b030\n", "package_version=23.0.rc3\n"),
           VersionInfoError),
]


def test_every_sample_is_mutated_for_some_parser() -> None:
    used = {name for names in SAMPLES.values() for name in names}
    assert all(SAMPLES.values())
    assert sorted(p.name for p in FIXTURES.glob("*.txt") if p.name not in used) == sorted(NOT_NPU_SMI)


# -- the real ranges (docs/ascend-hardware.md#value-ranges), written out independently of the code -------------

MIB, GIB = (0, 131072), (0, 128)
RANGES: Mapping[str, tuple[float, float]] = {
    "npu_id": (0, 2**31 - 1), "chip_id": (0, 5), "chip_position_id": (0, 5), "chip_count": (0, 4),
    "device": (0, 128), "logic_id": (0, 128), "phy_id": (0, 128), "physical_id": (0, 128), "slot_id": (0, 128),
    "total_count": (0, 129),
    "temperature_c": (-55, 150), "hbm_temperature_c": (-55, 150), "power_w": (0, 2000),
    "hugepages_used": (0, 65536), "hugepages_total": (0, 65536),
    "aicore_percent": (0, 100), "npu_util_percent": (0, 100), "memory_usage_percent": (0, 100),
    "hbm_usage_percent": (0, 100), "aicore_usage_percent": (0, 100),
    "memory_used_mib": MIB, "memory_total_mib": MIB, "hbm_used_mib": MIB, "hbm_total_mib": MIB, "memory_mib": MIB,
    "ddr_capacity_mib": MIB, "hbm_capacity_mib": MIB,
    "ddr_clock_mhz": (0, 20000), "hbm_clock_mhz": (0, 20000), "aicore_freq_mhz": (0, 20000),
    "aicore_cur_freq_mhz": (0, 20000),
    "aicore_count": (1, 32), "aicore": (1, 32), "memory_gib": GIB, "aicpu": (0, 14),
    "vpc": (0, 24), "venc": (0, 24), "jpegd": (0, 24), "pngd": (0, 24), "vdec": (0, 24), "jpege": (0, 24),
    "vnpu_id": (100, 100 + 16 * 128 + 15), "vgroup_id": (0, 15), "status": (0, 1), "total": (0, 16),
    "pid": (1, 2**22), "pid_in_container": (1, 2**22), "major": (0, 999), "minor": (0, 999),
}
RESOURCES = {"AICORE": (0, 32), "Memory": GIB, "AICPU": (0, 14)}  # the others: media engines, 0..24
PCI_ADDRESS = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
PAIRS = [("memory_used_mib", "memory_total_mib"), ("hbm_used_mib", "hbm_total_mib"),
         ("hugepages_used", "hugepages_total")]


def within(path: str, value: float, bounds: tuple[float, float]) -> None:
    assert bounds[0] <= value <= bounds[1], f"{path} = {value} is outside {bounds[0]}..{bounds[1]}"


def unique(path: str, keys: list[object]) -> None:
    assert len(set(keys)) == len(keys), f"{path}: printed twice among {keys}"


def check(value: object, lines: list[str], path: str = "result") -> None:
    """Every number in ``value`` within its real range, every PCI address one, every line number a
    line of the output, and what names one thing (a chip, a label, a vNPU) not read twice."""
    if isinstance(value, tables.InfoTable):
        unique(f"{path}.chips", [(c.npu_id, c.chip_id) for c in value.chips])
        for line_no, line in value.skipped:
            assert lines[line_no - 1] == line
    elif isinstance(value, tables.IncompleteChip):
        assert lines[value.line_no - 1] == value.line
    elif isinstance(value, tuple) and value and isinstance(value[0], tables.MappingRow):
        unique(f"{path} rows", [(r.npu_id, r.chip_id) for r in value])
        unique(f"{path} logic IDs", [r.logic_id for r in value if r.logic_id is not None])
    elif isinstance(value, topo.Topology):
        unique(f"{path}.ids", list(value.ids))
        unique(f"{path}.nics", list(value.nics))
        for n in value.ids:
            within(f"{path}.ids", n, RANGES["npu_id" if value.label_kind == topo.LABEL_NPU else "physical_id"])
        for n in value.nics:
            within(f"{path}.nics", n, (0, 3))
        return
    elif isinstance(value, vnpu_tables.VnpuInfo):
        for name, (free, total) in value.resources.items():
            for side in (free, total):
                if side is not None:
                    within(f"{path}.resources[{name}]", side, RESOURCES.get(name, (0, 24)))
            assert free is None or total is None or free <= total, f"{path}.resources[{name}]: {free}/{total}"
        unique(f"{path}.vnpus", [v.vnpu_id for v in value.vnpus])
    elif isinstance(value, readings.ChipUsages):
        for name, rate in value.rates.items():
            if rate is not None:
                within(f"{path}.rates[{name}]", rate, (0, 100))
    elif isinstance(value, keyvalue.KeyValueBlock):
        unique(f"{path} keys", [k for k, *_ in value.entries])
        for _, _, line_no, line in value.entries:
            assert lines[line_no - 1] == line
        return
    if attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            item, where = getattr(value, field.name), f"{path}.{field.name}"
            if isinstance(item, (int, float)) and not isinstance(item, bool) and field.name != "line_no":
                assert field.name in RANGES, f"{where}: a number this test knows no range for"
                within(where, item, RANGES[field.name])
            elif field.name in ("bus_id", "pcie_bus_info") and item is not None:
                assert PCI_ADDRESS.fullmatch(item), f"{where} = {item!r}"
            else:
                check(item, lines, where)
        for used, total in PAIRS:
            if hasattr(value, used) and None not in (getattr(value, used), getattr(value, total)):
                assert getattr(value, used) <= getattr(value, total), f"{path}: {used} over {total}"
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            check(item, lines, f"{path}[{i}]")


# -- mutations --------------------------------------------------------------------------------------------

NUMBERS = st.sampled_from([
    "-1", "-3", "0", "00", "+7", "8255", "-8255", "129", "2147483648", "9223372036854775807", "9" * 5000,
    "\uff11", "\u0664", "\uff13\uff12", "\u00b2", "1.5", "1e3", "0x10", "NA", "-", "",
]) | st.integers(-10**6, 10**12).map(str)
WORDS = st.sampled_from([
    "../../../..", "0000:xx:00.0", "0000:C1:00.0", "NA", "-", "|", ":", "/", " : ", "Chip ID", "NPU ID",
    "| npu-smi 1.0 Version: 1.0 |", "\u2028", "\x00", "X", "HCCS",
]) | st.text(max_size=6)


def replaced(lines: list[str], i: int, line: str) -> list[str]:
    return [*lines[:i], line, *lines[i + 1:]]


def pick(data: st.DataObject, items: list[str], label: str) -> int:
    return data.draw(st.integers(0, len(items) - 1), label=label)


def drop(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    i = pick(data, lines, "drop line")
    return lines[:i] + lines[i + 1:]


def double(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    i = pick(data, lines, "double line")
    return lines[:i + 1] + lines[i:]


def splice(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    """A line of any sample of this parser, put in at any place."""
    donor = data.draw(st.sampled_from(pool), label="donor").splitlines() or [""]
    line = donor[pick(data, donor, "donor line")]
    i = data.draw(st.integers(0, len(lines)), label="at")
    return [*lines[:i], line, *lines[i:]]


def swap(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    i, j = pick(data, lines, "swap"), pick(data, lines, "with")
    out = list(lines)
    out[i], out[j] = out[j], out[i]
    return out


def repeat(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    """The output printed again, after all of it or after a cut part (two outputs run together)."""
    cut = data.draw(st.integers(0, len(lines)), label="cut")
    return lines[:cut] + lines


def cut_line(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    i = pick(data, lines, "cut line")
    at = data.draw(st.integers(0, len(lines[i])), label="cut at")
    return replaced(lines, i, lines[i][:at])


def widen(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    """A run of blanks or filler put into a line: a cell widened, or one huge cell."""
    i = pick(data, lines, "widen line")
    at = data.draw(st.integers(0, len(lines[i])), label="widen at")
    fill = data.draw(st.sampled_from([" ", "x", "9", "-", "/", "\t"]), label="fill")
    width = data.draw(st.integers(1, 40) | st.just(32_000), label="width")
    return replaced(lines, i, lines[i][:at] + fill * width + lines[i][at:])


def renumber(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    """One number of a line replaced: huge, negative, another script's digits, a sentinel, a word."""
    numbered = [i for i, line in enumerate(lines) if re.search(r"[0-9]", line)]
    if not numbered:
        return lines
    i = data.draw(st.sampled_from(numbered), label="number line")
    spans = [m.span() for m in re.finditer(r"[0-9]+", lines[i])]
    start, end = data.draw(st.sampled_from(spans), label="number")
    return replaced(lines, i, lines[i][:start] + data.draw(NUMBERS, label="new number") + lines[i][end:])


def reword(data: st.DataObject, lines: list[str], pool: tuple[str, ...]) -> list[str]:
    i = pick(data, lines, "word line")
    spans = [m.span() for m in re.finditer(r"\S+", lines[i])]
    if not spans:
        return lines
    start, end = data.draw(st.sampled_from(spans), label="word")
    return replaced(lines, i, lines[i][:start] + data.draw(WORDS, label="new word") + lines[i][end:])


MUTATIONS = [drop, double, splice, swap, repeat, cut_line, widen, renumber, reword]


def mutated(data: st.DataObject, samples: tuple[str, ...]) -> str:
    """One of ``samples`` with 1-4 mutations (spliced lines come from any of them)."""
    lines = data.draw(st.sampled_from(samples), label="sample").splitlines()
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        if lines:
            lines = data.draw(st.sampled_from(MUTATIONS), label="mutation")(data, lines, samples)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("parser", PARSERS, ids=[p.name for p in PARSERS])
@settings(PROFILE)
@given(data=st.data())
def test_a_mutated_sample_gives_the_documented_error_or_values_in_real_ranges(parser: Parser,
                                                                             data: st.DataObject) -> None:
    text = mutated(data, parser.samples)
    command = f"npu-smi {parser.name}"
    try:
        result = parser.parse(text, command)
    except NpuSmiParseError as exc:
        assert parser.error is NpuSmiParseError, exc
        lines = text.splitlines()
        assert exc.command == command
        assert 0 <= exc.line_no <= len(lines)
        if exc.line_no:
            assert exc.line == lines[exc.line_no - 1]
        assert len(str(exc)) < 2000  # the message shows the start of a long line, not all of it
        return
    except VersionInfoError:
        assert parser.error is VersionInfoError
        return
    check(result, text.splitlines())


def test_the_samples_themselves_are_within_real_ranges() -> None:
    """The check above holds for every sample as published (so the property cannot pass by refusing
    everything); the one sample refused is the table whose publisher wrote ``xx`` over its Bus-Ids."""
    refused = []
    for parser in PARSERS:
        for text in parser.samples:
            try:
                check(parser.parse(text, f"npu-smi {parser.name}"), text.splitlines())
            except NpuSmiParseError as exc:
                refused.append(exc.reason)
    assert refused == ["Bus-Id '0000:xx:00.0' is not a PCI address (dddd:bb:dd.f) or NA"]


# -- discovery publishes nothing that is not there -------------------------------------------------------


class Canned(NpuSmi):
    """An npu-smi that answers from texts in memory (a subprocess per example would be slow)."""

    def __init__(self, answers: Mapping[str, str]) -> None:
        super().__init__("npu-smi")
        self.answers = answers

    async def run(self, *args: str) -> str:
        if " ".join(args) in self.answers:
            return self.answers[" ".join(args)]
        raise NpuSmiFailed(self.command_line(*args), 1, "unsupported")


@pytest.fixture(scope="module")
def host_910a(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The 8-chip 910A host of test_ascend_discovery (davinci0-7, sysfs links in bus order)."""
    return tree_910a(tmp_path_factory.mktemp("host-910a"))


@settings(PROFILE, max_examples=2_000 if THOROUGH else 100)
@given(data=st.data())
def test_the_npu_smi_tier_publishes_only_chips_that_are_there(host_910a: tuple[Path, Path],
                                                             data: st.DataObject) -> None:
    """The 910A host with one of its answers mutated: the tier fails with an npu-smi error, or each
    chip it publishes was printed in ``npu-smi info`` once, has its own existing davinci node, logic ID
    and values within real ranges, and no chip the table printed vanishes without a record."""
    dev, sys_root = host_910a
    answers = {args: fixture(name) for args, name in ANSWERS_910A.items()}
    target = data.draw(st.sampled_from(sorted(answers)), label="mutated answer")
    answers[target] = mutated(data, (answers[target],))
    try:
        answer: NpuSmiAnswer = anyio.run(lambda: discover_npu_smi(Canned(answers), dev_root=dev, sys_root=sys_root))
    except NpuSmiError:
        return  # the tier fails, and the chain falls back to the device nodes
    printed = {(c.npu_id, c.chip_id) for c in tables.parse_info(answers["info"]).chips}
    unique("published chips", [(c.npu_id, c.chip_id) for c in answer.chips])
    unique("logic IDs", [c.logic_id for c in answer.chips])
    unique("physical IDs", [c.physical_id for c in answer.chips])
    for chip in answer.chips:
        assert (chip.npu_id, chip.chip_id) in printed, chip
        assert (dev / f"davinci{chip.physical_id}").exists()
        assert chip.pci_address is None or PCI_ADDRESS.fullmatch(chip.pci_address)
        for name in ("logic_id", "memory_mib", "aicore_count"):
            if getattr(chip, name) is not None:
                within(name, getattr(chip, name), RANGES[name])
    recorded = {(d.npu_id, d.chip_id) for d in answer.dropped}
    assert printed <= {(c.npu_id, c.chip_id) for c in answer.chips} | recorded, "a chip vanished without a record"

"""A stateful simulated ``npu-smi`` for hard vNPUs: console script ``ascend-dra-npu-smi-sim``.

For tests and the local run of the ``hard-vNPU`` profile on machines without NPUs. It keeps its
state in the directory named by ``$ASCEND_NPU_SMI_SIM_DIR``:

* ``host.json`` (written by :func:`write_host`): the chips (NPU ID, chip ID, logic ID, physical
  ID, model, bus ID), optionally ``boot_id_file`` (a changed boot id = a reboot), ``dev_dir``
  (where ``vdavinci<vnpuID>`` nodes appear: character devices 1:3, like ``/dev/null``, when we may
  ``mknod``, else empty files) and ``vnpu_cfg_recover`` (the initial vnpu-cfg-recover mode);
* ``vnpus.json``: the vNPUs that exist (updated under an ``flock``, replaced atomically);
* ``vnpu-cfg-recover``: the mode ``set -t vnpu-cfg-recover -d 0|1`` last set (``0`` or ``1``).

A reboot keeps the vNPUs (and their nodes) while vnpu-cfg-recover is enabled, which is npu-smi's
default: "the device saves the vNPU configuration when it restarts; after the restart the vNPU
configuration is still valid" (MindCluster "Creating vNPUs",
https://www.hiascend.com/document/detail/en/mindcluster/730/clustersched/schedulingug/cpaug_0011.html).
Disabled, a reboot forgets every vNPU.

It answers, in the formats of the captures in ``tests/fixtures/npu-smi/``:
``info`` (the 910 layout of ``910B3_info.txt``, the 310P layout of ``310P3_info.txt``), ``info -m``
(``910B4_info_-m_with_Mcu.txt``), ``info -t board -i N [-c C]`` and ``info -t common -i N`` (driver
version, PCI device ID, die ID, AI cores: :meth:`Sim.board`, :meth:`Sim.common`),
``info -t template-info [-i N]`` (``+===+`` rule on 310P as in
``310P3_info_-t_template-info_drv22.0.4.txt``, ``|===|`` on 910B as in
``910B4_A2-inference_info_-t_template-info.txt``; only for models whose templates the reference
gives in full, so other models exercise the profile's table fallback), ``info -t info-vnpu -i N -c C``
(``910B4_A2-inference_info_-t_info-vnpu_empty_and_2vnpus.txt``), ``set -t create-vnpu -i N -c C -f T
[-v ID]`` and ``set -t destroy-vnpu -i N -c C -v ID`` (key/value ``Status``/``Message``),
``info -t vnpu-cfg-recover`` (``VNPU config recover mode : Enable``) and ``set -t vnpu-cfg-recover -d 0|1``
(``Message : The VNPU config recover mode Enable is set successfully.``; the ``Disable`` wording is ours **[U]**),
as the same mind-cluster page prints them.

Rules enforced on create (docs/ascend-hardware.md#compute-and-memory, docs/ascend-hardware.md#hard-vnpu-templates):
the template must be one of the chip's;
the vNPU ID must be ``physicalID x 16 + 100 + k`` with k below the chip's ID count and unused;
at most ``max_vnpus`` vNPUs; AI cores, memory, AICPUs and engines must fit what is free. The error
texts and exit status (1 for a rule, 2 for bad arguments) are ours **[U]**: no capture of a failing
create exists in the reference; the real tool reports them as key/value lines too. Other commands
exit 2 with ``Error: ... not supported``.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ascend_dra.profiles.ascend import chips as chips_catalogue
from ascend_dra.profiles.ascend.dcmi.api import HEALTH_STATES
from ascend_dra.profiles.ascend.hardvnpu import templates as catalogue
from ascend_dra.system.atomicfile import write_atomic

__all__ = ("ENV_DIR", "main", "write_host")

ENV_DIR = "ASCEND_NPU_SMI_SIM_DIR"
DRIVER_VERSION = "25.5.1"
#: Models whose every template the reference gives with all engine counts (docs/ascend-hardware.md#310p-templates,
#: docs/ascend-hardware.md#910b-and-a3-templates).
_TEMPLATE_INFO_MODELS = ("310P3", "910B4")


class SimError(Exception):
    """A rule refused the command: printed as ``Status``/``Message`` with exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def write_host(directory: Path, chips: Sequence[Mapping[str, Any]], *, boot_id_file: Path | None = None,
               dev_dir: Path | None = None, vnpu_cfg_recover: bool = True) -> None:
    """Write ``host.json``. Each chip: ``npu_id``, ``chip_id``, ``logic_id``, ``physical_id``,
    ``model`` (a key of :data:`.templates.MODELS` for vNPUs), optional ``bus_id``, and optional
    facts that default as :func:`chip_facts` says. The test ``libdcmi.so`` reads the same file
    (tests/dcmisim/libdcmi.c), so the simulator and DCMI describe one host.

    :param vnpu_cfg_recover: the vnpu-cfg-recover mode until ``set -t vnpu-cfg-recover`` changes it;
        enabled by default, as on a real device (vNPUs outlive a reboot).
    """
    directory.mkdir(parents=True, exist_ok=True)
    if dev_dir is not None:  # the host's device directory exists before any vNPU, as /dev does
        dev_dir.mkdir(parents=True, exist_ok=True)
    host = {"chips": [chip_facts(c) for c in chips], "driver_version": DRIVER_VERSION,
            "boot_id_file": str(boot_id_file) if boot_id_file else None,
            "dev_dir": str(dev_dir) if dev_dir else None, "vnpu_cfg_recover": vnpu_cfg_recover}
    write_atomic(directory / "host.json", json.dumps(host, indent=1).encode())


def chip_facts(chip: Mapping[str, Any]) -> dict[str, Any]:
    """``chip`` with the facts it leaves out filled in, written into ``host.json`` so that both
    readers use the same values: ``health`` ``OK`` (or a DCMI health number), ``memory_mib`` (21525
    on 310P as in ``310P3_info.txt``, else the vNPU or chip catalogue's), ``memory_kind`` (``HBM`` or
    ``DDR``, by family), ``aicore`` (catalogue), ``pci_device_id`` (by family) and ``die_id`` (made
    from the physical ID, so that it is unique on the host), and the readings (:mod:`..usage`):
    ``aicore_util`` 0 (%), ``memory_used_mib`` (1848 of DDR, 3314 of HBM; 0 when the total is
    unknown), ``temperature_c`` (37 on 310P, else 40) and ``power_w`` (None on 310P, where npu-smi
    prints ``NA``, else 95.0), and ``vnpu`` (:func:`vnpu_facts`). A fact that stays None is unknown to both."""
    model = chip["model"]
    family = chips_catalogue.family_of(model)
    resources = catalogue.resources_of(model)
    known = chips_catalogue.model_of(model)
    memory = 21525 if family is chips_catalogue.ChipFamily.ASCEND310P else (
        resources.memory_mib if resources else known.memory_mib if known else None)
    aicore = resources.aicore if resources else known.aicore if known else None
    pci = next((k for k, v in chips_catalogue.PCI_DEVICE_FAMILY.items() if v is family), None)
    p310 = family is chips_catalogue.ChipFamily.ASCEND310P
    total = chip.get("memory_mib", memory)
    return {"health": "OK", "memory_mib": memory, "aicore": aicore, "aicore_util": 0, "vnpu": vnpu_facts(model),
            "memory_used_mib": (1848 if p310 else 3314) if total else 0, "temperature_c": 37 if p310 else 40,
            "power_w": None if p310 else 95.0,
            "memory_kind": chips_catalogue.memory_kind(family).value if family else None,
            "pci_device_id": pci, "die_id": f"5A3C11D4-20B0{chip['physical_id']:04X}-4A10C8D4-14CC040A-D2102003",
            **chip}


def vnpu_facts(model: str) -> dict[str, Any] | None:
    """What the test ``libdcmi.so`` needs to make vNPUs by the simulator's rules, from the template
    catalogue (:func:`.templates.resources_of`): ``slots`` (vNPU IDs), ``max`` (vNPUs at once, None:
    the slots), ``total`` and one row per template, each ``[AI cores, memory MiB, AICPUs, *ENGINES]``
    (None where the catalogue does not say); None for a model without templates."""
    resources = catalogue.resources_of(model)
    if resources is None:
        return None

    def row(aicore: int, memory_mib: int, aicpu: int | None, engines: Mapping[str, int] | None) -> list[int | None]:
        return [aicore, memory_mib, aicpu, *((engines or {}).get(e) if engines else None for e in catalogue.ENGINES)]

    return {"slots": resources.id_slots, "max": resources.max_vnpus,
            "total": row(resources.aicore, resources.memory_mib, resources.aicpu, resources.engines),
            "templates": [[t.name, *row(t.aicore, t.memory_mib, t.aicpu, t.engines)] for t in resources.templates]}


def _health(chip: Mapping[str, Any]) -> str | None:
    """The chip's health as npu-smi prints it; None for a DCMI number npu-smi cannot name (it then
    prints no first row, docs/ascend-hardware.md#npu-smi-commands)."""
    value = chip.get("health", "OK")
    if isinstance(value, int):
        return HEALTH_STATES[value] if 0 <= value < len(HEALTH_STATES) else None
    return str(value)


def _rule(char: str, widths: Sequence[int]) -> str:
    return "+" + "+".join(char * w for w in widths) + "+"


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "|" + "|".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + "|"


def _kv(key: str, value: object) -> str:
    return f"\t{key:<30} : {value}"


class Sim:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.host = json.loads((directory / "host.json").read_text())
        self.chips: list[dict[str, Any]] = self.host["chips"]

    # -- state ------------------------------------------------------------------------------------

    def _boot_id(self) -> str:
        path = self.host.get("boot_id_file")
        return Path(path).read_text().strip() if path else ""

    def recovers(self) -> bool:
        """The vnpu-cfg-recover mode: the last ``set -t vnpu-cfg-recover``, else ``host.json``'s, else
        enabled (npu-smi's default)."""
        path = self.dir / "vnpu-cfg-recover"
        if path.exists():
            return path.read_text().strip() == "1"
        return bool(self.host.get("vnpu_cfg_recover", True))

    def load(self) -> list[dict[str, Any]]:
        """The vNPUs that exist now. After a reboot, those of the last boot while vnpu-cfg-recover is
        enabled (the device restores them and their nodes), none while it is disabled."""
        path = self.dir / "vnpus.json"
        state = json.loads(path.read_text()) if path.exists() else {"boot_id": self._boot_id(), "vnpus": []}
        if state.get("boot_id") != self._boot_id():
            restored = self.recovers()
            for v in state["vnpus"]:
                self._node(v["vnpu_id"], create=restored)
            return list(state["vnpus"]) if restored else []
        return list(state["vnpus"])

    def save(self, vnpus: list[dict[str, Any]]) -> None:
        write_atomic(self.dir / "vnpus.json", json.dumps({"boot_id": self._boot_id(), "vnpus": vnpus}).encode())

    def _node(self, vnpu_id: int, *, create: bool) -> None:
        if not self.host.get("dev_dir"):
            return
        path = Path(self.host["dev_dir"]) / f"vdavinci{vnpu_id}"
        if not create:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except FileExistsError:
            pass
        except PermissionError:
            path.touch()

    def chip(self, npu_id: int, chip_id: int) -> dict[str, Any]:
        for c in self.chips:
            if c["npu_id"] == npu_id and c["chip_id"] == chip_id:
                return c
        raise SimError(f"The device does not exist: NPU {npu_id} chip {chip_id}")

    @staticmethod
    def resources(chip: Mapping[str, Any]) -> catalogue.ChipResources:
        found = catalogue.resources_of(chip["model"])
        if found is None:
            raise SimError(f"This device does not support vnpu: {chip['model']}")
        return found

    # -- commands ---------------------------------------------------------------------------------

    def info(self) -> str:
        """``npu-smi info``: the 310P layout (``Device`` column) when every chip is a 310P, else the
        910 layout (``HBM-Usage(MB)`` column)."""
        p310 = all(c["model"].startswith("310P") for c in self.chips)
        widths = (31, 17, 54) if p310 else (27, 15, 52)
        total = sum(widths) + 2
        gap = " " * (35 if p310 else 12)
        head = ((" NPU     Name", " Health", " Power(W)     Temp(C)           Hugepages-Usage(page)"),
                (" Chip    Device", " Bus-Id", " AICore(%)    Memory-Usage(MB)")) if p310 else \
               ((" NPU   Name", " Health", " Power(W)    Temp(C)           Hugepages-Usage(page)"),
                (" Chip", " Bus-Id", " AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"))
        rule = _rule("=", widths)
        version = self.host.get("driver_version", DRIVER_VERSION)
        lines = ["+" + "-" * total + "+", "|" + f" npu-smi {version}{gap}Version: {version}".ljust(total)
                 + "|", _rule("-", widths), _row(head[0], widths), _row(head[1], widths), rule]
        for c in self.chips:
            bus = f" {c.get('bus_id') or 'NA'}"
            health = _health(c)
            power = "NA" if c.get("power_w") is None else f"{c['power_w']:.1f}"
            temp, util = c.get("temperature_c", 40), c.get("aicore_util", 0)
            if p310:
                if health is not None:
                    lines.append(_row((f" {c['npu_id']:<8}{c['model']}", f" {health}",
                                       f" {power:<13}{temp:<18}0     / 0"), widths))
                memory = c.get("memory_mib", 21525) or 0  # None: DCMI gave no total, npu-smi prints 0
                used = c.get("memory_used_mib", 1848) if memory else 0
                lines.append(_row((f" {c['chip_id']:<8}{c['logic_id']}", bus, f" {util:<13}{used} / {memory}"),
                                  widths))
            else:
                memory = c["memory_mib"] if "memory_mib" in c else self.resources(c).memory_mib
                if health is not None:
                    lines.append(_row((f" {c['npu_id']:<6}{c['model']}", f" {health}",
                                       f" {power:<12}{temp:<18}0    / 0"), widths))
                used = c.get("memory_used_mib", 3314) if memory else 0
                lines.append(_row((f" {c['chip_id']}", bus, f" {util:<12}0    / 0          {used} / {memory or 0}"),
                                  widths))
            lines.append(rule)
        return "\n".join(lines) + "\n"

    def mapping(self) -> str:
        lines = [f"\t{'NPU ID':<30} {'Chip ID':<30} {'Chip Logic ID':<30} {'Chip Name':<30}"]
        for c in self.chips:
            lines.append(f"\t{c['npu_id']:<30} {c['chip_id']:<30} {c['logic_id']:<30} Ascend {c['model']}")
        return "\n".join(lines) + "\n"

    def _card(self, npu_id: int) -> list[dict[str, Any]]:
        found = sorted((c for c in self.chips if c["npu_id"] == npu_id), key=lambda c: c["chip_id"])
        if not found:
            raise SimError(f"The device does not exist: NPU {npu_id}")
        return found

    def board(self, npu_id: int, chip_id: int | None) -> str:
        """``info -t board -i N`` (``910A_info_-t_board_-i.txt``) or, with ``-c``, the chip's board
        (``910A_info_-t_board_-i_-c_VDieID.txt``; ``Die ID`` on 310P, ``310P_info_-t_board_-i_-c_DieID.txt``)."""
        card = self._card(npu_id)
        if chip_id is None:
            pci = card[0].get("pci_device_id")
            return "\n".join((_kv("NPU ID", npu_id), _kv("Software Version", self.host.get("driver_version", "NA")),
                              _kv("PCIe Bus Info", card[0].get("bus_id") or "NA"), _kv("PCI Vendor ID", "0x19e5"),
                              _kv("PCI Device ID", f"0x{int(pci, 16):04X}" if pci else "NA"),
                              _kv("Chip Count", len(card)))) + "\n"
        c = self.chip(npu_id, chip_id)
        lines = [_kv("NPU ID", npu_id), _kv("Chip ID", chip_id), _kv("Chip Type", "Ascend"),
                 _kv("Chip Name", c["model"]), _kv("Chip Version", "V1")]
        if c.get("die_id"):
            key = "Die ID" if c["model"].startswith("310P") else "VDie ID"
            lines.append(_kv(key, c["die_id"].replace("-", " ")))
        lines.append(_kv("PCIe Bus Info", c.get("bus_id") or "NA"))
        return "\n".join(lines) + "\n"

    def common(self, npu_id: int) -> str:
        """``info -t common -i N`` (``910B1_info_-t_common_-i_1.txt``); no ``Aicore Count`` on 310P
        (``310P-duo_info_-t_common_-i_1_2chips.txt``) nor where the host does not know it."""
        card = self._card(npu_id)
        blocks = ["\n".join((_kv("NPU ID", npu_id), _kv("Chip Count", len(card))))]
        for c in card:
            block = [_kv("Chip ID", c["chip_id"]), _kv("Aicore Usage Rate(%)", c.get("aicore_util", 0))]
            if c.get("aicore") is not None and not c["model"].startswith("310P"):
                block.append(_kv("Aicore Count", c["aicore"]))
            blocks.append("\n".join((*block, _kv("Temperature(C)", c.get("temperature_c", 40)))))
        return "\n\n".join(blocks) + "\n"

    def template_info(self, npu_id: int | None) -> str:
        chips = [c for c in self.chips if npu_id is None or c["npu_id"] == npu_id]
        if not chips:
            raise SimError(f"The device does not exist: NPU {npu_id}")
        model = chips[0]["model"]
        if model not in _TEMPLATE_INFO_MODELS:
            raise SimError(f"This device does not support querying template info: {model}", code=2)
        rule = "+" + "=" * 90 + "+" if model.startswith("310P") else "|" + "=" * 90 + "|"
        lines = ["+" + "-" * 90 + "+", "|" + "NPU instance template info is:".ljust(90) + "|",
                 "|Name                AICORE    Memory    AICPU     VPC            VENC           JPEGD     |",
                 "|                               GB                 PNGD           VDEC           JPEGE     |", rule]
        for t in self.resources(chips[0]).templates:
            e = t.engines or {}
            lines.append("|" + f"{t.name:<20}{t.aicore:<10}{t.memory_mib // 1024:<10}{t.aicpu:<10}"
                         f"{e.get('vpc', 0):<15}{e.get('venc', 0):<15}{e.get('jpegd', 0):<10}" + "|")
            lines.append("|" + " " * 50 + f"{e.get('pngd', 0):<15}{e.get('vdec', 0):<15}{e.get('jpege', 0):<10}" + "|")
            lines.append("+" + "-" * 90 + "+")
        return "\n".join(lines) + "\n"

    def _used(self, chip: Mapping[str, Any], vnpus: list[dict[str, Any]]) -> dict[str, int]:
        resources = self.resources(chip)
        used = {"aicore": 0, "memory": 0, "aicpu": 0, **dict.fromkeys(catalogue.ENGINES, 0)}
        for v in self._on(chip, vnpus):
            t = resources.template(v["template"])
            if t is None:
                continue
            used["aicore"] += t.aicore
            used["memory"] += t.memory_mib
            used["aicpu"] += t.aicpu or 0
            for e in catalogue.ENGINES:
                used[e] += (t.engines or {}).get(e, 0)
        return used

    @staticmethod
    def _on(chip: Mapping[str, Any], vnpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [v for v in vnpus if v["npu_id"] == chip["npu_id"] and v["chip_id"] == chip["chip_id"]]

    def info_vnpu(self, npu_id: int, chip_id: int, vnpus: list[dict[str, Any]]) -> str:
        chip = self.chip(npu_id, chip_id)
        r = self.resources(chip)
        used = self._used(chip, vnpus)

        def pair(total: int | None, name: str, scale: int = 1) -> str:
            return "NA/NA" if total is None else f"{(total - used[name]) // scale}/{total // scale}"

        engines = r.engines or {}
        values = [pair(r.aicore, "aicore"), pair(r.memory_mib, "memory", 1024), pair(r.aicpu, "aicpu"),
                  *(pair(engines.get(e) if r.engines else None, e) for e in ("vpc", "venc", "vdec", "jpegd", "jpege")),
                  "NA/NA"]
        widths = (10, 10, 9, 7, 8, 8, 9, 9, 8)
        bar = "+" + "-" * 79 + "+"

        def row(text: str) -> str:
            return "|" + f" {text}".ljust(79) + "|"

        mine = sorted(self._on(chip, vnpus), key=lambda v: v["vnpu_id"])
        lines = [bar, row("NPU resource static info as follow:"),
                 row("Format:Free/Total                   NA: Currently, query is not supported."),
                 row("AICORE    Memory    AICPU    VPC    VENC    VDEC    JPEGD    JPEGE    PNGD"),
                 row("           GB"), "|" + "=" * 79 + "|",
                 row("".join(v.ljust(w) for v, w in zip(values, widths, strict=True))), bar,
                 row(f"Total number of vnpu: {len(mine)}"), bar,
                 "|  Vnpu ID  |  Vgroup ID     |  Container ID  |  Status  |  Template Name       |", bar]
        for v in mine:
            lines.append(_row((f"  {v['vnpu_id']}", f"  {v['vgroup_id']}", "  000000000000", "  0",
                               f"  {v['template']}"), (11, 16, 16, 10, 22)))
            lines.append(bar)
        return "\n".join(lines) + "\n"

    def create(self, npu_id: int, chip_id: int, template: str, vnpu_id: int | None,
               vnpus: list[dict[str, Any]]) -> str:
        chip = self.chip(npu_id, chip_id)
        r = self.resources(chip)
        t = r.template(template)
        if t is None:
            allowed = ", ".join(x.name for x in r.templates)
            raise SimError(f"The template name is invalid: {template} (this chip accepts {allowed})")
        mine = self._on(chip, vnpus)
        first = catalogue.vnpu_id(chip["physical_id"], 0)
        taken = {v["vnpu_id"] for v in mine}
        if vnpu_id is None:
            free = [i for i in range(first, first + r.id_slots) if i not in taken]
            if not free:
                raise SimError("No vnpu id is available")
            vnpu_id = free[0]
        if not first <= vnpu_id < first + r.id_slots:
            raise SimError(f"The vnpu id is invalid: {vnpu_id} (allowed {first}-{first + r.id_slots - 1})")
        if vnpu_id in taken:
            raise SimError(f"The vnpu id already exists: {vnpu_id}")
        if r.max_vnpus is not None and len(mine) >= r.max_vnpus:
            raise SimError(f"The number of vnpu reaches the upper limit: {r.max_vnpus}")
        used = self._used(chip, vnpus)
        need = {"aicore": t.aicore, "memory": t.memory_mib, "aicpu": t.aicpu or 0, **(t.engines or {})}
        total = {"aicore": r.aicore, "memory": r.memory_mib, "aicpu": r.aicpu, **(r.engines or {})}
        for name, amount in need.items():
            limit = total.get(name)
            if amount and limit is not None and used[name] + amount > limit:
                raise SimError(f"The resource is insufficient: {name} needs {amount}, {limit - used[name]} free")
        groups = {v["vgroup_id"] for v in mine}
        vgroup = next(g for g in range(len(mine) + 1) if g not in groups)
        vnpus.append({"npu_id": npu_id, "chip_id": chip_id, "vnpu_id": vnpu_id, "vgroup_id": vgroup,
                      "template": template})
        self._node(vnpu_id, create=True)
        return "\n".join((_kv("Status", "OK"), _kv("Message", "Create vnpu success"))) + "\n"

    def destroy(self, npu_id: int, chip_id: int, vnpu_id: int, vnpus: list[dict[str, Any]]) -> str:
        chip = self.chip(npu_id, chip_id)
        found = [v for v in self._on(chip, vnpus) if v["vnpu_id"] == vnpu_id]
        if not found:
            raise SimError(f"The vnpu does not exist: {vnpu_id}")
        vnpus.remove(found[0])
        self._node(vnpu_id, create=False)
        return "\n".join((_kv("Status", "OK"), _kv("Message", f"Destroy vnpu {vnpu_id} success"))) + "\n"


def _options(args: Sequence[str]) -> dict[str, str]:
    out = {}
    it = iter(args)
    for flag in it:
        if not flag.startswith("-"):
            raise SimError(f"Error: unexpected argument {flag}", code=2)
        out[flag] = next(it, "")
    return out


def _int(options: Mapping[str, str], flag: str) -> int:
    try:
        return int(options[flag])
    except (KeyError, ValueError):
        raise SimError(f"Error: option {flag} needs a number", code=2) from None


def run(argv: Sequence[str], directory: Path) -> str:
    """Run one command; return its stdout. :raises SimError: a refused command."""
    sim = Sim(directory)
    verb, rest = (argv[0], list(argv[1:])) if argv else ("", [])
    if verb == "info" and not rest:
        return sim.info()
    if verb == "info" and rest == ["-m"]:
        return sim.mapping()
    options = _options(rest)
    kind = options.get("-t")
    if verb == "info" and kind == "template-info":
        return sim.template_info(_int(options, "-i") if "-i" in options else None)
    if verb == "info" and kind == "board":
        return sim.board(_int(options, "-i"), _int(options, "-c") if "-c" in options else None)
    if verb == "info" and kind == "common":
        return sim.common(_int(options, "-i"))
    if verb == "info" and kind == "vnpu-cfg-recover":
        return f"VNPU config recover mode : {'Enable' if sim.recovers() else 'Disable'}\n"
    if verb == "set" and kind == "vnpu-cfg-recover":
        mode = options.get("-d")
        if mode not in ("0", "1"):
            raise SimError(f"Error: vnpu-cfg-recover -d takes 0 (Disable) or 1 (Enable), not {mode}", code=2)
        write_atomic(directory / "vnpu-cfg-recover", mode.encode())
        word = "Enable" if mode == "1" else "Disable"
        return "\n".join((_kv("Status", "OK"), _kv("Message", f"The VNPU config recover mode {word} is set "
                                                            "successfully."))) + "\n"
    if (verb, kind) not in (("info", "info-vnpu"), ("set", "create-vnpu"), ("set", "destroy-vnpu")):
        raise SimError(f"Error: {' '.join(argv)} is not supported by the npu-smi simulator", code=2)
    with open(directory / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        vnpus = sim.load()
        npu_id, chip_id = _int(options, "-i"), _int(options, "-c")
        if kind == "info-vnpu":
            return sim.info_vnpu(npu_id, chip_id, vnpus)
        if kind == "create-vnpu":
            if "-f" not in options:
                raise SimError("Error: option -f needs a template name", code=2)
            out = sim.create(npu_id, chip_id, options["-f"], _int(options, "-v") if "-v" in options else None, vnpus)
        else:
            out = sim.destroy(npu_id, chip_id, _int(options, "-v"), vnpus)
        sim.save(vnpus)
        return out


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry: ``ascend-dra-npu-smi-sim <npu-smi arguments>``."""
    directory = os.environ.get(ENV_DIR)
    if not directory:
        print(f"Error: set {ENV_DIR} to the simulator's state directory", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(run(list(sys.argv[1:] if argv is None else argv), Path(directory)))
    except SimError as exc:
        sys.stdout.write("\n".join((_kv("Status", "FAILED"), _kv("Message", str(exc)))) + "\n")
        return exc.code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

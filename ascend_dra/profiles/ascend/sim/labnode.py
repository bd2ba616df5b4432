"""A simulated Lab 18 node: two Ascend 310P3 chips behind an npu-smi stand-in, and a fake host root.

Lab 18's server (docs/ascend-hardware.md#the-ids, docs/ascend-hardware.md#peer-capacities; ``310P3_info.txt``,
``310P3_info_-t_device-share.txt``):
NPU IDs 4 and 5, chip 0 each, logic IDs 0/1, physical IDs 0/2, PCIe ``0000:81:00.0`` / ``0000:85:00.0``,
21525 MiB of DDR each, VDie IDs ``68496E64-20E05477-92C31323-6E78030A-BD003019`` and
``D8496E64-20C101B1-C0D42F23-AED8030A-40003039``, driver 25.5.1, firmware 7.8.0.6.201, device-share on.

:func:`build` writes, under one directory:

* ``bin/npu-smi`` -- a ``/bin/sh`` stand-in answering the calls discovery makes with text in the
  real formats: ``info`` (the box table, byte for byte as ``310P3_info.txt`` but for that sample's
  separator typo), ``info -m`` (``\\t%-30d %-30d %-30d %s %s`` rows), ``info -t board -i N`` and
  ``-c C`` (``\\t%-30s : %s`` lines; the chip level in the 310P layout of
  ``310P_info_-t_board_-i_-c_DieID.txt``, whose ``Die ID`` key carries the VDie ID), ``info -t
  common -i N``, ``info -t phyid-remap -p P`` (``key:value``, no space) and ``info -t device-share
  [-i N]``, read from ``state/`` at each call.
  ``set -t device-share -i N [-c C] -d 0|1`` asks the real security question and exits **200**
  when stdin gives no answer (docs/ascend-hardware.md#npu-smi-commands); on ``Y`` it changes ``state/`` and prints
  ``Status : OK``
  **[U: the real success text is not in the references]**. Anything else: exit 1 with
  ``Error: <args>: not simulated by the ascend-dra lab node`` on stderr;
* ``dev/`` -- ``davinci0``, ``davinci2``, ``davinci_manager``, ``devmm_svm``, ``hisi_hdc``: character
  devices 1:3 (the null device) when we may ``mknod`` (root), else empty files (discovery only);
* ``host/`` -- a host root for ``HAMivNPUCore.hostRoot``: the driver (``version.info`` with
  ``Version=25.5.1``, ``lib64/driver``), ``etc/ascend_install.info``, the hami-vnpu-core assets as
  HAMi's Ascend device plugin installs them (``libvnpu.so`` is a placeholder: the 64-byte ELF header
  of a shared object for this host's machine, :func:`elf_header`, which passes the profile's checks
  but is no library; ``ld.so.preload`` names ``/hami-vnpu-core/libvnpu.so``), ``containers/`` and the
  shared region (mode 0777), ``usr/local/dcmi`` and a copy of the stand-in as
  ``usr/local/bin/npu-smi`` (for ``VnpuCoreConfig.mountTools``).

Use from a shell: ``python -m ascend_dra.profiles.ascend.sim.labnode DIR`` prints the daemon flags.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from ascend_dra.profiles.ascend.vnpucore.assets import HOST_ELF

__all__ = ("LAB_CHIPS", "LabChip", "LabNode", "build", "elf_header", "render_info")

DRIVER_VERSION = "25.5.1"
FIRMWARE_VERSION = "7.8.0.6.201"


@attrs.frozen
class LabChip:
    """One chip of the lab node; memory in **MiB** (npu-smi's ``MB``).

    :ivar health: the ``Health`` column of ``npu-smi info`` (``OK``, ``Warning``, ``Alarm``, ``Critical``).
    :ivar aicore_percent: the ``AICore(%)`` column.
    """

    npu_id: int
    chip_id: int
    logic_id: int
    physical_id: int
    bus_id: str
    vdie_id: str
    memory_mib: int = 21525
    memory_used_mib: int = 1848
    temperature_c: int = 37
    device_share: bool = True
    name: str = "310P3"
    health: str = "OK"
    aicore_percent: int = 0


#: The two chips of Lab 18 (values from ``310P3_info.txt`` and the lab's ResourceSlice).
LAB_CHIPS = (
    LabChip(4, 0, 0, 0, "0000:81:00.0", "68496E64-20E05477-92C31323-6E78030A-BD003019", 21525, 1848, 37),
    LabChip(5, 0, 1, 2, "0000:85:00.0", "D8496E64-20C101B1-C0D42F23-AED8030A-40003039", 21525, 1849, 40),
)


def _kv(key: str, value: object) -> str:
    """One key/value line as npu-smi prints it (``\\t%-30s : %s``, docs/ascend-hardware.md#npu-smi-output-format)."""
    return f"\t{key:<30} : {value}"


def render_info(chips: Sequence[LabChip]) -> str:
    """``npu-smi info`` of a 25.5.1 driver for ``chips`` (the 310/310P layout with the Device column)."""
    wide = "+" + "-" * 104 + "+"
    rule = "+" + "=" * 31 + "+" + "=" * 17 + "+" + "=" * 54 + "+"
    lines = [wide, f"| npu-smi {DRIVER_VERSION:<41}Version: {DRIVER_VERSION:<45}|",
             "+" + "-" * 31 + "+" + "-" * 17 + "+" + "-" * 54 + "+",
             f"| {'NPU     Name':<30}| {'Health':<16}| {'Power(W)     Temp(C)           Hugepages-Usage(page)':<53}|",
             f"| {'Chip    Device':<30}| {'Bus-Id':<16}| {'AICore(%)    Memory-Usage(MB)':<53}|",
             rule]
    for chip in chips:
        lines.append(f"| {chip.npu_id:<8}{chip.name:<22}| {chip.health:<16}| {'NA':<13}{chip.temperature_c:<18}"
                     f"{'0     / 0':<22}|")
        lines.append(f"| {chip.chip_id:<8}{chip.logic_id:<22}| {chip.bus_id:<16}| {chip.aicore_percent:<13}"
                     f"{f'{chip.memory_used_mib} / {chip.memory_mib}':<40}|")
        lines.append(rule)
    return "\n".join(lines) + "\n"


def render_mapping(chips: Sequence[LabChip]) -> str:
    """``npu-smi info -m``: header and ``\\t%-30d %-30d %-30d %s %s`` rows
    (docs/ascend-hardware.md#npu-smi-output-format)."""
    lines = [f"\t{'NPU ID':<30} {'Chip ID':<30} {'Chip Logic ID':<30} Chip Name"]
    lines += [f"\t{c.npu_id:<30} {c.chip_id:<30} {c.logic_id:<30} Ascend {c.name}" for c in chips]
    return "\n".join(lines) + "\n"


def render_board(npu_id: int, chips: Sequence[LabChip]) -> str:
    """Card-level ``npu-smi info -t board -i N`` (keys of ``910A_info_-t_board_-i.txt``; 310P: ``0xd500``)."""
    mine = [c for c in chips if c.npu_id == npu_id]
    return "\n".join([
        _kv("NPU ID", npu_id), _kv("Software Version", DRIVER_VERSION), _kv("Firmware Version", FIRMWARE_VERSION),
        _kv("Compatibility", "OK"), _kv("Board ID", "0x64"), _kv("PCB ID", "NA"), _kv("BOM ID", "1"),
        _kv("PCIe Bus Info", mine[0].bus_id), _kv("Slot ID", "0"), _kv("Class ID", "NA"),
        _kv("PCI Vendor ID", "0x19e5"), _kv("PCI Device ID", "0xD500"), _kv("Subsystem Vendor ID", "0x0200"),
        _kv("Subsystem Device ID", "0x0100"), _kv("Chip Count", len(mine)),
    ]) + "\n"


def render_chip_board(chip: LabChip) -> str:
    """Chip-level ``npu-smi info -t board -i N -c C`` in the 310P layout (``Die ID``, space-separated)."""
    return "\n".join([
        _kv("NPU ID", chip.npu_id), _kv("Chip ID", chip.chip_id), _kv("Chip Type", "Ascend"),
        _kv("Chip Name", chip.name), _kv("Chip Version", "V1"), _kv("Board ID", "0x64"),
        _kv("Die ID", chip.vdie_id.replace("-", " ")), _kv("Chip Position ID", chip.chip_id),
        _kv("PCIe Bus Info", chip.bus_id), _kv("Firmware Version", FIRMWARE_VERSION),
    ]) + "\n"


def render_phyid_remap(chip: LabChip) -> str:
    """``npu-smi info -t phyid-remap -p <physical ID>`` as npu-smi prints it before the 950
    (``"\\t%-30s:%lu\\n"``, no space after the colon; ``show_ascend_chip_phyid_remap_info``,
    npu_chip_info.c of the open npu-smi source; docs/ascend-hardware.md#the-ids)."""
    return "\n".join(f"\t{key:<30}:{value}" for key, value in (
        ("Chip Physical ID", chip.physical_id), ("Chip Logic ID", chip.logic_id), ("NPU ID", chip.npu_id),
        ("Chip ID", chip.chip_id))) + "\n"


def render_common(npu_id: int, chips: Sequence[LabChip]) -> str:
    """``npu-smi info -t common -i N`` in the 310P layout of ``310P-duo_info_-t_common_-i_1_2chips.txt``."""
    mine = [c for c in chips if c.npu_id == npu_id]
    blocks = [[_kv("NPU ID", npu_id), _kv("Chip Count", len(mine))]]
    for c in mine:
        blocks.append([_kv("Chip ID", c.chip_id), _kv("Memory Usage Rate(%)", 8), _kv("Aicore Usage Rate(%)", 0),
                       _kv("Aicore Freq(MHZ)", 1080), _kv("Aicore curFreq(MHZ)", 960),
                       _kv("Temperature(C)", c.temperature_c)])
    return "\n\n".join("\n".join(b) for b in blocks) + "\n"


_SCRIPT = r'''#!/bin/sh
# npu-smi stand-in of the ascend-dra lab node (ascend_dra/profiles/ascend/sim/labnode.py). Not npu-smi.
LAB=__LAB__
OUT="$LAB/npu-smi"
STATE="$LAB/state"
kv() { printf '\t%-30s : %s\n' "$1" "$2"; }
share() {
  first=1
  for npu in __NPUS__; do
    [ -n "$1" ] && [ "$1" != "$npu" ] && continue
    [ $first = 1 ] || echo
    first=0
    count=$(ls "$STATE" | grep -c "^device-share-$npu-")
    kv "NPU ID" "$npu"; kv "Chip Count" "$count"
    for f in "$STATE"/device-share-"$npu"-*; do
      echo; kv "Device-share Status" "$(cat "$f")"; kv "Chip ID" "${f##*-}"
    done
  done
}
case "$*" in
__CASES__
  "info -t device-share") share "" ;;
  "info -t device-share -i "*)
    npu=$5
    [ -e "$STATE/device-share-$npu-0" ] || { echo "Error: card id $npu is invalid" >&2; exit 1; }
    share "$npu" ;;
  "set -t device-share -i "*)
    npu=$5; chip=""; value=$7
    [ "$6" = "-c" ] && { chip=$7; value=$9; }
    printf '%s%s' 'There are security risks when opening device sharing, Please ensure that only a single ' \
      'user uses the chip. Are you sure you want to continue setting?(Y/N)'
    read answer || exit 200
    [ "$answer" = "Y" ] || [ "$answer" = "y" ] || exit 0
    [ "$value" = 1 ] && status=True || status=False
    for f in "$STATE"/device-share-"$npu"-${chip:-*}; do [ -e "$f" ] && echo "$status" > "$f"; done
    echo; kv "Status" "OK" ;;
  *) echo "Error: $*: not simulated by the ascend-dra lab node" >&2; exit 1 ;;
esac
'''


@attrs.frozen
class LabNode:
    """What :func:`build` made: the stand-in, the device and host roots, and the daemon's flags."""

    root: Path
    npu_smi: Path
    dev_root: Path
    host_root: Path
    real_device_nodes: bool
    chips: tuple[LabChip, ...] = LAB_CHIPS

    def flags(self, profile: str = "HAMivNPUCore") -> list[str]:
        """Flags for ``ascend-dra run`` / ``discover`` that point the profile at this lab node."""
        return ["--npu-smi", str(self.npu_smi), "--dev-root", str(self.dev_root),
                "--profile-option", f"{profile}.hostRoot={self.host_root}"]

    def set_device_share(self, npu_id: int, chip_id: int, enabled: bool) -> None:
        """Flip a chip's device-share mode, as an operator's ``npu-smi set`` would."""
        (self.root / "state" / f"device-share-{npu_id}-{chip_id}").write_text("True\n" if enabled else "False\n")

    def set_info(self, chips: Sequence[LabChip] | None) -> None:
        """What ``npu-smi info`` prints from now on: the table of ``chips`` (e.g. one with another
        ``health``, ``aicore_percent`` or ``memory_used_mib``: :func:`attrs.evolve` of :attr:`chips`),
        or, with None, nothing and exit status 1, as an npu-smi that no longer answers. Written
        atomically: a daemon reading it meanwhile sees the old table or the new one."""
        path = self.root / "npu-smi" / "info.txt"
        if chips is None:
            path.unlink(missing_ok=True)
            return
        temporary = path.with_suffix(".new")
        temporary.write_text(render_info(chips))
        temporary.replace(path)


def build(root: Path, chips: Sequence[LabChip] = LAB_CHIPS, *, driver_version: str = DRIVER_VERSION,
          assets: bool = True) -> LabNode:
    """Write the lab node under ``root`` (see the module docstring); idempotent.

    :param driver_version: what ``host/usr/local/Ascend/driver/version.info`` says.
    :param assets: False leaves out the hami-vnpu-core assets (a host without them).
    """
    root = root.resolve()
    outputs = root / "npu-smi"
    for directory in (root / "bin", outputs, root / "state", root / "dev"):
        directory.mkdir(parents=True, exist_ok=True)
    answers: dict[str, str] = {"info": render_info(chips), "info -m": render_mapping(chips)}
    for npu_id in sorted({c.npu_id for c in chips}):
        answers[f"info -t board -i {npu_id}"] = render_board(npu_id, chips)
        answers[f"info -t common -i {npu_id}"] = render_common(npu_id, chips)
    for c in chips:
        answers[f"info -t board -i {c.npu_id} -c {c.chip_id}"] = render_chip_board(c)
        answers[f"info -t phyid-remap -p {c.physical_id}"] = render_phyid_remap(c)
        state = root / "state" / f"device-share-{c.npu_id}-{c.chip_id}"
        state.write_text("True\n" if c.device_share else "False\n")
    cases = []
    for args, text in answers.items():
        file = outputs / (args.replace(" ", "_") + ".txt")
        file.write_text(text)
        cases.append(f"  {shlex.quote(args)}) exec cat {shlex.quote(str(file))} ;;")
    script = (_SCRIPT.replace("__LAB__", shlex.quote(str(root)))
              .replace("__NPUS__", " ".join(str(n) for n in sorted({c.npu_id for c in chips})))
              .replace("__CASES__", "\n".join(cases)))
    npu_smi = root / "bin" / "npu-smi"
    npu_smi.write_text(script)
    npu_smi.chmod(0o755)
    real = _device_nodes(root / "dev", [f"davinci{c.physical_id}" for c in chips]
                         + ["davinci_manager", "devmm_svm", "hisi_hdc"])
    host = root / "host"
    _host_root(host, driver_version, assets)
    tools = host / "usr/local/bin/npu-smi"
    tools.parent.mkdir(parents=True, exist_ok=True)
    tools.write_text(script)
    tools.chmod(0o755)
    return LabNode(root=root, npu_smi=npu_smi, dev_root=root / "dev", host_root=host, real_device_nodes=real,
                   chips=tuple(chips))


def _device_nodes(dev: Path, names: Sequence[str]) -> bool:
    """Character devices 1:3 (the null device) if we may mknod, else empty files. True if real."""
    real = True
    for name in names:
        path = dev / name
        if path.exists() or path.is_symlink():
            real = real and stat.S_ISCHR(path.lstat().st_mode)
            continue
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            path.chmod(0o666)
        except PermissionError:
            path.touch()
            real = False
    return real


def elf_header(machine: str | int | None = None, *, elf_class: int = 2, kind: int = 3) -> bytes:
    """A 64-byte little-endian ELF header (elf(5)): ``kind`` is ``e_type`` (3, a shared object; 2,
    an executable), ``elf_class`` 1 (32-bit) or 2 (64-bit), ``machine`` a ``platform.machine()`` name
    (default: this host's) or an ``e_machine`` number (0 for a machine :data:`HOST_ELF` does not know).
    The rest of the header is zero: it is not a loadable file."""
    if not isinstance(machine, int):
        machine = HOST_ELF.get(machine or platform.machine(), (2, 1, 0))[2]
    ident = b"\x7fELF" + bytes([elf_class, 1, 1]) + bytes(9)
    return ident + kind.to_bytes(2, "little") + machine.to_bytes(2, "little") + bytes(44)


def _host_root(host: Path, driver_version: str, assets: bool) -> None:
    files: Mapping[str, str] = {
        "usr/local/Ascend/driver/version.info": f"Version={driver_version}\npackage_version={driver_version}\n",
        "usr/local/Ascend/driver/lib64/driver/libascend_hal.so": "ascend-dra lab placeholder\n",
        "usr/local/Ascend/driver/lib64/common/libdcmi.so": "ascend-dra lab placeholder\n",
        "etc/ascend_install.info": "Driver_Install_Status=complete\nDriver_Install_Path_Param=/usr/local/Ascend\n",
        "usr/local/dcmi/libdcmi.so": "ascend-dra lab placeholder\n",
    }
    if assets:
        files = {**files, "usr/local/hami-vnpu-core/ld.so.preload": "/hami-vnpu-core/libvnpu.so\n"}
    for relative, text in files.items():
        path = host / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if assets:
        library = host / "usr/local/hami-vnpu-core/libvnpu.so"
        library.write_bytes(elf_header())
        library.chmod(0o644)
        (host / "usr/local/hami-vnpu-core/containers").mkdir(parents=True, exist_ok=True)
        region = host / "usr/local/hami-shared-region"
        region.mkdir(parents=True, exist_ok=True)
        region.chmod(0o777)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ascend_dra.profiles.ascend.sim.labnode DIR``: build the lab node, print the daemon flags."""
    parser = argparse.ArgumentParser(prog="labnode", description="Build the simulated Lab 18 node (2x 310P3).")
    parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    lab = build(args.dir)
    print(shlex.join(lab.flags()))
    if not lab.real_device_nodes:
        print("note: not root, so dev/ holds plain files: fine for discovery, not for containers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

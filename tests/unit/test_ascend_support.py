"""Helpers shared by the ``test_ascend_*`` modules: fixture files, fake npu-smi scripts, fake /dev and sysfs.

The fixtures are the real npu-smi outputs of ``tests/fixtures/npu-smi/`` (provenance in its
``SOURCES.md``).
"""

from __future__ import annotations

import shlex
import stat
from collections.abc import Mapping
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "npu-smi"


def fixture(name: str) -> str:
    """The text of one fixture file."""
    return (FIXTURES / name).read_text()


def parts(name: str) -> list[str]:
    """The parts of a multi-part fixture (parts are separated by one blank line, SOURCES.md)."""
    return [p for p in fixture(name).split("\n\n") if p.strip()]


def fake_npu_smi(directory: Path, answers: Mapping[str, str | tuple[int, str]], *, default_exit: int = 1) -> Path:
    """Write an executable ``npu-smi`` shell script into ``directory``.

    :param answers: argument string (``"info -m"``) -> a fixture name (its content is printed with
        ``cat``) or ``(exit status, stderr text)``. Other arguments print ``unsupported`` on stderr
        and exit ``default_exit``.
    """
    lines = ["#!/bin/sh", 'case "$*" in']
    for args, answer in answers.items():
        if isinstance(answer, tuple):
            code, stderr = answer
            lines.append(f"  {shlex.quote(args)}) echo {shlex.quote(stderr)} >&2; exit {code} ;;")
        else:
            lines.append(f"  {shlex.quote(args)}) exec cat {shlex.quote(str(FIXTURES / answer))} ;;")
    lines.append(f'  *) echo "unsupported: $*" >&2; exit {default_exit} ;;')
    lines.append("esac")
    return script(directory, "\n".join(lines) + "\n")


def script(directory: Path, body: str, name: str = "npu-smi") -> Path:
    """Write an executable script and return its path."""
    path = directory / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def dev_tree(root: Path, names: list[str]) -> Path:
    """A fake ``/dev``: empty regular files with the given names under ``root/dev``."""
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    for name in names:
        (dev / name).touch()
    return dev


def sys_tree(root: Path, functions: Mapping[str, tuple[str, str, int]],
             davinci_links: Mapping[int, str] | None = None) -> Path:
    """A fake sysfs under ``root/sys``.

    :param functions: PCI address -> (vendor, device, numa_node) under ``bus/pci/devices/<address>``.
    :param davinci_links: davinci number -> PCI address, as ``class/davinci/davinci<N>/device`` links.
    """
    sys_root = root / "sys"
    for address, (vendor, device, numa) in functions.items():
        real = sys_root / "devices" / "pci0000:00" / address
        real.mkdir(parents=True, exist_ok=True)
        (real / "vendor").write_text(vendor + "\n")
        (real / "device").write_text(device + "\n")
        (real / "numa_node").write_text(f"{numa}\n")
        link = sys_root / "bus" / "pci" / "devices" / address
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(real)
    for number, address in (davinci_links or {}).items():
        entry = sys_root / "class" / "davinci" / f"davinci{number}"
        entry.mkdir(parents=True, exist_ok=True)
        (entry / "device").symlink_to(sys_root / "devices" / "pci0000:00" / address)
    sys_root.mkdir(parents=True, exist_ok=True)
    return sys_root


def test_every_reference_file_is_a_fixture() -> None:
    """The fixture folder holds the captured outputs SOURCES.md lists (same names), plus
    outputs this project constructed from the documented format, each named ``*_constructed.txt``
    and listed in SOURCES.md."""
    names = sorted(p.name for p in FIXTURES.iterdir())
    assert "SOURCES.md" in names
    captured = [n for n in names if n.endswith(".txt") and not n.endswith("_constructed.txt")]
    assert len(captured) == 63
    sources = (FIXTURES / "SOURCES.md").read_text()
    for name in captured:
        assert f"`{name}`" in sources, name
    constructed = [n for n in names if n.endswith("_constructed.txt")]
    assert constructed
    for name in constructed:
        assert f"`{name}`" in sources, name

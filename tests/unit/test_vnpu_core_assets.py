"""HAMivNPUCore's interceptor library as a container sees it.

Whatever a container's ``/etc/ld.so.preload`` names must be, through the claim's CDI mounts, the
library the host has: glibc's loader skips a preload entry it cannot load with one line on stderr,
and the quota is then never enforced. Tried with the vNPU-core integration source's literal layout
(``limiter``, ``libvnpu.so``, an ``ld.so.preload`` naming ``/hami-vnpu-core/target/debug/libvnpu.so``),
HAMi's Ascend device plugin's (its CI writes ``/hami-vnpu-core/libvnpu.so`` into ``ld.so.preload``,
``prepareHostResources`` copies both), none at all, and a library no container would load: every
chip is then refused with the reason, and a Prepare after the library went away fails naming it.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import attrs
import pytest
import yaml

from ascend_dra.profiles.ascend.sim import labnode
from ascend_dra.profiles.ascend.vnpucore.assets import elf_problem
from ascend_dra.state.devicestate import ClaimRef
from tests.unit.test_vnpu_core import CLAIM_UID, context, lab_claim, lab_state, loaded

CORE = "usr/local/hami-vnpu-core"
WHERE = "hami-vnpu-core library {lib} cannot be loaded in a container: "


@pytest.fixture
def lab(tmp_path: Path) -> labnode.LabNode:
    return labnode.build(tmp_path / "lab")


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def integration_source(core: Path) -> None:
    """The integration source's host layout, file for file (its ``limiter`` an ELF executable)."""
    _write(core / "limiter", labnode.elf_header(kind=2), 0o755)
    _write(core / "libvnpu.so", labnode.elf_header(), 0o755)
    _write(core / "ld.so.preload", b"/hami-vnpu-core/target/debug/libvnpu.so\n")


def hami_device_plugin(core: Path) -> None:
    """What ascend-device-plugin's ``prepareHostResources`` leaves: the two files its image carries
    (modes kept from cargo's output), ``containers/`` made by its Allocate."""
    _write(core / "libvnpu.so", labnode.elf_header(), 0o755)
    _write(core / "ld.so.preload", b"/hami-vnpu-core/libvnpu.so\n")
    (core / "containers").mkdir()


def library_only(core: Path) -> None:
    _write(core / "libvnpu.so", labnode.elf_header())


def preload_naming_nothing(core: Path) -> None:
    _write(core / "libvnpu.so", labnode.elf_header())
    _write(core / "ld.so.preload", b"")


def relative_link(core: Path) -> None:
    """A versioned install: ``libvnpu.so -> releases/1.2/libvnpu.so``, inside the assets dir."""
    _write(core / "releases/1.2/libvnpu.so", labnode.elf_header())
    (core / "libvnpu.so").symlink_to("releases/1.2/libvnpu.so")


LAYOUTS: dict[str, Callable[[Path], None]] = {
    "integration-source": integration_source, "hami-device-plugin": hami_device_plugin,
    "library-only": library_only, "host-preload-naming-nothing": preload_naming_nothing,
    "relative-link": relative_link,
}


def lab_with(tmp_path: Path, layout: Callable[[Path], None]) -> labnode.LabNode:
    lab = labnode.build(tmp_path / "lab")
    shutil.rmtree(lab.host_root / CORE)
    (lab.host_root / CORE).mkdir()
    layout(lab.host_root / CORE)
    return lab


def through(mounts: dict[str, str], path: str) -> Path | None:
    """The host path behind container ``path`` by the spec's mounts (the deepest one holding it)."""
    holders = [c for c in mounts if PurePosixPath(path).is_relative_to(c)]
    if not holders:
        return None
    mount = max(holders, key=lambda c: len(PurePosixPath(c).parts))
    return Path(mounts[mount], PurePosixPath(path).relative_to(mount))


@pytest.mark.anyio
@pytest.mark.parametrize("layout", list(LAYOUTS))
async def test_what_the_containers_preload_names_is_the_library_on_the_host(tmp_path, layout) -> None:
    lab = lab_with(tmp_path, LAYOUTS[layout])
    core = lab.host_root / CORE
    state = await lab_state(lab, tmp_path)
    assert [d.name for d in state.inventories["HAMivNPUCore"].devices] == ["npu-0-0", "npu-1-0"]
    lab_claim(tmp_path)
    result = await state.prepare([ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID)])
    assert not isinstance(result[CLAIM_UID], Exception), result
    spec = yaml.safe_load(next((tmp_path / "cdi").glob(f"*_{CLAIM_UID}.yaml")).read_text())
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["devices"][0]["containerEdits"]["mounts"]}
    # The claim's own file, in its dir, not in the local dir the container may write.
    claim_dir = core / "containers" / CLAIM_UID
    preload = claim_dir / "ld.so.preload"
    assert mounts["/etc/ld.so.preload"] == str(preload)
    assert not preload.is_relative_to(mounts["/hami-vnpu-shmem"])
    assert stat.S_IMODE(preload.stat().st_mode) == 0o644
    named = preload.read_text().split()
    assert named == ["/hami-vnpu-core/libvnpu.so"]
    for path in named:
        host = through(mounts, path)
        assert host is not None and host.is_file(), (path, host)
        assert host.resolve() == (core / "libvnpu.so").resolve()
        assert host.resolve().is_relative_to(core)  # no link leaves the mount (the container would miss it)
    assert (await state.unprepare([ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID)]))[CLAIM_UID] is None
    assert not claim_dir.exists()


@pytest.mark.anyio
async def test_the_preload_file_is_readable_by_every_user_whatever_the_daemons_umask(lab, tmp_path) -> None:
    state = await lab_state(lab, tmp_path)
    lab_claim(tmp_path)
    old = os.umask(0o077)
    try:
        result = await state.prepare([ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID)])
    finally:
        os.umask(old)
    assert not isinstance(result[CLAIM_UID], Exception), result
    preload = lab.host_root / CORE / "containers" / CLAIM_UID / "ld.so.preload"
    assert stat.S_IMODE(preload.stat().st_mode) == 0o644
    assert preload.read_text() == "/hami-vnpu-core/libvnpu.so\n"


@pytest.mark.anyio
@pytest.mark.parametrize(("layout", "note"), [("integration-source", True), ("hami-device-plugin", False)])
async def test_a_limiter_binary_is_a_note_that_ascend_dra_never_starts_it(tmp_path, layout, note) -> None:
    lab = lab_with(tmp_path, LAYOUTS[layout])
    profile = loaded()
    await profile.discover(context(lab, tmp_path))
    limiter = lab.host_root / CORE / "limiter"
    expected = (f"{limiter} is there, and ascend-dra never starts it: it is the older hami-vnpu-core design's "
                "manager, which a postStart hook started in each container. The libvnpu.so beside it must run the "
                "manager itself (limiter::supervisor), or workloads wait for a manager that never comes "
                "(docs/hami-vnpu-core.md)")
    assert (expected in profile.discovery_notes()) is note
    assert not [n for n in profile.discovery_notes() if "not offered" in n]


def _replace(lib: Path, data: bytes, mode: int = 0o644) -> None:
    lib.unlink()
    _write(lib, data, mode)


def _link(lib: Path, target: str | Path) -> None:
    lib.unlink()
    lib.symlink_to(target)


def _elsewhere(lib: Path) -> Path:
    """A good library on the host, outside the assets dir (where an absolute link may point)."""
    other = lib.parents[4] / "opt/hami/libvnpu.so"
    _write(other, labnode.elf_header())
    return other


x86 = "64-bit little-endian x86-64"
#: id -> (break the library, the reason; {lib} is the library's path, {core} the assets dir, {other}
#: a path outside it). Messages as on an x86_64 host (the test pretends to be one).
BROKEN: dict[str, tuple[Callable[[Path], object], str]] = {
    "missing": (Path.unlink, "hami-vnpu-core assets missing: {lib}"),
    "a-directory": (lambda lib: (lib.unlink(), lib.mkdir()), WHERE + "{lib} is a directory, not a file"),
    "a-fifo": (lambda lib: (lib.unlink(), os.mkfifo(lib)), WHERE + "{lib} is not a regular file"),
    "empty": (lambda lib: _replace(lib, b""), WHERE + "{lib} is empty"),
    "truncated": (lambda lib: _replace(lib, labnode.elf_header()[:12]),
                  WHERE + "{lib} is 12 bytes long, too short for an ELF header"),
    "text": (lambda lib: _replace(lib, b"ascend-dra lab placeholder\n"),
             WHERE + "{lib} is not an ELF file (it starts with b'ascend-d')"),
    "another-machine": (lambda lib: _replace(lib, labnode.elf_header("aarch64")),
                        WHERE + "{lib} is built for 64-bit little-endian AArch64; this host (x86_64) loads " + x86
                        + " (build libvnpu.so for this host and driver)"),
    "32-bit": (lambda lib: _replace(lib, labnode.elf_header("x86_64", elf_class=1)),
               WHERE + "{lib} is built for 32-bit little-endian x86-64; this host (x86_64) loads " + x86
               + " (build libvnpu.so for this host and driver)"),
    "an-executable": (lambda lib: _replace(lib, labnode.elf_header("x86_64", kind=2)),
                      WHERE + "{lib} is an executable, not a shared object"),
    "not-readable-by-every-user": (lambda lib: lib.chmod(0o640),
                                   WHERE + "{lib} is mode 0640, not readable by every user (containers may run as "
                                   "any user): chmod o+r {lib}"),
    "assets-dir-not-searchable": (lambda lib: lib.parent.chmod(0o750),
                                  WHERE + "directory {core} is mode 0750, not searchable by every user (containers "
                                  "may run as any user): chmod o+x {core}"),
    "absolute-link-out-of-the-mount": (lambda lib: _link(lib, _elsewhere(lib)),
                                       WHERE + "it leads to {other} in the container, outside /hami-vnpu-core (where "
                                       "{core} is mounted): that is the image's own file, if any; make it a file, or "
                                       "a relative link that stays inside {core}"),
    "relative-link-out-of-the-mount": (lambda lib: (_elsewhere(lib), _link(lib, "../../../../opt/hami/libvnpu.so")),
                                       WHERE + "it leads to /opt/hami/libvnpu.so in the container, outside "
                                       "/hami-vnpu-core (where {core} is mounted): that is the image's own file, if "
                                       "any; make it a file, or a relative link that stays inside {core}"),
    "dangling-link": (lambda lib: _link(lib, "libvnpu.so.1"),
                      "hami-vnpu-core assets missing: {lib} (-> {core}/libvnpu.so.1)"),
    "link-loop": (lambda lib: (_link(lib, "again.so"), (lib.parent / "again.so").symlink_to("libvnpu.so")),
                  WHERE + "more than 40 symbolic links (a loop?) resolving /hami-vnpu-core/libvnpu.so"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("broken", list(BROKEN))
async def test_a_library_no_container_would_load_refuses_every_chip_with_the_reason(lab, tmp_path, monkeypatch,
                                                                                     broken) -> None:
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    core = lab.host_root / CORE
    lib = core / "libvnpu.so"
    lib.write_bytes(labnode.elf_header("x86_64"))
    breaks, reason = BROKEN[broken]
    breaks(lib)
    reason = reason.format(lib=lib, core=core, other=lab.root / "opt/hami/libvnpu.so")
    profile = loaded()
    inventory = await profile.discover(context(lab, tmp_path))
    assert inventory.devices == ()
    assert [n for n in profile.discovery_notes() if "not offered" in n] == [
        f"npu-0-0 (NPU 4 chip 0) not offered: {reason}", f"npu-1-0 (NPU 5 chip 0) not offered: {reason}"]


@pytest.mark.anyio
@pytest.mark.parametrize(("breaks", "problem"), [
    (Path.unlink, "hami-vnpu-core library {lib} is missing"),
    (lambda lib: lib.write_bytes(b"ascend-dra lab placeholder\n"),
     WHERE + "{lib} is not an ELF file (it starts with b'ascend-d')"),
], ids=["removed", "overwritten-with-text"])
async def test_a_prepare_after_the_library_went_bad_fails_naming_it_and_leaves_nothing(lab, tmp_path, breaks,
                                                                                        problem) -> None:
    state = await lab_state(lab, tmp_path)  # discovered while the library was good
    assert len(state.inventories["HAMivNPUCore"].devices) == 2
    lib = lab.host_root / CORE / "libvnpu.so"
    breaks(lib)
    lab_claim(tmp_path)
    result = (await state.prepare([ClaimRef("dra-ascend-e2e", "share-a", CLAIM_UID)]))[CLAIM_UID]
    assert isinstance(result, Exception)
    assert str(result) == (f"ResourceClaim dra-ascend-e2e/share-a: {problem.format(lib=lib)}; no container of this "
                           "claim would enforce its quota")
    assert not (lab.host_root / CORE / "containers" / CLAIM_UID).exists()
    assert not list((tmp_path / "cdi").glob(f"*{CLAIM_UID}*"))
    assert CLAIM_UID not in state.prepared_claims


def test_elf_headers_of_other_byte_orders_and_unknown_hosts() -> None:
    big = bytearray(labnode.elf_header("aarch64"))
    big[5] = 2  # ELFDATA2MSB: e_type and e_machine read big-endian
    big[16:20] = (3).to_bytes(2, "big") + (183).to_bytes(2, "big")
    assert elf_problem(bytes(big), "aarch64") == (
        "is built for 64-bit big-endian AArch64; this host (aarch64) loads 64-bit little-endian AArch64 (build "
        "libvnpu.so for this host and driver)")
    # A machine we do not know: the header is still read, the machine not compared.
    assert elf_problem(labnode.elf_header("aarch64"), "riscv64") is None
    assert elf_problem(labnode.elf_header("aarch64", kind=1), "riscv64") == (
        "is a relocatable object (.o), not a shared object")
    assert elf_problem(b"\x7fELF\x02\x07" + bytes(58), "x86_64") == "has an unknown ELF byte order (7)"


@pytest.mark.anyio
async def test_an_assets_dir_reached_through_a_link_is_the_dir_it_links_to(lab, tmp_path) -> None:
    """The runtime resolves a mount's source on the host: a vnpuCoreDir that is itself a link is fine,
    and a reason names the library by the path the option gives."""
    linked = tmp_path / "hami-vnpu-core"
    linked.symlink_to(lab.host_root / CORE)
    ctx = context(lab, tmp_path)
    ctx = attrs.evolve(ctx, options={**ctx.options, "HAMivNPUCore.vnpuCoreDir": str(linked)})
    profile = loaded()
    assert [d.name for d in (await profile.discover(ctx)).devices] == ["npu-0-0", "npu-1-0"]
    (linked / "libvnpu.so").write_bytes(b"ascend-dra lab placeholder\n")
    assert (await profile.discover(ctx)).devices == ()
    lib = linked / "libvnpu.so"
    reason = WHERE.format(lib=lib) + f"{lib} is not an ELF file (it starts with b'ascend-d')"
    assert f"npu-0-0 (NPU 4 chip 0) not offered: {reason}" in profile.discovery_notes()

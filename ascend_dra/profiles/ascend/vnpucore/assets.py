"""The interceptor library a HAMivNPUCore container preloads: checked as the container will see it,
and named by a preload file of each claim's own.

Why a preload file of our own. glibc's loader reads ``/etc/ld.so.preload`` before a program's first
instruction and loads every path it names; a path that does not open, or a file it cannot map
(not an ELF shared object, another machine's, unreadable by the process's user), is skipped with
one line on stderr, ``ERROR: ld.so: object '...' from /etc/ld.so.preload cannot be preloaded ...:
ignored.``, and the program runs on (ld.so(8)). Without the library, hami-vnpu-core's quota is
not enforced at all. The host's ``<vnpuCoreDir>/ld.so.preload`` is written by whoever installed the
assets, and what it names need not exist in the container: the vNPU-core integration source has
``/hami-vnpu-core/target/debug/libvnpu.so`` in it, while the assets dir appears at
``/hami-vnpu-core`` with the library at its top (docs/ascend-hardware.md#vnpu-core-host-layout). So
each claim gets ``<vnpuCoreDir>/containers/<claimUID>/ld.so.preload`` naming
:data:`CONTAINER_LIBRARY`, the path where our mount puts ``<vnpuCoreDir>/libvnpu.so``; the host's file
is not used (docs/hami-vnpu-core.md#5-how-the-limiter-starts-and-what-our-cdi-edits-do-about-it).

What the library needs to load in every container, checked at discovery (a chip is not offered
otherwise) and again at each Prepare (:func:`library_problem`):

* :data:`CONTAINER_LIBRARY` resolves, inside the container, to a file under the mount: symbolic
  links are followed as the container's kernel follows them, an absolute target being a path in the
  container, not on the host (path_resolution(7));
* it is a regular file readable by every user, and every directory on the way is searchable by
  every user (containers may run as any user, docs/ascend-hardware.md#vnpu-core-host-layout);
* it is an ELF shared object (``e_type`` ``ET_DYN``) of this host's class, byte order and machine
  (elf(5): ``e_ident``, ``e_type`` at byte 16, ``e_machine`` at byte 18), as the loader requires.

The manager that enforces the quota runs inside ``libvnpu.so`` (docs/ascend-hardware.md#vnpu-core-limiter);
a ``limiter`` binary beside it belongs to the older design, which a postStart hook started and
ascend-dra never starts (:func:`limiter_binary`, a note, not a refusal: the file alone does not
say which design the library is).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from ascend_dra.observe.faults import disk_fault
from ascend_dra.profiles.ascend.vnpucore.host import CONTAINER_VNPU_CORE_DIR, VnpuCoreHost
from ascend_dra.system.atomicfile import write_atomic

__all__ = (
    "CONTAINER_LIBRARY",
    "HOST_ELF",
    "PRELOAD_FILE",
    "LibraryMissing",
    "elf_problem",
    "library_problem",
    "limiter_binary",
    "preload_path",
    "write_preload",
)

#: Where the interceptor is in the container: ``<vnpuCoreDir>/libvnpu.so`` under our mount of the dir.
CONTAINER_LIBRARY = f"{CONTAINER_VNPU_CORE_DIR}/libvnpu.so"
#: Name of each claim's preload file in its dir ``<vnpuCoreDir>/containers/<claimUID>``; never a
#: request name (those have no dots), so it cannot meet a request's local dir.
PRELOAD_FILE = "ld.so.preload"
#: ``platform.machine()`` -> the ELF ``(EI_CLASS, EI_DATA, e_machine)`` its loader maps (elf(5):
#: ELFCLASS64 = 2, ELFDATA2LSB = 1, EM_X86_64 = 62, EM_AARCH64 = 183). Other machines: the machine
#: is not compared.
HOST_ELF = {"x86_64": (2, 1, 62), "amd64": (2, 1, 62), "aarch64": (2, 1, 183), "arm64": (2, 1, 183)}
_MACHINES = {3: "x86", 40: "ARM", 62: "x86-64", 183: "AArch64", 243: "RISC-V"}
_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
_KINDS = {1: "a relocatable object (.o)", 2: "an executable", 4: "a core dump"}
#: Symbolic links followed in one resolution before giving up, as the kernel does (path_resolution(7)).
_MAX_LINKS = 40


class LibraryMissing(Exception):
    """Raised by :func:`library_problem`'s resolution when nothing is at the library's path (a
    missing asset, reported with the others missing)."""


def preload_path(claim_dir: str) -> str:
    """The host path of a claim's preload file (``<claim_dir>/ld.so.preload``)."""
    return f"{claim_dir}/{PRELOAD_FILE}"


def write_preload(claim_dir: str) -> str:
    """Write the claim's preload file, naming :data:`CONTAINER_LIBRARY` (blocking); return its path.

    Atomic (a temp file renamed over it), mode 0644 whatever the umask (a container of any user
    must read it: an unreadable ``/etc/ld.so.preload`` is skipped without a word). Not fsynced:
    after a power loss the node reboots, and a claim's side effects run again when the kubelet
    prepares it after a reboot (docs/durable-state.md#reboot).

    :raises OSError: naming the file (full disk, read-only file system, ...).
    """
    path = preload_path(claim_dir)
    disk_fault("vnpu-core-preload:write", path)  # tests: a full disk as the file is written
    write_atomic(Path(path), f"{CONTAINER_LIBRARY}\n".encode(), 0o644, durable=False)
    os.chmod(path, 0o644)
    return path


def limiter_binary(host: VnpuCoreHost) -> str | None:
    """``<vnpuCoreDir>/limiter`` when it exists (the older design's manager binary), else None."""
    path = f"{host.vnpu_core_dir}/limiter"
    return path if os.path.lexists(path) else None


def library_problem(host: VnpuCoreHost, machine: str) -> str | None:
    """Why a container would not load ``<vnpuCoreDir>/libvnpu.so`` from :data:`CONTAINER_LIBRARY`
    (see the module docstring), or None when it would (blocking: a few ``stat`` calls and 64 bytes read).

    :param machine: ``platform.machine()`` of the host.
    :raises LibraryMissing: when nothing is at that path in the container's view (the message names it).
    """
    named = host.libvnpu
    where = f"hami-vnpu-core library {named} cannot be loaded in a container"
    try:
        file, dirs = _resolve(host.vnpu_core_dir, CONTAINER_VNPU_CORE_DIR, CONTAINER_LIBRARY)
        mode = os.stat(file).st_mode
        dir_modes = [(d, stat.S_IMODE(os.stat(d).st_mode)) for d in dirs]
    except _Unresolvable as exc:
        return f"{where}: {exc}"
    except FileNotFoundError as exc:
        gone = exc.filename if isinstance(exc.filename, str) else named
        raise LibraryMissing(named if _same(gone, named) else f"{named} (-> {gone})") from None
    except OSError as exc:
        return f"{where}: cannot look at {exc.filename or named}: {exc.strerror or exc}"
    shown = named if _same(file, named) else f"{named} (-> {file})"
    if stat.S_ISDIR(mode):
        return f"{where}: {shown} is a directory, not a file"
    if not stat.S_ISREG(mode):
        return f"{where}: {shown} is not a regular file"
    if not mode & stat.S_IROTH:
        return (f"{where}: {shown} is mode {stat.S_IMODE(mode):04o}, not readable by every user (containers may "
                f"run as any user): chmod o+r {file}")
    for directory, dir_mode in dir_modes:
        if not dir_mode & stat.S_IXOTH:
            return (f"{where}: directory {directory} is mode {dir_mode:04o}, not searchable by every user "
                    f"(containers may run as any user): chmod o+x {directory}")
    try:
        # O_NONBLOCK: a file swapped for a FIFO since the stat above must not hang discovery.
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            header = os.read(fd, 64)
        finally:
            os.close(fd)
    except OSError as exc:
        return f"{where}: cannot read {file}: {exc.strerror or exc}"
    problem = elf_problem(header, machine)
    return None if problem is None else f"{where}: {shown} {problem}"


def elf_problem(header: bytes, machine: str) -> str | None:
    """What keeps the loader from mapping a file that starts with ``header`` as a shared object on a
    ``machine`` host (``platform.machine()``), or None (elf(5); the fields of the module docstring)."""
    if len(header) < 20:
        return "is empty" if not header else f"is {len(header)} bytes long, too short for an ELF header"
    if header[:4] != _ELF_MAGIC:
        return f"is not an ELF file (it starts with {header[:8]!r})"
    elf_class, data = header[4], header[5]
    if data not in (1, 2):
        return f"has an unknown ELF byte order ({data})"
    order = "little" if data == 1 else "big"
    kind = int.from_bytes(header[16:18], order)
    number = int.from_bytes(header[18:20], order)
    if kind != _ET_DYN:
        return f"is {_KINDS.get(kind, f'ELF type {kind}')}, not a shared object"
    wanted = HOST_ELF.get(machine)
    if wanted is None:
        return None
    got = (elf_class, data, number)
    if got != wanted:
        return (f"is built for {_describe(got)}; this host ({machine}) loads {_describe(wanted)} "
                "(build libvnpu.so for this host and driver)")
    return None


def _same(found: str, named: str) -> bool:
    """Whether ``found`` (under the assets dir's real path) is ``named`` itself, not a link's target."""
    return found in (named, os.path.join(os.path.realpath(os.path.dirname(named)), os.path.basename(named)))


def _describe(elf: tuple[int, int, int]) -> str:
    elf_class, data, number = elf
    bits = {1: "32-bit", 2: "64-bit"}.get(elf_class, f"ELF class {elf_class}")
    order = {1: "little-endian", 2: "big-endian"}.get(data, "")
    return f"{bits} {order} {_MACHINES.get(number, f'ELF machine {number}')}"


class _Unresolvable(Exception):
    """The path does not lead to a file under the mount in the container's view (the message says why)."""


def _resolve(source: str, target: str, path: str) -> tuple[str, list[str]]:
    """The host file behind container ``path`` when host dir ``source`` is bind-mounted at container
    dir ``target``, and the host dirs passed on the way (the mount's root first).

    The runtime resolves a mount's source on the host, so ``source`` itself may be a link; inside it
    each link is followed in the container's terms: an absolute target starts again from the
    container's root, and a path that leaves ``target`` is the image's own file, not ours.

    :raises _Unresolvable: a link that leaves the mount, or too many links.
    :raises OSError: from ``readlink`` (a component that is not a directory, ...).
    """
    root = os.path.realpath(source)
    mount = PurePosixPath(target).parts
    todo = list(reversed(PurePosixPath(path).parts[1:]))
    at = PurePosixPath("/")
    links = 0
    while todo:
        part = todo.pop()
        at = at.parent if part == ".." else at / part
        inside = at.parts[:len(mount)] == mount
        if not inside:
            if mount[:len(at.parts)] == at.parts:
                continue  # an ancestor of the mount point: the container's own directories
            raise _Unresolvable(f"it leads to {PurePosixPath(at, *reversed(todo))} in the container, outside "
                                f"{target} (where {source} is mounted): that is the image's own file, if any; "
                                f"make it a file, or a relative link that stays inside {source}")
        host = os.path.join(root, *at.parts[len(mount):])
        if not os.path.islink(host):
            continue
        links += 1
        if links > _MAX_LINKS:
            raise _Unresolvable(f"more than {_MAX_LINKS} symbolic links (a loop?) resolving {path}")
        link = os.readlink(host)
        at = PurePosixPath("/") if link.startswith("/") else at.parent
        todo.extend(reversed(PurePosixPath(link).parts[1:] if link.startswith("/") else PurePosixPath(link).parts))
    if at.parts[:len(mount)] != mount or at.parts == mount:
        raise _Unresolvable(f"it leads to {at} in the container, not to a file under {target}")
    relative = at.parts[len(mount):]
    file = os.path.join(root, *relative)
    dirs = [os.path.join(root, *relative[:i]) for i in range(len(relative))]
    if not os.path.lexists(file):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), file)
    return file, dirs

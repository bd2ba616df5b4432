"""Running DCMI: where ``libdcmi.so`` is, and its calls, made by a worker process under a deadline.

The library is looked for where the driver installs it, under the host root the profile is given
(``/`` on a node): ``/usr/local/Ascend/driver/lib64/driver``, ``.../lib64/common``, ``.../lib64``,
``/usr/local/dcmi`` (the ``LD_LIBRARY_PATH`` order of mind-cluster's npu-exporter image), then
``/usr/lib64`` (Atlas 200I A2 and 500 A2, mind-cluster's ``base.list_A200IA2``); the first file
found is used (docs/ascend-discovery.md#dcmi).

The calls run in one long-lived child process (:mod:`.worker`), started at the first call and
kept: a health pass costs one round trip, no process. Each call has a deadline (the npu-smi one,
``timeout_s``); the worker answers call by call, so the daemon knows which call did not answer. A
call past its deadline gets the worker killed (a hung library cannot be stopped any other way, and
a thread of the daemon hung in C would hold the library's locks for good); the calls after it are
not made, and DCMI is not asked again for ``retry_after_s`` seconds, so a wedged driver costs one
deadline and not one per health pass. A worker that cannot start (a library that does not load, or
whose ``dcmi_init`` fails or hangs) rests DCMI the same way, with the same error each
time, unless the library file changes (another inode, size or modification time: a driver
reinstalled): until 2026-12-07 every health pass on such a node started a Python worker to fail
again (about 7 a minute; the hundred-node bed, whose lab nodes then had a placeholder file, showed
it). The worker's output is read on the event loop, non-blocking
(``anyio.wait_readable`` under ``fail_after``), so the loop never waits on it and a round trip
costs no thread hop; only starting and reaping a worker go to a thread.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

import anyio
import attrs

from ascend_dra.profiles.ascend.dcmi.api import NOT_SUPPORTED, describe_code
from ascend_dra.profiles.options import ProfileOption

__all__ = ("DCMI_DIRS", "DCMI_OPTION", "RETRY_AFTER_S", "START_TIMEOUT_S", "Answer", "DcmiClient", "DcmiError",
           "DcmiSource", "LocatedDcmi", "locate_dcmi")

logger = logging.getLogger(__name__)

#: Where the driver installs ``libdcmi.so``, relative to the host root, in search order.
DCMI_DIRS = ("usr/local/Ascend/driver/lib64/driver", "usr/local/Ascend/driver/lib64/common",
             "usr/local/Ascend/driver/lib64", "usr/local/dcmi", "usr/lib64")
LIBRARY = "libdcmi.so"
#: Seconds DCMI is left alone after a call hung (npu-smi answers meanwhile).
RETRY_AFTER_S = 300.0
#: Least deadline of the worker's start, in seconds: a Python interpreter on a busy node.
START_TIMEOUT_S = 10.0
_WORKER = "ascend_dra.profiles.ascend.dcmi.worker"
#: ``--profile-option <profile>.dcmi=auto|never``: ``never`` leaves DCMI out of the chain and the
#: health passes (an escape hatch for a library that answers wrongly; one that fails falls back alone).
DCMI_OPTION = ProfileOption("DCMI first where libdcmi.so is installed (auto, the default), or never", ("auto", "never"))
_LINE_LIMIT = 1 << 20


class DcmiError(Exception):
    """Raised by :meth:`DcmiClient.call` when DCMI cannot be asked at all: the library does not load,
    lacks a call the tier needs, ``dcmi_init`` fails or hangs, or an earlier call hung and DCMI is
    left alone for a while. The message says which, and where the library is."""


@attrs.frozen
class LocatedDcmi:
    """Where ``libdcmi.so`` was found (None: nowhere) and every path looked at, host paths first."""

    path: Path | None
    searched: tuple[Path, ...]

    def describe(self) -> str:
        """``/usr/local/dcmi/libdcmi.so`` or ``no libdcmi.so in /a, /b, ...`` (for notes and logs)."""
        if self.path is not None:
            return str(self.path)
        return f"no {LIBRARY} in {', '.join(str(p.parent) for p in self.searched)}"


def locate_dcmi(host_root: Path) -> LocatedDcmi:
    """The first ``libdcmi.so`` of :data:`DCMI_DIRS` under ``host_root`` (blocking: stats files)."""
    searched = tuple(host_root / d / LIBRARY for d in DCMI_DIRS)
    return LocatedDcmi(next((p for p in searched if p.is_file()), None), searched)


@attrs.frozen
class Answer:
    """One call and what came back.

    :ivar call: the DCMI function name and its integer arguments.
    :ivar code: the return code (0 success, negative a DCMI error); None when no answer came (the
        call hung, or was not made after an earlier one hung or the worker died).
    :ivar value: the call's output as JSON (see :mod:`.worker`), None unless ``code`` is 0.
    :ivar problem: why there is no code.
    """

    call: tuple[object, ...]
    code: int | None
    value: object = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def unsupported(self) -> bool:
        """DCMI said "not supported" (-8255): the fact is unknown (npu-smi, which asks DCMI, would not know it)."""
        return self.code == NOT_SUPPORTED

    def describe(self) -> str:
        """``dcmi_get_device_health(4, 0): -8005 (internal error)``."""
        name, *args = self.call
        what = self.problem if self.code is None else describe_code(self.code)
        return f"{name}({', '.join(str(a) for a in args)}): {what}"


class _Worker:
    """One worker process, its stdin, and its stdout read without blocking."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        assert popen.stdout is not None
        self.fd = popen.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.buffer = b""
        self.finalizer = weakref.finalize(self, _reap, popen)

    async def line(self, timeout_s: float) -> bytes | None:
        """The next line (without the newline); None at the end of the output.

        :raises TimeoutError: no line within ``timeout_s`` seconds.
        """
        with anyio.fail_after(timeout_s):
            while b"\n" not in self.buffer:
                await anyio.wait_readable(self.fd)
                try:
                    chunk = os.read(self.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk or len(self.buffer) + len(chunk) > _LINE_LIMIT:
                    return None
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def send(self, document: object) -> None:
        """Write one request (a few KiB at most into an empty pipe: it does not block)."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(document).encode() + b"\n")
        self.popen.stdin.flush()

    def stop(self) -> None:
        """Kill the worker, collect it, close its pipes (idempotent)."""
        self.finalizer()


def _reap(popen: subprocess.Popen[bytes]) -> None:
    """Kill the worker, collect it and close its pipes; a worker stuck in the driver
    (uninterruptible) is left to the kernel."""
    if popen.poll() is None:
        popen.kill()
        try:
            popen.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            logger.warning("DCMI worker does not exit after SIGKILL; left behind", extra={"pid": popen.pid})
    for stream in (popen.stdin, popen.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


class DcmiClient:
    """Calls into one ``libdcmi.so`` through a worker process.

    :param library: the library's path (from :func:`locate_dcmi`).
    :param timeout_s: deadline of each call (and of ``dcmi_init``), in seconds.
    :param host_root: the host root the library was found under; its driver library directories
        go on the worker's ``LD_LIBRARY_PATH`` (``libdcmi.so`` loads ``libascend_hal.so`` and others).
    :param retry_after_s: seconds DCMI is not asked after a call hung.
    :param start_timeout_s: deadline of the worker's start (the interpreter, loading the library,
        ``dcmi_init``), in seconds; default the larger of ``timeout_s`` and :data:`START_TIMEOUT_S`.
    """

    def __init__(self, library: Path, *, timeout_s: float, host_root: Path = Path("/"),
                 retry_after_s: float = RETRY_AFTER_S, start_timeout_s: float | None = None) -> None:
        self.library = library
        self.timeout_s = timeout_s
        self.start_timeout_s = max(timeout_s, START_TIMEOUT_S) if start_timeout_s is None else start_timeout_s
        self.host_root = host_root
        self.retry_after_s = retry_after_s
        #: ``dcmi_get_dcmi_version`` of the running worker (None before the first call or if it failed).
        self.dcmi_version: str | None = None
        #: Calls of :data:`.api.CALLS` the library does not export.
        self.missing: tuple[str, ...] = ()
        self._worker: _Worker | None = None
        self._lock = anyio.Lock()
        self._seq = 0
        #: (monotonic time DCMI began to rest, why, the start failure's error or None for a hung call,
        #: the library file's identity then)
        self._resting: tuple[float, str, str | None, tuple[int, int, int] | None] | None = None

    @property
    def pid(self) -> int | None:
        """The worker's process ID; None when no worker runs."""
        return self._worker.popen.pid if self._worker is not None else None

    def _env(self) -> dict[str, str]:
        dirs = [str(self.library.parent), *(str(self.host_root / d) for d in DCMI_DIRS[:4])]
        dirs = [d for i, d in enumerate(dirs) if d not in dirs[:i] and os.path.isdir(d)]
        old = os.environ.get("LD_LIBRARY_PATH")
        return {**os.environ, "LD_LIBRARY_PATH": ":".join(dirs + ([old] if old else []))}

    async def _start(self) -> _Worker:
        popen = await anyio.to_thread.run_sync(lambda: subprocess.Popen(
            [sys.executable, "-m", _WORKER, str(self.library)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=self._env()))
        worker = _Worker(popen)
        try:
            line = await worker.line(self.start_timeout_s)
        except TimeoutError:
            await anyio.to_thread.run_sync(worker.stop)
            error = (f"{self.library}: dcmi_init: no answer within {self.start_timeout_s:g} s; the worker "
                     "was killed")
            self._rest(f"dcmi_init did not answer within {self.start_timeout_s:g} s", error)
            raise DcmiError(error) from None
        except BaseException:
            worker.stop()
            raise
        hello = _json(line)
        if not isinstance(hello, dict) or "hello" not in hello:
            await anyio.to_thread.run_sync(worker.stop)
            reason = hello.get("fatal") if isinstance(hello, dict) else None
            error = f"{self.library}: {reason or f'the DCMI worker exited ({popen.returncode})'}"
            self._rest("the DCMI worker could not start", error)
            raise DcmiError(error)
        self.dcmi_version = hello["hello"].get("dcmi_version")
        self.missing = tuple(hello["hello"].get("missing", ()))
        logger.info("DCMI worker started", extra={"library": str(self.library), "dcmi_version": self.dcmi_version,
                                                  "missing": list(self.missing), "pid": popen.pid})
        return worker

    def _rest(self, why: str, error: str | None = None) -> None:
        """Ask DCMI nothing for :attr:`retry_after_s`; ``error``: a start failure's, raised meanwhile."""
        self._resting = (time.monotonic(), why, error, self._library_identity())

    def _library_identity(self) -> tuple[int, int, int] | None:
        """The library file's (inode, size, mtime in ns); None when it cannot be read."""
        try:
            st = os.stat(self.library)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    async def call(self, calls: Sequence[tuple[object, ...]]) -> list[Answer]:
        """Make ``calls`` in order (``("dcmi_get_device_health", 4, 0)``), each under the deadline.

        :return: one :class:`Answer` per call, in order. When a call hangs the worker is killed: that
            answer and every later one have ``code`` None, and DCMI rests (:data:`RETRY_AFTER_S`).
        :raises DcmiError: DCMI cannot be asked (see the class); nothing was called.
        """
        if not calls:
            return []
        async with self._lock:
            if self._resting is not None:
                since, why, error, identity = self._resting
                # The same text at every call while it rests: the chain logs a failure again only
                # when its text changes.
                if time.monotonic() < since + self.retry_after_s and self._library_identity() == identity:
                    raise DcmiError(error or f"{self.library}: not asked: {why}; asked again "
                                             f"{self.retry_after_s:g} s after that")
                self._resting = None
            if self._worker is None or self._worker.popen.poll() is not None:
                self._worker = await self._start()
            worker = self._worker
            self._seq += 1
            try:
                answers = await self._exchange(worker, self._seq, list(calls))
            except BaseException:
                self._drop(worker)  # cancelled mid-exchange: its late lines must not answer the next one
                raise
            if any(a.code is None for a in answers):
                await anyio.to_thread.run_sync(self._drop, worker)
            return answers

    async def _exchange(self, worker: _Worker, seq: int, calls: list[tuple[object, ...]]) -> list[Answer]:
        """Send one request and read its answers."""
        answers: list[Answer] = []
        try:
            worker.send({"seq": seq, "calls": [list(c) for c in calls]})
        except OSError:
            pass  # a dead worker: the read below sees the end of its output
        for call in calls:
            try:
                line = await worker.line(self.timeout_s)
            except TimeoutError:
                problem = f"no answer within {self.timeout_s:g} s; the DCMI worker was killed"
                self._rest(f"{call[0]} hung")
                logger.warning("DCMI call hung; its worker is killed and DCMI rests",
                               extra={"call": list(call), "timeout_s": self.timeout_s,
                                      "retry_after_s": self.retry_after_s, "library": str(self.library)})
                answers.append(Answer(call, None, problem=problem))
                break
            document = _json(line) if line is not None else None
            if not isinstance(document, dict) or document.get("seq") != seq:
                exited = await anyio.to_thread.run_sync(_exit, worker.popen)
                problem = f"the DCMI worker {exited}" if line is None else "garbled worker answer"
                logger.warning("DCMI worker lost", extra={"call": list(call), "problem": problem,
                                                          "library": str(self.library)})
                answers.append(Answer(call, None, problem=problem))
                break
            answers.append(Answer(call, document["code"], document.get("value")))
        not_made = f"not made: {answers[-1].call[0]} did not answer" if answers else ""
        answers += [Answer(c, None, problem=not_made) for c in calls[len(answers):]]
        return answers

    def _drop(self, worker: _Worker) -> None:
        worker.stop()
        if self._worker is worker:
            self._worker = None

    def close(self) -> None:
        """Stop the worker (idempotent; also done when the client is garbage-collected)."""
        if self._worker is not None:
            self._drop(self._worker)


class DcmiSource:
    """What a profile keeps between discoveries: where the library is, and the client of it.

    :param timeout_s: deadline of each DCMI call, in seconds (the profile's npu-smi deadline).
    :param retry_after_s, start_timeout_s: see :class:`DcmiClient`.
    """

    def __init__(self, *, timeout_s: float, retry_after_s: float = RETRY_AFTER_S,
                 start_timeout_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.start_timeout_s = start_timeout_s
        self.located: LocatedDcmi | None = None
        self.client: DcmiClient | None = None
        #: The DCMI tier's last failure (the chain logs a failure once until it changes).
        self.last_failure: str | None = None

    async def refresh(self, host_root: Path) -> LocatedDcmi:
        """Look for the library again (it may be installed or removed while the daemon runs); a new
        path gets a new client, and a change is logged once (INFO), not at every discovery."""
        located = await anyio.to_thread.run_sync(locate_dcmi, host_root)
        if self.located is None or located.path != self.located.path:
            if located.path is None:
                logger.info("DCMI library not found; npu-smi answers", extra={"searched": located.describe()})
            else:
                logger.info("DCMI library found", extra={"library": str(located.path)})
        if self.client is not None and (located.path != self.client.library or host_root != self.client.host_root):
            self.close()
        if located.path is not None and self.client is None:
            self.client = DcmiClient(located.path, timeout_s=self.timeout_s, host_root=host_root,
                                     retry_after_s=self.retry_after_s, start_timeout_s=self.start_timeout_s)
        self.located = located
        return located

    def close(self) -> None:
        """Stop the client's worker, if any."""
        if self.client is not None:
            self.client.close()
            self.client = None


def _exit(popen: subprocess.Popen[bytes]) -> str:
    """``exited with status 1`` / ``was killed by signal 6`` (waits a moment for the exit status)."""
    try:
        status = popen.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        return "closed its output"
    return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"


def _json(line: bytes | None) -> object:
    if line is None:
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None

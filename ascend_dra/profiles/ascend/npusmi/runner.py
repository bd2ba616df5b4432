"""Running ``npu-smi``: an argument list (never a shell), a deadline, typed errors, parsed results.

The executable comes from ``ProfileContext.npu_smi`` (CLI ``--npu-smi PATH``). Each call runs
under ``anyio.fail_after(timeout_s)``; on the deadline the process is killed by ``run_process``'s
cancellation. stdin is ``/dev/null`` so a command that prompts (``set -t device-share``) cannot hang
on input, and the locale is forced to ``C`` because npu-smi also has a Chinese printer
(``npu_info_print_ch.c``, docs/ascend-hardware.md#npu-smi-output-format). A limiter keeps at most a few npu-smi
processes alive at once (each one opens the driver's management channel).
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess

import anyio

from ascend_dra.profiles.ascend.npusmi import keyvalue, readings, remap, tables, topo
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiFailed, NpuSmiNotFound, NpuSmiTimeout

__all__ = ("DEFAULT_CONCURRENCY", "DEFAULT_TIMEOUT_S", "NpuSmi")

logger = logging.getLogger(__name__)

#: Seconds one npu-smi call may take. A healthy call takes well under a second; a wedged driver
#: (docs/ascend-hardware.md#device-share-mode: a mismatched libvnpu.so hangs npu-smi) must not stall discovery.
DEFAULT_TIMEOUT_S = 10.0
#: npu-smi processes alive at once.
DEFAULT_CONCURRENCY = 4
_STDERR_LIMIT = 2000


class NpuSmi:
    """An npu-smi executable and the calls discovery makes.

    :param executable: path or ``$PATH`` name (``ProfileContext.npu_smi``).
    :param timeout_s: deadline of one call, in seconds.
    :param concurrency: npu-smi processes that may run at once.
    """

    def __init__(self, executable: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 concurrency: int = DEFAULT_CONCURRENCY) -> None:
        self.executable = executable
        self.timeout_s = timeout_s
        self._limiter = anyio.CapacityLimiter(concurrency)

    def command_line(self, *args: str) -> str:
        """The command as a shell-quoted string, for messages and logs."""
        return shlex.join([self.executable, *args])

    async def run(self, *args: str) -> str:
        """Run ``npu-smi <args>`` and return its stdout (UTF-8, undecodable bytes replaced).

        :raises NpuSmiNotFound: if the executable does not exist or is not executable.
        :raises NpuSmiFailed: if it exits with a non-zero status (with its stderr).
        :raises NpuSmiTimeout: if it takes longer than ``timeout_s`` (it is killed).
        """
        command = self.command_line(*args)
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        async with self._limiter:
            logger.debug("running npu-smi", extra={"command": command})
            try:
                with anyio.fail_after(self.timeout_s):
                    result = await anyio.run_process(
                        [self.executable, *args], check=False, stdin=subprocess.DEVNULL, env=env
                    )
            except TimeoutError:
                raise NpuSmiTimeout(command, self.timeout_s) from None
            except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
                raise NpuSmiNotFound(command, self.executable, exc.strerror or str(exc)) from exc
        if result.returncode != 0:
            stderr = result.stderr.decode("utf-8", "replace")[:_STDERR_LIMIT]
            if not stderr.strip():
                # npu-smi prints some failures (e.g. "dcmi module initialize failed") on stdout.
                stderr = result.stdout.decode("utf-8", "replace")[:_STDERR_LIMIT]
            raise NpuSmiFailed(command, result.returncode, stderr)
        return result.stdout.decode("utf-8", "replace")

    # -- parsed calls (each raises what run() raises, or NpuSmiParseError) ------------------------

    async def info(self) -> tables.InfoTable:
        """``npu-smi info`` parsed by :func:`tables.parse_info`."""
        return tables.parse_info(await self.run("info"), command=self.command_line("info"))

    async def mapping(self) -> tuple[tables.MappingRow, ...]:
        """``npu-smi info -m`` parsed by :func:`tables.parse_mapping`."""
        return tables.parse_mapping(await self.run("info", "-m"), command=self.command_line("info", "-m"))

    async def listing(self) -> keyvalue.NpuList:
        """``npu-smi info -l`` parsed by :func:`keyvalue.parse_list`."""
        return keyvalue.parse_list(await self.run("info", "-l"), command=self.command_line("info", "-l"))

    async def board(self, npu_id: int) -> keyvalue.BoardInfo:
        """``npu-smi info -t board -i <npu_id>`` parsed by :func:`keyvalue.parse_board`."""
        args = ("info", "-t", "board", "-i", str(npu_id))
        return keyvalue.parse_board(await self.run(*args), command=self.command_line(*args))

    async def chip_board(self, npu_id: int, chip_id: int) -> keyvalue.ChipBoardInfo:
        """``npu-smi info -t board -i <npu_id> -c <chip_id>`` parsed by :func:`keyvalue.parse_chip_board`."""
        args = ("info", "-t", "board", "-i", str(npu_id), "-c", str(chip_id))
        return keyvalue.parse_chip_board(await self.run(*args), command=self.command_line(*args))

    async def common(self, npu_id: int) -> readings.CommonInfo:
        """``npu-smi info -t common -i <npu_id>`` parsed by :func:`readings.parse_common`."""
        args = ("info", "-t", "common", "-i", str(npu_id))
        return readings.parse_common(await self.run(*args), command=self.command_line(*args))

    async def usages(self, npu_id: int) -> readings.UsagesInfo:
        """``npu-smi info -t usages -i <npu_id>`` parsed by :func:`readings.parse_usages`."""
        args = ("info", "-t", "usages", "-i", str(npu_id))
        return readings.parse_usages(await self.run(*args), command=self.command_line(*args))

    async def memory(self, npu_id: int) -> readings.MemoryInfo:
        """``npu-smi info -t memory -i <npu_id>`` parsed by :func:`readings.parse_memory`."""
        args = ("info", "-t", "memory", "-i", str(npu_id))
        return readings.parse_memory(await self.run(*args), command=self.command_line(*args))

    async def health(self, npu_id: int, chip_id: int) -> readings.HealthInfo:
        """``npu-smi info -t health -i <npu_id> -c <chip_id>`` parsed by :func:`readings.parse_health`."""
        args = ("info", "-t", "health", "-i", str(npu_id), "-c", str(chip_id))
        return readings.parse_health(await self.run(*args), command=self.command_line(*args))

    async def topo(self) -> topo.Topology:
        """``npu-smi info -t topo`` parsed by :func:`.topo.parse_topo`."""
        args = ("info", "-t", "topo")
        return topo.parse_topo(await self.run(*args), command=self.command_line(*args))

    async def phyid_remap(self, physical_id: int) -> remap.PhyIdRemap:
        """``npu-smi info -t phyid-remap -p <physical_id>`` parsed by :func:`.remap.parse_phyid_remap`."""
        args = ("info", "-t", "phyid-remap", "-p", str(physical_id))
        return remap.parse_phyid_remap(await self.run(*args), physical_id=physical_id,
                                       command=self.command_line(*args))

    async def device_share(self) -> tuple[keyvalue.DeviceShare, ...]:
        """``npu-smi info -t device-share`` parsed by :func:`keyvalue.parse_device_share`."""
        args = ("info", "-t", "device-share")
        return keyvalue.parse_device_share(await self.run(*args), command=self.command_line(*args))

    async def template_info(self, npu_id: int | None = None) -> tuple[tables.Template, ...]:
        """``npu-smi info -t template-info [-i <npu_id>]`` parsed by :func:`tables.parse_template_info`."""
        args = ("info", "-t", "template-info", *(("-i", str(npu_id)) if npu_id is not None else ()))
        return tables.parse_template_info(await self.run(*args), command=self.command_line(*args))

    async def vnpu_info(self, npu_id: int, chip_id: int) -> tables.VnpuInfo:
        """``npu-smi info -t info-vnpu -i <npu_id> -c <chip_id>`` parsed by :func:`tables.parse_vnpu_info`."""
        args = ("info", "-t", "info-vnpu", "-i", str(npu_id), "-c", str(chip_id))
        return tables.parse_vnpu_info(await self.run(*args), command=self.command_line(*args))

    async def vnpu_cfg_recover(self) -> bool:
        """``npu-smi info -t vnpu-cfg-recover`` parsed by :func:`keyvalue.parse_vnpu_cfg_recover`:
        whether the device restores its vNPUs after a restart."""
        args = ("info", "-t", "vnpu-cfg-recover")
        return keyvalue.parse_vnpu_cfg_recover(await self.run(*args), command=self.command_line(*args))

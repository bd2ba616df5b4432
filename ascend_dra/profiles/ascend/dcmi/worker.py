"""The DCMI worker: a child process that loads ``libdcmi.so`` and makes the calls the daemon asks for.

Run as ``python -m ascend_dra.profiles.ascend.dcmi.worker <path of libdcmi.so>`` by :mod:`.client`;
never by hand. Why a process and not a thread of the daemon: a DCMI call can hang in the driver
(as npu-smi can), and a thread that hangs in C cannot be stopped, keeps whatever lock the library
holds, and a crash in the library (a struct of the wrong size, a driver bug) would end the daemon.
A process is killed at the deadline and started again; its crash is an error code.

Protocol, one JSON document per line. The worker first prints ``{"hello": {"dcmi_version": ...,
"missing": [names]}}`` after ``dcmi_init`` succeeded, or ``{"fatal": message, "code": n|null}`` and
exits 1. Then, per request ``{"seq": n, "calls": [[name, arg, ...], ...]}`` on stdin, it prints one
line per call, in order and as soon as the call returns (so the daemon knows which call hangs):
``{"seq": n, "code": 0, "value": ...}``, or ``{"seq": n, "code": <DCMI error>}``. End of stdin ends it.

Standard library only (it starts in a few tens of milliseconds). A thread ends it when the daemon is
gone, so it does not outlive the daemon even while hung in a call; the end of stdin ends it too.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ascend_dra.profiles.ascend.dcmi import api

__all__ = ("main",)

_PARENT_POLL_S = 1.0
_TEXT_LEN = 256
_MAX_CARDS = 256
_MAX_ERROR_CODES = 128


def _text(raw: Any) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")


class Worker:
    """The bound library and one marshaller per call name (arguments in, a JSON value out)."""

    def __init__(self, functions: dict[str, Any]) -> None:
        self.f = functions

    def call(self, name: str, args: list[int]) -> tuple[int, object]:
        """Make one call. :return: (DCMI return code, JSON-able value or None)."""
        if name not in self.f:
            return api.FUNCTION_NOT_FOUND, None
        handler: Callable[..., tuple[int, object]] = getattr(self, "_" + name.removeprefix("dcmi_get_"))
        return handler(*args)

    def _version(self, name: str) -> tuple[int, object]:
        buf = ctypes.create_string_buffer(_TEXT_LEN)
        code = self.f[name](buf, _TEXT_LEN)
        return code, _text(buf.raw) if code == 0 else None

    def _dcmi_version(self) -> tuple[int, object]:
        return self._version("dcmi_get_dcmi_version")

    def _driver_version(self) -> tuple[int, object]:
        return self._version("dcmi_get_driver_version")

    def _card_list(self) -> tuple[int, object]:
        count, cards = ctypes.c_int(), (ctypes.c_int * _MAX_CARDS)()
        code = self.f["dcmi_get_card_list"](ctypes.byref(count), cards, _MAX_CARDS)
        return code, list(cards[:max(0, min(count.value, _MAX_CARDS))]) if code == 0 else None

    def _device_id_in_card(self, card: int) -> tuple[int, object]:
        top, mcu, cpu = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        code = self.f["dcmi_get_device_id_in_card"](card, ctypes.byref(top), ctypes.byref(mcu), ctypes.byref(cpu))
        return code, {"device_id_max": top.value, "mcu_id": mcu.value, "cpu_id": cpu.value} if code == 0 else None

    def _device_logic_id(self, card: int, device: int) -> tuple[int, object]:
        logic = ctypes.c_int()
        code = self.f["dcmi_get_device_logic_id"](ctypes.byref(logic), card, device)
        return code, logic.value if code == 0 else None

    def _device_phyid_from_logicid(self, logic: int) -> tuple[int, object]:
        physical = ctypes.c_uint()
        code = self.f["dcmi_get_device_phyid_from_logicid"](logic, ctypes.byref(physical))
        return code, physical.value if code == 0 else None

    def _device_chip_info(self, card: int, device: int) -> tuple[int, object]:
        info = api.ChipInfo()
        code = self.f["dcmi_get_device_chip_info"](card, device, ctypes.byref(info))
        return code, {"chip_type": _text(info.chip_type), "chip_name": _text(info.chip_name),
                      "chip_ver": _text(info.chip_ver), "aicore_cnt": info.aicore_cnt} if code == 0 else None

    def _device_pcie_info_v2(self, card: int, device: int) -> tuple[int, object]:
        info = api.PcieInfoAll()
        code = self.f["dcmi_get_device_pcie_info_v2"](card, device, ctypes.byref(info))
        return code, {"venderid": info.venderid, "deviceid": info.deviceid, "domain": info.domain,
                      "bus": info.bdf_busid, "device": info.bdf_deviceid, "function": info.bdf_funcid} \
            if code == 0 else None

    def _device_health(self, card: int, device: int) -> tuple[int, object]:
        health = ctypes.c_uint()
        code = self.f["dcmi_get_device_health"](card, device, ctypes.byref(health))
        return code, health.value if code == 0 else None

    def _device_errorcode_v2(self, card: int, device: int) -> tuple[int, object]:
        count, codes = ctypes.c_int(), (ctypes.c_uint * _MAX_ERROR_CODES)()
        code = self.f["dcmi_get_device_errorcode_v2"](card, device, ctypes.byref(count), codes, _MAX_ERROR_CODES)
        return code, list(codes[:max(0, min(count.value, _MAX_ERROR_CODES))]) if code == 0 else None

    def _device_die_v2(self, card: int, device: int, kind: int) -> tuple[int, object]:
        die = api.DieId()
        code = self.f["dcmi_get_device_die_v2"](card, device, kind, ctypes.byref(die))
        return code, list(die.soc_die) if code == 0 else None

    def _device_hbm_info(self, card: int, device: int) -> tuple[int, object]:
        info = api.HbmInfo()
        code = self.f["dcmi_get_device_hbm_info"](card, device, ctypes.byref(info))
        return code, {"memory_size": info.memory_size, "memory_usage": info.memory_usage} if code == 0 else None

    def _device_memory_info_v3(self, card: int, device: int) -> tuple[int, object]:
        info = api.MemoryInfo()
        code = self.f["dcmi_get_device_memory_info_v3"](card, device, ctypes.byref(info))
        return code, {"memory_size": info.memory_size, "memory_available": info.memory_available} \
            if code == 0 else None

    def _device_utilization_rate(self, card: int, device: int, kind: int) -> tuple[int, object]:
        rate = ctypes.c_uint()
        code = self.f["dcmi_get_device_utilization_rate"](card, device, kind, ctypes.byref(rate))
        return code, rate.value if code == 0 else None

    def _device_temperature(self, card: int, device: int) -> tuple[int, object]:
        celsius = ctypes.c_int()
        code = self.f["dcmi_get_device_temperature"](card, device, ctypes.byref(celsius))
        return code, celsius.value if code == 0 else None

    def _device_power_info(self, card: int, device: int) -> tuple[int, object]:
        tenths_of_watt = ctypes.c_int()
        code = self.f["dcmi_get_device_power_info"](card, device, ctypes.byref(tenths_of_watt))
        return code, tenths_of_watt.value if code == 0 else None

    # -- vNPUs: template in, the vNPU's ID and group out; its template name and group read back.

    def _dcmi_create_vdevice(self, card: int, device: int, vdev_id: int, template: str) -> tuple[int, object]:
        name = template.encode()
        if not isinstance(vdev_id, int) or not 0 < len(name) <= api.TEMPLATE_NAME_MAX or b"\0" in name:
            raise ValueError(f"template name {template!r} or vNPU ID {vdev_id!r} does not fit the header's struct")
        request, out = api.CreateVdevRes(vdev_id=vdev_id, vfg_id=0, template_name=name), api.CreateVdevOut()
        code = self.f["dcmi_create_vdevice"](card, device, ctypes.byref(request), ctypes.byref(out))
        return code, {"vdev_id": out.vdev_id, "vfg_id": out.vfg_id} if code == 0 else None

    def _dcmi_set_destroy_vdevice(self, card: int, device: int, vdev_id: int) -> tuple[int, object]:
        return self.f["dcmi_set_destroy_vdevice"](card, device, vdev_id), None

    def _vnpu_config_recover_mode(self) -> tuple[int, object]:
        mode = ctypes.c_uint()
        code = self.f["dcmi_get_vnpu_config_recover_mode"](ctypes.byref(mode))
        return code, mode.value if code == 0 else None

    def _device_info(self, card: int, device: int, main_cmd: int, sub_cmd: int, *args: int) -> tuple[int, object]:
        """The VDEV_MNG queries: the chip's vNPU IDs, or one vNPU (``args``: its ID)."""
        queries = (api.VMNG_GET_TOTAL_RESOURCE, api.VMNG_GET_VDEV_RESOURCE)
        if main_cmd != api.MAIN_CMD_VDEV_MNG or sub_cmd not in queries:
            raise ValueError(f"dcmi_get_device_info({main_cmd}, {sub_cmd}) is not a query the worker decodes")
        if sub_cmd == api.VMNG_GET_TOTAL_RESOURCE:
            total = api.SocTotalResource()
            size = ctypes.c_uint(ctypes.sizeof(total))
            code = self.f["dcmi_get_device_info"](card, device, main_cmd, sub_cmd, ctypes.byref(total),
                                                  ctypes.byref(size))
            return code, {"vdev_id": list(total.vdev_id[:max(0, min(total.vdev_num, len(total.vdev_id)))]),
                          "vfg_num": total.vfg_num} if code == 0 else None
        (vdev_id,) = args
        query = api.VdevQuery(vdev_id=vdev_id)
        size = ctypes.c_uint(ctypes.sizeof(query))
        code = self.f["dcmi_get_device_info"](card, device, main_cmd, sub_cmd, ctypes.byref(query), ctypes.byref(size))
        info = query.query_info
        return code, {"vdev_id": query.vdev_id, "name": _text(info.name), "status": info.status,
                      "vfg_id": info.vfg_id, "container_id": info.container_id,
                      "aicore": info.computing.aic, "memory_mb": info.computing.memory_size} if code == 0 else None


def _watch_parent() -> None:
    """End the process when the daemon is gone, even while the main thread is hung in a DCMI call
    (ctypes releases the GIL during a call). A dead parent is seen as a change of parent process."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(_PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _answers() -> Any:
    """The daemon's end of the protocol: the original stdout, moved to a descriptor of its own. File
    descriptor 1 then goes where stderr goes (the daemon gives /dev/null), so whatever the library
    prints cannot be taken for an answer."""
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


_out: Any = None


def _say(document: object) -> None:
    _out.write(json.dumps(document, separators=(",", ":")) + "\n")
    _out.flush()


def main(argv: list[str] | None = None) -> int:
    """Serve requests until stdin ends. :return: the exit status (1 when the library is unusable)."""
    global _out
    args = sys.argv[1:] if argv is None else argv
    _out = _answers()
    _watch_parent()
    if len(args) != 1:
        _say({"fatal": "usage: dcmi_worker <path of libdcmi.so>", "code": None})
        return 1
    try:
        lib = ctypes.CDLL(args[0])
    except OSError as exc:
        _say({"fatal": f"cannot load {args[0]}: {exc}", "code": None})
        return 1
    functions, missing = api.bind(lib)
    absent = [name for name in api.REQUIRED if name in missing]
    if absent:
        _say({"fatal": f"{args[0]} does not export {', '.join(absent)}", "code": api.FUNCTION_NOT_FOUND})
        return 1
    code = functions["dcmi_init"]()
    if code != 0:
        _say({"fatal": f"dcmi_init returned {api.describe_code(code)}", "code": code})
        return 1
    worker = Worker(functions)
    version_code, version = worker.call("dcmi_get_dcmi_version", [])
    _say({"hello": {"dcmi_version": version if version_code == 0 else None, "missing": list(missing)}})
    for line in sys.stdin:
        request = json.loads(line)
        for name, *call_args in request["calls"]:
            try:
                code, value = worker.call(name, call_args)
            except (ctypes.ArgumentError, TypeError, ValueError, KeyError, AttributeError) as exc:
                _say({"seq": request["seq"], "code": -8001, "error": f"{name}{tuple(call_args)}: {exc}"})
                continue
            _say({"seq": request["seq"], "code": code, "value": value} if code == 0
                 else {"seq": request["seq"], "code": code})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""DCMI's C interface as ctypes sees it: return codes, structs, and the prototypes of the calls we make.

Facts from DCMI's published header ``dcmi_interface_api.h`` (the driver's ``src/custom/include`` copy
and the one mind-cluster vendors in ``component/ascend-common/devmanager/dcmi``); the bindings are
our own. Every call returns ``int``: ``0`` is success, a negative number is an error code
(:data:`ERRORS`); ``-8255`` means the chip or the driver does not support the call. IDs: ``card_id``
is npu-smi's NPU ID (``-i``), ``device_id`` the chip's index in its card (``-c``, the chip ID);
the logic and physical IDs have calls of their own (docs/ascend-hardware.md#the-ids).

This module imports nothing but the standard library: the DCMI worker process
(:mod:`.worker`) loads it without the rest of the daemon.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping

__all__ = (
    "CALLS",
    "DIE_DDIE",
    "DIE_VDIE",
    "ERRORS",
    "FUNCTION_NOT_FOUND",
    "HEALTH_STATES",
    "NOT_SUPPORTED",
    "REQUIRED",
    "UTILIZATION_AICORE",
    "ChipInfo",
    "DieId",
    "HbmInfo",
    "MemoryInfo",
    "PcieInfoAll",
    "bind",
    "describe_code",
)

#: ``DCMI_ERR_CODE_NOT_SUPPORT`` (``DCMI_ERROR_CODE_BASE - 255``): the call is not supported here.
#: npu-smi passes the value on as if it were one (``8255`` in a count), and so does the peer driver.
NOT_SUPPORTED = -8255
#: A symbol the library does not export (mind-cluster's wrapper returns the same number then).
FUNCTION_NOT_FOUND = -99998

#: Return codes of the header (``DCMI_ERROR_CODE_BASE`` is -8000) and their meaning.
ERRORS: Mapping[int, str] = {
    -8001: "invalid parameter",
    -8002: "operation not permitted",
    -8003: "memory operation failed",
    -8004: "secure function failed",
    -8005: "internal error",
    -8006: "timed out",
    -8007: "invalid device ID",
    -8008: "device does not exist",
    -8009: "ioctl failed",
    -8010: "sending the message failed",
    -8011: "receiving the message failed",
    -8012: "not ready",
    -8013: "not supported in a container",
    -8014: "file operation failed",
    -8015: "reset failed",
    -8016: "operation aborted",
    -8017: "upgrading",
    -8020: "resource occupied",
    -8022: "partition not right",
    -8023: "configuration does not exist",
    NOT_SUPPORTED: "not supported",
    FUNCTION_NOT_FOUND: "the library does not export this call",
}

#: ``dcmi_get_device_health`` values, as npu-smi names them (``npu_common_get_health_state_str``,
#: npu_common.c): 0 OK, 1 Warning, 2 Alarm, 3 Critical, 4 UNKNOWN. npu-smi prints no first table
#: row for any other value (docs/ascend-hardware.md#npu-smi-commands).
HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")

#: ``enum dcmi_die_type``: NDIE 0, VDIE 1 (the uuid of 910, 910B, A3 and the 310P's ``Die ID``),
#: DDIE 2 (the 950's).
DIE_VDIE = 1
DIE_DDIE = 2

#: ``dcmi_get_device_utilization_rate``'s ``input_type`` for the AI cores (npu-smi's ``AICore(%)``;
#: 1 is memory, 3 the AI CPUs, 4 the control CPUs, 5 the memory bandwidth, 6 the HBM).
UTILIZATION_AICORE = 2

_NAME_LEN = 32  # MAX_CHIP_NAME_LEN
_DIE_ID_COUNT = 5


class ChipInfo(ctypes.Structure):
    """``struct dcmi_chip_info``: ``chip_type`` (``Ascend``), ``chip_name`` (``910B4``), ``chip_ver``
    (``V1``), ``aicore_cnt`` (AI cores of the chip; 8255 where not supported)."""

    _fields_ = (("chip_type", ctypes.c_ubyte * _NAME_LEN), ("chip_name", ctypes.c_ubyte * _NAME_LEN),
                ("chip_ver", ctypes.c_ubyte * _NAME_LEN), ("aicore_cnt", ctypes.c_uint))


class PcieInfoAll(ctypes.Structure):
    """``struct dcmi_pcie_info_all`` (64 bytes): vendor and device IDs, domain, bus, device, function."""

    _fields_ = (("venderid", ctypes.c_uint), ("subvenderid", ctypes.c_uint), ("deviceid", ctypes.c_uint),
                ("subdeviceid", ctypes.c_uint), ("domain", ctypes.c_int), ("bdf_busid", ctypes.c_uint),
                ("bdf_deviceid", ctypes.c_uint), ("bdf_funcid", ctypes.c_uint), ("reserve", ctypes.c_ubyte * 32))


class DieId(ctypes.Structure):
    """``struct dcmi_die_id``: five 32-bit words; npu-smi prints each as ``%08X``."""

    _fields_ = (("soc_die", ctypes.c_uint * _DIE_ID_COUNT),)


class HbmInfo(ctypes.Structure):
    """``struct dcmi_hbm_info``: ``memory_size`` and ``memory_usage`` in MB (npu-smi's ``HBM-Usage(MB)``)."""

    _fields_ = (("memory_size", ctypes.c_ulonglong), ("freq", ctypes.c_uint), ("memory_usage", ctypes.c_ulonglong),
                ("temp", ctypes.c_int), ("bandwith_util_rate", ctypes.c_uint))


class MemoryInfo(ctypes.Structure):
    """``struct dcmi_get_memory_info_stru`` (``dcmi_get_device_memory_info_v3``): DDR ``memory_size``
    and ``memory_available`` in MB, hugepages (npu-smi's ``Memory-Usage(MB)`` on 310/310P)."""

    _fields_ = (("memory_size", ctypes.c_ulonglong), ("memory_available", ctypes.c_ulonglong),
                ("freq", ctypes.c_uint), ("hugepagesize", ctypes.c_ulong), ("hugepages_total", ctypes.c_ulong),
                ("hugepages_free", ctypes.c_ulong), ("utiliza", ctypes.c_uint), ("reserve", ctypes.c_ubyte * 60))


assert ctypes.sizeof(PcieInfoAll) == 64, "the header: the size of dcmi_pcie_info_all is 64"

_INT, _UINT = ctypes.c_int, ctypes.c_uint
_P = ctypes.POINTER

#: name -> argument types of every DCMI call the worker makes (all return ``int``).
CALLS: Mapping[str, tuple[object, ...]] = {
    "dcmi_init": (),
    "dcmi_get_dcmi_version": (ctypes.c_char_p, _UINT),
    "dcmi_get_driver_version": (ctypes.c_char_p, _UINT),
    "dcmi_get_card_list": (_P(_INT), _P(_INT), _INT),
    "dcmi_get_device_id_in_card": (_INT, _P(_INT), _P(_INT), _P(_INT)),
    "dcmi_get_device_logic_id": (_P(_INT), _INT, _INT),
    "dcmi_get_device_phyid_from_logicid": (_UINT, _P(_UINT)),
    "dcmi_get_device_chip_info": (_INT, _INT, _P(ChipInfo)),
    "dcmi_get_device_pcie_info_v2": (_INT, _INT, _P(PcieInfoAll)),
    "dcmi_get_device_health": (_INT, _INT, _P(_UINT)),
    "dcmi_get_device_errorcode_v2": (_INT, _INT, _P(_INT), _P(_UINT), _UINT),
    "dcmi_get_device_die_v2": (_INT, _INT, _INT, _P(DieId)),
    "dcmi_get_device_hbm_info": (_INT, _INT, _P(HbmInfo)),
    "dcmi_get_device_memory_info_v3": (_INT, _INT, _P(MemoryInfo)),
    "dcmi_get_device_utilization_rate": (_INT, _INT, _INT, _P(_UINT)),
    "dcmi_get_device_temperature": (_INT, _INT, _P(_INT)),
    "dcmi_get_device_power_info": (_INT, _INT, _P(_INT)),
}

#: Without these the tier cannot name a chip: a library that lacks one is refused.
REQUIRED = ("dcmi_init", "dcmi_get_card_list", "dcmi_get_device_id_in_card", "dcmi_get_device_logic_id",
            "dcmi_get_device_phyid_from_logicid")


def bind(lib: ctypes.CDLL) -> tuple[dict[str, ctypes._CFuncPtr], tuple[str, ...]]:
    """Set the prototype of every call of :data:`CALLS` that ``lib`` exports.

    :return: name -> function, and the names ``lib`` does not export.
    """
    found: dict[str, ctypes._CFuncPtr] = {}
    missing = []
    for name, argtypes in CALLS.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        function.argtypes = argtypes
        function.restype = ctypes.c_int
        found[name] = function
    return found, tuple(missing)


def describe_code(code: int) -> str:
    """``-8005 (internal error)``; an unknown code is given as the number alone."""
    meaning = ERRORS.get(code)
    return f"{code} ({meaning})" if meaning else str(code)

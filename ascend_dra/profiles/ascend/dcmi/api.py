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
    "MAIN_CMD_VDEV_MNG",
    "NOT_SUPPORTED",
    "REQUIRED",
    "SIZES",
    "TEMPLATE_NAME_MAX",
    "UTILIZATION_AICORE",
    "VDEV_ID_ANY",
    "VMNG_GET_TOTAL_RESOURCE",
    "VMNG_GET_VDEV_RESOURCE",
    "ChipInfo",
    "CreateVdevOut",
    "CreateVdevRes",
    "DieId",
    "HbmInfo",
    "MemoryInfo",
    "PcieInfoAll",
    "SocTotalResource",
    "VdevQuery",
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

# -- vNPUs (the hard split): dcmi_create_vdevice, dcmi_set_destroy_vdevice, and the VDEV_MNG queries
# of dcmi_get_device_info. Field order and array sizes as the header gives them; the sizes asserted
# below are what a C compiler makes of the header's structs on x86-64 and aarch64 (LP64), and
# tests/unit/test_dcmi_vnpu.py compares every offset with gcc's.

#: ``enum dcmi_main_cmd``: ``DCMI_MAIN_CMD_VDEV_MNG`` (``DCMI_MAIN_CMD_SVM`` 51, plus one).
MAIN_CMD_VDEV_MNG = 52
#: ``DCMI_VDEV_MNG_SUB_CMD``: one vNPU's resources (``struct dcmi_vdev_query_stru``, ``vdev_id`` in).
VMNG_GET_VDEV_RESOURCE = 0
#: ``DCMI_VDEV_MNG_SUB_CMD``: the chip's totals and its vNPU IDs (``struct dcmi_soc_total_resource``).
VMNG_GET_TOTAL_RESOURCE = 1
#: ``vdev_id`` of ``dcmi_create_vdevice`` for "any free ID" (the header's call example passes ``0xFFFFFFFF``);
#: ascend-dra always names the ID (docs/hard-vnpu.md).
VDEV_ID_ANY = 0xFFFFFFFF

_VDEV_RES_NAME_LEN = 16  # DCMI_VDEV_RES_NAME_LEN
_VDEV_FOR_RESERVE = 32  # DCMI_VDEV_FOR_RESERVE
_VDEV_SIZE = 20  # DCMI_VDEV_SIZE: 2 x unsigned long long + unsigned int
_SOC_SPLIT_MAX = 32  # DCMI_SOC_SPLIT_MAX
_TEMPLATE_NAME_LEN = 32  # TEMPLATE_NAME_LEN
#: The longest template name ``dcmi_create_vdevice`` takes (its ``char template_name[32]`` holds the NUL).
TEMPLATE_NAME_MAX = _TEMPLATE_NAME_LEN - 1


class CreateVdevRes(ctypes.Structure):
    """``struct dcmi_create_vdev_res_stru`` (104 bytes): ``vdev_id`` (the vNPU ID asked for, or
    :data:`VDEV_ID_ANY`), ``vfg_id`` (the vNPU group; 0 as npu-smi passes it without ``-g``),
    ``template_name`` (``vir10_3c_16g``, NUL-terminated)."""

    _fields_ = (("vdev_id", ctypes.c_uint), ("vfg_id", ctypes.c_uint),
                ("template_name", ctypes.c_char * _TEMPLATE_NAME_LEN), ("reserved", ctypes.c_ubyte * 64))


class CreateVdevOut(ctypes.Structure):
    """``struct dcmi_create_vdev_out`` (52 bytes): the vNPU made: its ID, PCIe bus/device/function and group."""

    _fields_ = (("vdev_id", ctypes.c_uint), ("pcie_bus", ctypes.c_uint), ("pcie_device", ctypes.c_uint),
                ("pcie_func", ctypes.c_uint), ("vfg_id", ctypes.c_uint),
                ("reserved", ctypes.c_ubyte * _VDEV_FOR_RESERVE))


class BaseResource(ctypes.Structure):
    """``struct dcmi_base_resource`` (64 bytes)."""

    _fields_ = (("token", ctypes.c_ulonglong), ("token_max", ctypes.c_ulonglong), ("task_timeout", ctypes.c_ulonglong),
                ("vfg_id", ctypes.c_uint), ("vip_mode", ctypes.c_ubyte),
                ("reserved", ctypes.c_ubyte * (_VDEV_FOR_RESERVE - 1)))


class ComputingResource(ctypes.Structure):
    """``struct dcmi_computing_resource`` (96 bytes): AI cores (``aic``, a float), memory in MB, AICPUs, ..."""

    _fields_ = (("aic", ctypes.c_float), ("aiv", ctypes.c_float),
                *((name, ctypes.c_ushort) for name in ("dsa", "rtsq", "acsq", "cdqm", "c_core", "ffts", "sdma",
                                                       "pcie_dma")),
                ("memory_size", ctypes.c_ulonglong),
                *((name, ctypes.c_uint) for name in ("event_id", "notify_id", "stream_id", "model_id")),
                *((name, ctypes.c_ushort) for name in ("topic_schedule_aicpu", "host_ctrl_cpu", "host_aicpu",
                                                       "device_aicpu", "topic_ctrl_cpu_slot")),
                ("vdev_aicore_utilization", ctypes.c_uint), ("vdev_memory_total", ctypes.c_ulonglong),
                ("vdev_memory_free", ctypes.c_ulonglong),
                ("reserved", ctypes.c_ubyte * (_VDEV_FOR_RESERVE - _VDEV_SIZE)))


class MediaResource(ctypes.Structure):
    """``struct dcmi_media_resource`` (56 bytes): DVPP engines, floats."""

    _fields_ = (*((name, ctypes.c_float) for name in ("jpegd", "jpege", "vpc", "vdec", "pngd", "venc")),
                ("reserved", ctypes.c_ubyte * _VDEV_FOR_RESERVE))


class VdevQueryInfo(ctypes.Structure):
    """``struct dcmi_vdev_query_info`` (256 bytes): ``name`` is the vNPU's template name."""

    _fields_ = (("name", ctypes.c_char * _VDEV_RES_NAME_LEN), ("status", ctypes.c_uint),
                ("is_container_used", ctypes.c_uint), ("vfid", ctypes.c_uint), ("vfg_id", ctypes.c_uint),
                ("container_id", ctypes.c_ulonglong), ("base", BaseResource), ("computing", ComputingResource),
                ("media", MediaResource))


class VdevQuery(ctypes.Structure):
    """``struct dcmi_vdev_query_stru`` (264 bytes), the buffer of :data:`VMNG_GET_VDEV_RESOURCE`:
    ``vdev_id`` in, ``query_info`` out."""

    _fields_ = (("vdev_id", ctypes.c_uint), ("query_info", VdevQueryInfo))


class SocTotalResource(ctypes.Structure):
    """``struct dcmi_soc_total_resource`` (360 bytes), the buffer of :data:`VMNG_GET_TOTAL_RESOURCE`:
    ``vdev_num`` vNPU IDs in ``vdev_id`` (at most 32), the vNPU groups, the chip's resources."""

    _fields_ = (("vdev_num", ctypes.c_uint), ("vdev_id", ctypes.c_uint * _SOC_SPLIT_MAX), ("vfg_num", ctypes.c_uint),
                ("vfg_bitmap", ctypes.c_uint), ("base", BaseResource), ("computing", ComputingResource),
                ("media", MediaResource))


#: Struct -> its size in bytes under the header (LP64).
SIZES: Mapping[type[ctypes.Structure], int] = {
    CreateVdevRes: 104, CreateVdevOut: 52, BaseResource: 64, ComputingResource: 96, MediaResource: 56,
    VdevQueryInfo: 256, VdevQuery: 264, SocTotalResource: 360}
for _struct, _size in SIZES.items():
    assert ctypes.sizeof(_struct) == _size, f"{_struct.__name__}: {ctypes.sizeof(_struct)} bytes, the header {_size}"

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
    "dcmi_create_vdevice": (_INT, _INT, _P(CreateVdevRes), _P(CreateVdevOut)),
    "dcmi_set_destroy_vdevice": (_INT, _INT, _UINT),
    # (card, device, enum dcmi_main_cmd, sub_cmd, buf, size in/out)
    "dcmi_get_device_info": (_INT, _INT, _INT, _UINT, ctypes.c_void_p, _P(_UINT)),
    # the node's vnpu-cfg-recover mode: 0 disabled, 1 enabled (vNPUs outlive a restart)
    "dcmi_get_vnpu_config_recover_mode": (_P(_UINT),),
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

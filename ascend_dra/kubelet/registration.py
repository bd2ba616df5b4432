"""The kubelet plugin registration service (``pluginregistration.Registration``).

Source: kubelet-dra-protocol.md §1.2 and §2: ``GetInfo`` answers type ``DRAPlugin``, the driver
name, the absolute DRA socket path and the gRPC services we serve, ``v1.DRAPlugin`` first; the
kubelet then calls ``NotifyRegistrationStatus``, whose outcome we keep so that a failed
registration is visible (log, metrics, ``/healthz``).
"""

from __future__ import annotations

import logging
import time

import attrs
from grpclib import GRPCError, Status

from ascend_dra.kubelet._gen.pluginregistration import (
    InfoRequest,
    PluginInfo,
    RegistrationBase,
    RegistrationStatus,
    RegistrationStatusResponse,
)

__all__ = ("DRA_PLUGIN_TYPE", "SUPPORTED_SERVICES", "RegistrationServer", "RegistrationState")

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
#: In our order of preference; the kubelet picks the first it supports (§2.1).
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")


@attrs.define
class RegistrationState:
    """What the kubelet last told us (``None`` until it has called).

    :ivar registered: ``plugin_registered`` of the last ``NotifyRegistrationStatus``.
    :ivar error: its error text (empty on success).
    :ivar at: when it arrived, Unix seconds.
    """

    registered: bool | None = None
    error: str = ""
    at: float = 0.0
    info_calls: int = 0


class RegistrationServer(RegistrationBase):
    """Serves ``GetInfo`` and ``NotifyRegistrationStatus``.

    :param driver_name: the DRA driver name.
    :param endpoint: absolute path of the DRA service socket.
    """

    def __init__(self, driver_name: str, endpoint: str, state: RegistrationState | None = None) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.state = state if state is not None else RegistrationState()

    async def get_info(self, message: InfoRequest) -> PluginInfo:
        self.state.info_calls += 1
        return PluginInfo(type=DRA_PLUGIN_TYPE, name=self.driver_name, endpoint=self.endpoint,
                          supported_versions=list(SUPPORTED_SERVICES))

    async def notify_registration_status(self, message: RegistrationStatus) -> RegistrationStatusResponse:
        self.state.registered = message.plugin_registered
        self.state.error = message.error
        self.state.at = time.time()
        if message.plugin_registered:
            log.info("registered with the kubelet", extra={"driver": self.driver_name})
            return RegistrationStatusResponse()
        log.error("the kubelet refused the registration", extra={"driver": self.driver_name, "error": message.error})
        # As the Go helper does: answer a failed registration with an error status.
        raise GRPCError(Status.INTERNAL, f"registration failed: {message.error}")

"""The kubelet plugin registration service (``pluginregistration.Registration``).

Source: docs/architecture.md#plugin-registration: ``GetInfo`` answers type ``DRAPlugin``, the driver
name, the absolute DRA socket path and the gRPC services we serve, ``v1.DRAPlugin`` first; the
kubelet then calls ``NotifyRegistrationStatus``, whose outcome we keep so that a failed
registration is visible (log, metrics, ``/readyz`` and the ``readiness`` health service).

:func:`~ascend_dra.kubelet.rules.registration_problems` applies the checks the 1.38 kubelet makes
on ``GetInfo`` (kubernetes/kubernetes PR #140837, docs/architecture.md#plugin-registration): the driver name a DNS
subdomain
of at most 63 characters, the endpoint absolute, shorter than 108 bytes (``sun_path``) and inside
the kubelet root dir. The daemon refuses to start on any of them, so a configuration the kubelet
would reject never gets as far as a registration that times out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import attrs
from grpclib import GRPCError, Status

from ascend_dra.kubelet._gen.pluginregistration import (
    InfoRequest,
    PluginInfo,
    RegistrationBase,
    RegistrationStatus,
    RegistrationStatusResponse,
)
from ascend_dra.kubelet.rules import registration_problems

__all__ = (
    "DRA_PLUGIN_TYPE",
    "DRA_SERVICES",
    "SUPPORTED_SERVICES",
    "RegistrationServer",
    "RegistrationState",
    "registration_problems",
    "supported_services",
)

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
#: The DRA node services, in our order of preference; the kubelet picks the first it supports
#: (docs/architecture.md#plugin-registration).
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
#: What we list when health is served (see :func:`supported_services`): the 1.37 kubelet picks the
#: newest health version both sides list, older ones ignore what they do not know.
SUPPORTED_SERVICES = (*DRA_SERVICES, "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
def supported_services(health: Sequence[str] = ()) -> list[str]:
    """``PluginInfo.supported_versions``: the DRA services, then the health services really served.

    Advertising a health service that is not served makes the kubelet retry it every ~5 s and fill
    its log (docs/architecture.md#health-stream), so ``health`` lists only what the DRA socket serves.
    """
    return [*DRA_SERVICES, *health]


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
    :param services: ``supported_versions`` (default: :func:`supported_services` without health).
    """

    def __init__(self, driver_name: str, endpoint: str, state: RegistrationState | None = None,
                 services: Sequence[str] | None = None) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.state = state if state is not None else RegistrationState()
        self.services = list(services) if services is not None else supported_services()

    async def get_info(self, message: InfoRequest) -> PluginInfo:
        self.state.info_calls += 1
        return PluginInfo(type=DRA_PLUGIN_TYPE, name=self.driver_name, endpoint=self.endpoint,
                          supported_versions=list(self.services))

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

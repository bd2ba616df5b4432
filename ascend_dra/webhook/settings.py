"""Settings of ``ascend-dra webhook``: one frozen attrs class built from flags and their env twins (cli/main.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import attrs

from ascend_dra.hami.chips import DEFAULT_CHIPS, HamiChip
from ascend_dra.hami.convert import Mode
from ascend_dra.system.listen import address_problem

__all__ = ("WebhookSettings", "WebhookSettingsError")

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class WebhookSettingsError(ValueError):
    """Raised by :class:`WebhookSettings` when flags are wrong; ``problems`` names each flag."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@attrs.frozen
class WebhookSettings:
    """Everything the webhook needs. Ports are TCP ports (0: pick a free one, for tests and benchmarks).

    :ivar profiles: profiles whose config kinds are validated; only these are imported.
    :ivar conversion_mode: ``template`` (a ResourceClaimTemplate per distinct request) or ``claim``
        (direct claims named as HAMi-DRA names them, owned by their pod once it exists).
    :ivar metrics_port: plain-HTTP port of ``/metrics``; None turns it off.
    :ivar orphan_grace_s: seconds a direct claim may wait for its pod before it is deleted.
    :ivar hami_chips: the HAMi resources converted and the chips each names: HAMi's defaults, or
        the table of ``--hami-device-config`` (:func:`~ascend_dra.hami.chips.load_device_config`).
    :ivar hami_device_config: the file ``hami_chips`` was read from; None with the defaults.
    :ivar warnings: lines the CLI found worth a WARNING at start-up (a variable named almost like a
        setting, ignored).
    """

    tls_cert_file: Path
    tls_private_key_file: Path
    port: int = 8443
    address: str = "*"  # listen.py: every address, IPv4 and IPv6
    driver_name: str = "ascend.project-hami.io"
    profiles: tuple[str, ...] = ("npu-910",)
    kubeconfig: str | None = None
    conversion_mode: Mode = attrs.field(default=Mode.TEMPLATE, converter=Mode)
    metrics_port: int | None = None
    metrics_address: str = "*"
    orphan_grace_s: float = 60.0
    hami_chips: tuple[HamiChip, ...] = DEFAULT_CHIPS
    hami_device_config: Path | None = None
    log_level: str = "info"
    log_format: str = "text"
    warnings: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        problems = []
        if not (len(self.driver_name) <= 63 and _DNS_SUBDOMAIN.fullmatch(self.driver_name)):
            problems.append(f"--driver-name {self.driver_name!r} must be a lower-case DNS subdomain of at most 63 "
                            "characters (e.g. ascend.project-hami.io)")
        for flag, port in (("--port", self.port), ("--metrics-port", self.metrics_port)):
            if port is not None and not 0 <= port <= 65535:
                problems.append(f"{flag} {port} is not a TCP port (0..65535)")
        for flag, port, address in (("--address", self.port, self.address),
                                    ("--metrics-address", self.metrics_port, self.metrics_address)):
            if port is not None and (problem := address_problem(flag, address)) is not None:
                problems.append(problem)
        if not (math.isfinite(self.orphan_grace_s) and self.orphan_grace_s >= 15):  # nan passed `< 15`
            problems.append(f"--orphan-grace {self.orphan_grace_s} must be a number of seconds, at least 15 (a review "
                            "may take 10)")
        if self.metrics_port and self.metrics_port == self.port:
            problems.append(f"--port and --metrics-port are both {self.port}; give them different ports")
        if not self.profiles:
            problems.append("--profiles (PROFILES) is empty: name the profiles whose configs the cluster's claims use")
        elif len(set(self.profiles)) != len(self.profiles):
            problems.append(f"--profiles {','.join(self.profiles)} names a profile twice")
        if problems:
            raise WebhookSettingsError(problems)

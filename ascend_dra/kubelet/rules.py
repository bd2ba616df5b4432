"""What the kubelet accepts at plugin registration, as pure checks (stdlib only: settings.py uses them).

Source: docs/architecture.md#plugin-registration, the checks announced for kubelet 1.38
(kubernetes/kubernetes PR #140837): ``GetInfo`` is untrusted; the driver name must be a DNS
subdomain of at most 63 characters; the endpoint must be absolute, shorter than 108 bytes
(``sun_path``) and inside the kubelet root dir (``/var/lib/kubelet/plugins/...`` passes,
``/run/...`` does not). Earlier kubelets accept what these reject, so we check them ourselves and
refuse to start instead of registering into a timeout (dranet #250/#251).
"""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath

__all__ = ("UNIX_PATH_MAX", "driver_name_problem", "endpoint_problems", "registration_problems")

#: ``sun_path`` of a unix socket address: 108 bytes on Linux; the path must be shorter.
UNIX_PATH_MAX = 108
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def driver_name_problem(driver_name: str) -> str | None:
    """The problem with ``driver_name`` as the kubelet (and ``ResourceSlice.spec.driver``) sees it, or None."""
    if 0 < len(driver_name) <= 63 and _DNS_SUBDOMAIN.fullmatch(driver_name):
        return None
    return (f"--driver-name {driver_name!r}: the kubelet accepts only a lower-case DNS subdomain of at most 63 "
            "characters (letters, digits, '-' and '.'; e.g. ascend.project-hami.io)")


def endpoint_problems(endpoint: str, kubelet_root_dir: str) -> list[str]:
    """What the 1.38 kubelet would reject in ``PluginInfo.endpoint``, one line per problem.

    :param endpoint: the DRA socket path we advertise.
    :param kubelet_root_dir: the kubelet's ``--root-dir`` (``/var/lib/kubelet`` by default).
    """
    found = []
    path = PurePosixPath(endpoint)
    if not path.is_absolute():
        found.append(f"DRA socket {endpoint!r}: the kubelet accepts only an absolute endpoint path")
    size = len(os.fsencode(endpoint))
    if size >= UNIX_PATH_MAX:
        found.append(f"DRA socket {endpoint}: {size} bytes long; the kubelet accepts only endpoints shorter than "
                     f"{UNIX_PATH_MAX} bytes (a unix socket limit): use a shorter --kubelet-plugins-directory-path "
                     "or --kubelet-root-dir")
    root = PurePosixPath(os.path.normpath(kubelet_root_dir))
    normalized = PurePosixPath(os.path.normpath(endpoint))
    if path.is_absolute() and root not in normalized.parents:
        found.append(f"DRA socket {endpoint}: the kubelet accepts only endpoints inside its root dir {root} "
                     "(--kubelet-root-dir); put --kubelet-plugins-directory-path under it")
    return found


def registration_problems(driver_name: str, endpoint: str, kubelet_root_dir: str) -> list[str]:
    """Everything the 1.38 kubelet would reject in our ``GetInfo`` answer; empty when it accepts it."""
    problem = driver_name_problem(driver_name)
    return ([problem] if problem else []) + endpoint_problems(endpoint, kubelet_root_dir)

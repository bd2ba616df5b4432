"""OCI image tarballs built here, from Debian's static busybox: no image registry can be reached.

:func:`busybox_image` writes an OCI image layout as one uncompressed tar (what ``ctr images import``
reads): one layer holding ``/bin/busybox`` plus a symlink per applet the tests use, a config whose
``Cmd`` is given, and an ``index.json`` whose ``io.containerd.image.name`` annotation names the image.
The same layer serves as the pod sandbox ("pause") image with ``Cmd = sleep infinity``: the CRI stops a
sandbox with SIGKILL, so PID 1 needs no signal handling.

Output is deterministic (mtime 0, sorted entries): the same inputs give the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

#: Debian's busybox-static (make container-deps installs it).
BUSYBOX = Path("/bin/busybox")
#: Applets linked in /bin of the image (the network ones for tests/e2e's pods; ssl_client is wget's TLS).
APPLETS = ("sh", "sleep", "env", "cat", "ls", "echo", "true", "grep", "mkdir", "hostname", "ip", "wget",
           "ssl_client", "nc", "httpd")
PAUSE_REF = "localhost/ascend-dra-test/pause:1"
BUSYBOX_REF = "localhost/ascend-dra-test/busybox:1"

MT_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, *, mode: int = 0o755,
         kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.mode, info.type, info.linkname = 0, 0, 0, mode, kind, link
    info.size = len(data) if data is not None else 0
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _layer(busybox: Path) -> bytes:
    """The root filesystem tar: dirs, ``bin/busybox``, applet symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp"):
            _add(tar, d, kind=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755)
        _add(tar, "bin/busybox", busybox.read_bytes())
        for applet in APPLETS:
            _add(tar, f"bin/{applet}", kind=tarfile.SYMTYPE, link="busybox", mode=0o777)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes, media_type: str) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    _add(tar, f"blobs/sha256/{digest}", data, mode=0o644)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def busybox_image(out: Path, ref: str, cmd: Sequence[str], *, busybox: Path = BUSYBOX) -> Path:
    """Write the image ``ref`` (``host/repo:tag``) running ``cmd`` to the tar ``out``; return ``out``.

    :raises FileNotFoundError: no ``busybox`` binary (install Debian's busybox-static).
    """
    layer = _layer(busybox)
    diff_id = f"sha256:{hashlib.sha256(layer).hexdigest()}"
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": list(cmd), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    platform = {"architecture": "amd64", "os": "linux"}
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "blobs", kind=tarfile.DIRTYPE)
        _add(tar, "blobs/sha256", kind=tarfile.DIRTYPE)
        layer_desc = _blob(tar, layer, MT_LAYER)
        config_desc = _blob(tar, json.dumps(config, sort_keys=True).encode(), MT_CONFIG)
        manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": config_desc, "layers": [layer_desc]}
        manifest_desc = _blob(tar, json.dumps(manifest, sort_keys=True).encode(), MT_MANIFEST)
        manifest_desc["platform"] = platform
        manifest_desc["annotations"] = {"io.containerd.image.name": ref,
                                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}
        index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [manifest_desc]}
        _add(tar, "index.json", json.dumps(index, sort_keys=True).encode(), mode=0o644)
        _add(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), mode=0o644)
    return out

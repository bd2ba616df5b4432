"""``ascend-dra call``: act as the kubelet against a running daemon, for operators and demos.

``register`` calls ``GetInfo`` then ``NotifyRegistrationStatus`` (as the kubelet's plugin
watcher does, docs/architecture.md#plugin-registration); ``prepare``/``unprepare NAMESPACE/NAME``
take the claim's uid from ``--uid``, else from the standalone claim file, else from the API server
(``--kubeconfig``: ``GET`` of the ResourceClaim through kubernetes-asyncio's ``ResourceV1Api``), and
call the DRA service; ``health`` prints the first health message. Output is JSON (what came back)
plus, for a standalone prepare, the CDI spec written.

Every failure is one line on stderr and exit code 1: a socket that is missing, or that nobody
answers on (a daemon that was killed), a claim the API server does not have.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import yaml
from grpclib.client import Channel
from grpclib.exceptions import GRPCError, StreamTerminatedError

from ascend_dra.cdi import naming
from ascend_dra.cluster.apiclient import cluster_access_problem
from ascend_dra.kubelet._gen.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from ascend_dra.kubelet._gen.pluginregistration import InfoRequest, RegistrationStatus, RegistrationStub
from ascend_dra.kubelet._gen.v1alpha1 import DraResourceHealthStub, NodeWatchResourcesRequest
from ascend_dra.state.claims import yaml_problem

__all__ = ("main", "open_channel")

_TIMEOUT_S = 45.0  # the kubelet's per-call timeout for Prepare/Unprepare (docs/architecture.md#how-the-kubelet-calls)


@contextlib.asynccontextmanager
async def open_channel(path: Path) -> AsyncIterator[Channel]:
    """A grpclib channel to a unix socket, closed on exit."""
    channel = Channel(path=str(path))
    try:
        yield channel
    finally:
        channel.close()


def _paths(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.standalone is not None:
        registrar, plugins = args.standalone / "plugins_registry", args.standalone / "plugins"
    else:
        from ascend_dra.cli.flags import kubelet_dirs

        registrar, plugins = kubelet_dirs(args)
    if getattr(args, "rolling_update_id", None):
        from ascend_dra.node.settings import rolling_update_sockets

        return rolling_update_sockets(registrar, plugins / args.driver_name, args.driver_name, args.rolling_update_id)
    return registrar / f"{args.driver_name}-reg.sock", plugins / args.driver_name / "dra.sock"


async def _uid_from_api(kubeconfig: str, namespace: str, name: str) -> str:
    """``metadata.uid`` of the ResourceClaim, read with ``kubeconfig``.

    :raises SystemExit: one line: no such claim, the API server refused or could not be reached,
        or the kubeconfig is unusable.
    """
    import aiohttp
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.config import ConfigException

    from ascend_dra.cluster.apiclient import open_api

    ref = f"ResourceClaim {namespace}/{name}"
    try:
        api = await open_api(kubeconfig)
    except (ConfigException, OSError, ValueError) as exc:
        raise SystemExit(f"ascend-dra call: --kubeconfig {kubeconfig} is not usable: {exc}") from None
    try:
        claim = await client.ResourceV1Api(api).read_namespaced_resource_claim(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise SystemExit(f"ascend-dra call: {ref} does not exist (API server of --kubeconfig {kubeconfig})") \
                from None
        raise SystemExit(f"ascend-dra call: reading {ref} failed: HTTP {exc.status} {exc.reason}") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise SystemExit(f"ascend-dra call: the API server of --kubeconfig {kubeconfig} could not be reached: "
                         f"{exc}") from None
    finally:
        await api.close()
    return str(claim.metadata.uid)


def _missing_socket_hint(args: argparse.Namespace, socket: Path) -> str:
    """Why ``socket`` may be missing: a daemon run with ``--rolling-update-id`` names its sockets
    after the id (:func:`ascend_dra.node.settings.rolling_update_sockets`), so a ``call`` without the id
    looks for the plain names."""
    if not getattr(args, "rolling_update_id", None):
        # Our driver's names only: the kubelet's registration dir holds every driver's sockets.
        pattern = f"{args.driver_name}-*-reg.sock" if socket.name.endswith("-reg.sock") else "dra-*.sock"
        try:
            others = sorted(p.name for p in socket.parent.glob(pattern) if p.name != socket.name)
        except OSError:
            others = []
        if others:
            return (f"{', '.join(others)} there belong{'s' if len(others) == 1 else ''} to a daemon run with "
                    "--rolling-update-id: give call the same --rolling-update-id (or ROLLING_UPDATE_ID)")
    return "is `ascend-dra run` serving there?"


def _claim_uid(args: argparse.Namespace, namespace: str, name: str) -> str:
    if getattr(args, "uid", None):
        return str(args.uid)
    if args.standalone is None:
        if getattr(args, "kubeconfig", None):
            return anyio.run(_uid_from_api, args.kubeconfig, namespace, name)
        raise SystemExit("ascend-dra call: prepare/unprepare need the claim's uid: give --uid, or --kubeconfig to "
                         "read it from the API server, or --standalone DIR to read DIR/claims")
    path = args.standalone / "claims" / namespace / f"{name}.yaml"
    try:
        obj = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"ascend-dra call: claim file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise SystemExit(f"ascend-dra call: claim file {path} is not valid YAML: {yaml_problem(exc)}") from None
    try:
        return str(obj["metadata"]["uid"])
    except (KeyError, TypeError):
        raise SystemExit(f"ascend-dra call: claim file {path} has no metadata.uid") from None


def _print(obj: Any) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode() + "\n")


async def _register(reg_socket: Path) -> int:
    async with open_channel(reg_socket) as channel:
        stub = RegistrationStub(channel)
        info = await stub.get_info(InfoRequest(), timeout=1.0)
        _print({"getInfo": info.to_dict()})
        await stub.notify_registration_status(RegistrationStatus(plugin_registered=True), timeout=5.0)
        _print({"notifyRegistrationStatus": "ok"})
    return 0


async def _prepare(args: argparse.Namespace, dra_socket: Path, namespace: str, name: str, uid: str) -> int:
    api = v1 if args.api == "v1" else v1beta1
    claim = api.Claim(namespace=namespace, name=name, uid=uid)
    async with open_channel(dra_socket) as channel:
        stub = api.DraPluginStub(channel)
        if args.action == "prepare":
            reply = await stub.node_prepare_resources(api.NodePrepareResourcesRequest(claims=[claim]),
                                                      timeout=_TIMEOUT_S)
        else:
            reply = await stub.node_unprepare_resources(api.NodeUnprepareResourcesRequest(claims=[claim]),
                                                        timeout=_TIMEOUT_S)
    entry = reply.claims.get(uid)
    _print({"claims": {k: v.to_dict() for k, v in reply.claims.items()}})
    if entry is None or entry.error:
        return 1
    if args.action == "prepare" and args.standalone is not None:
        # One spec file per CDI kind (profile) of the claim's devices.
        kinds = dict.fromkeys(cdi_id.partition("=")[0] for d in entry.devices for cdi_id in d.cdi_device_ids)
        for kind in kinds:
            spec = args.standalone / "cdi" / naming.claim_spec_file(kind, uid)
            if spec.exists():
                sys.stdout.write(f"--- CDI spec {spec}\n{spec.read_text()}")
    return 0


async def _health(dra_socket: Path) -> int:
    async with open_channel(dra_socket) as channel:
        stub = DraResourceHealthStub(channel)
        async for message in stub.node_watch_resources(NodeWatchResourcesRequest(), timeout=15.0):
            # With the defaults shown: a device of unknown health (the enum's 0) had no "health" key.
            _print(message.to_dict(include_default_values=True))
            break
    return 0


def _answering(socket: Path, call: Callable[[], Awaitable[int]]) -> int:
    """Run ``call``; a daemon that does not answer on ``socket`` becomes one line (SystemExit)."""
    try:
        return anyio.run(call)
    except (ConnectionError, FileNotFoundError, StreamTerminatedError, TimeoutError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise SystemExit(f"ascend-dra call: the daemon at {socket} does not answer ({reason}); is `ascend-dra run` "
                         "serving there?") from None
    except GRPCError as exc:
        raise SystemExit(f"ascend-dra call: the daemon at {socket} answered {exc.status.name}: {exc.message}") \
            from None


def main(args: argparse.Namespace) -> int:
    """Run one ``ascend-dra call`` action; return the exit code (1 when the daemon reported an error).

    :raises SystemExit: one line, for every failure that is not the daemon's answer.
    """
    kubeconfig = getattr(args, "kubeconfig", None)
    # kubernetes-asyncio would print "Config not found", and its error blames the file's content.
    if kubeconfig and args.standalone is None and (problem := cluster_access_problem(kubeconfig)) is not None:
        raise SystemExit(f"ascend-dra call: {problem}")
    reg_socket, dra_socket = _paths(args)
    for socket in (reg_socket, dra_socket):
        if not socket.exists():
            raise SystemExit(f"ascend-dra call: {socket} does not exist; {_missing_socket_hint(args, socket)}")
    if args.action == "register":
        return _answering(reg_socket, lambda: _register(reg_socket))
    if args.action == "health":
        return _answering(dra_socket, lambda: _health(dra_socket))
    if not args.claim or "/" not in args.claim:  # a usage error: exit code 2, as argparse's
        print(f"ascend-dra call {args.action}: give the claim as NAMESPACE/NAME", file=sys.stderr)
        raise SystemExit(2)
    namespace, name = args.claim.split("/", 1)
    uid = _claim_uid(args, namespace, name)
    return _answering(dra_socket, lambda: _prepare(args, dra_socket, namespace, name, uid))

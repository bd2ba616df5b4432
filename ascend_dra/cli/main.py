"""Command line: the subcommands and their flags (each with an environment twin, cliflags.py).

Heavy modules (grpclib, kubernetes-asyncio, profiles) are imported only by the command that
runs, so ``ascend-dra --help`` stays fast.
"""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ascend_dra.cli.flags import (
    DEFAULT_DRIVER_NAME,
    UNHEALTHY_DEVICES,
    Parser,
    VersionAction,
    boolean,
    comma_list,
    flag,
    kubelet_dir_flags,
    kubelet_dirs,
    log_flags,
    log_level,
    node_flags,
    options,
    path,
)

__all__ = ("main",)

def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ascend-dra", description="Kubernetes DRA driver for Huawei Ascend NPUs.")
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the node daemon (kubelet plugin)",
                         description="Run the node daemon: discover devices, publish ResourceSlices, serve the "
                                     "kubelet's registration and DRA gRPC services on unix sockets.")
    node_flags(run, node_required=True)
    flag(run, "--standalone", "STANDALONE_DIR", None,
          "run with no cluster: sockets, CDI specs, checkpoint, slices and claims under DIR", type=path,
          metavar="DIR")
    flag(run, "--kubeconfig", "KUBECONFIG", None, "kubeconfig file (cluster mode; in-cluster config if unset)")
    flag(run, "--cdi-root", "CDI_ROOT", Path("/var/run/cdi"), "directory for CDI spec files", type=path)
    kubelet_dir_flags(run)
    flag(run, "--dev-root-on-host", "DEV_ROOT_ON_HOST", None,
          "where --dev-root is on the host, the hostPath base of the device nodes in CDI specs; unset: --dev-root "
          "itself. Give /dev when the host's /dev is mounted at another --dev-root (docs/architecture.md, "
          "'Device nodes')",
          type=path)
    flag(run, "--boot-id-file", "BOOT_ID_FILE", Path("/proc/sys/kernel/random/boot_id"),
          "file holding the node's boot id", type=path)
    flag(run, "--discovery-timeout", "DISCOVERY_TIMEOUT", 30.0, "seconds one profile's discovery may take",
          type=float)
    flag(run, "--rediscover-interval", "REDISCOVER_INTERVAL", 60.0,
          "seconds between periodic rediscoveries (and, while the API server drops the ResourceSlice fields "
          "of a feature gate, between two dry-run asks whether it keeps them again)", type=float)
    flag(run, "--health-interval", "HEALTH_INTERVAL", 10.0,
          "seconds between device health checks (and the look for missing CDI specs of prepared claims); the "
          "health stream is re-sent at least every 10 s whatever this is (the kubelet calls a device unknown "
          "after 30 s without a message)", type=float)
    flag(run, "--unhealthy-devices", "UNHEALTHY_DEVICES", "taint",
          "what the ResourceSlices say of a device its profile reports unhealthy: taint (<driver>/unhealthy: "
          "NoSchedule; where the API server drops taints, gate DRADeviceTaints off, the device is withdrawn "
          "instead), withdraw (left out until healthy) or publish (as if healthy)",
          choices=UNHEALTHY_DEVICES)
    flag(run, "--taint-unhealthy", "TAINT_UNHEALTHY", None,
          "before 2026-12-03: true is --unhealthy-devices taint, false is --unhealthy-devices publish",
          type=boolean, nargs="?", const=True)
    flag(run, "--health-service", "HEALTH_SERVICE", True,
          "serve and advertise the kubelet's device health stream (v1 and v1alpha1.DRAResourceHealth)",
          type=boolean, nargs="?", const=True)
    flag(run, "--device-metadata", "DEVICE_METADATA", True,
          "give each prepared claim a device metadata file that its containers read at "
          "/var/run/kubernetes.io/dra-device-attributes/... (KEP-5304; files already given stay until unprepared)",
          type=boolean, nargs="?", const=True)
    flag(run, "--claim-status", "CLAIM_STATUS", True,
          "write status.devices of prepared ResourceClaims (cluster mode; KEP-4817)", type=boolean, nargs="?",
          const=True)
    flag(run, "--metrics-port", "METRICS_PORT", 0, "TCP port for Prometheus /metrics (0: off)", type=int)
    flag(run, "--metrics-address", "METRICS_ADDRESS", "*", "address the metrics endpoint listens on (*: every "
          "address, IPv4 and IPv6 where the kernel has it; '::' dual-stack; '0.0.0.0' IPv4 only)")
    flag(run, "--healthcheck-port", "HEALTHCHECK_PORT", 0,
          "TCP port of the grpc.health.v1.Health service for the kubelet's grpc probes (0: off)", type=int)
    flag(run, "--healthcheck-address", "HEALTHCHECK_ADDRESS", "*",
          "address the health service listens on (a grpc probe connects to the pod IP, IPv6 in an IPv6 "
          "cluster); as --metrics-address")
    flag(run, "--rolling-update-id", "ROLLING_UPDATE_ID", None,
          "the pod UID: serve under sockets of this instance's own names, beside the old instance during a "
          "rolling update, sharing the checkpoint with it (kubelet >= 1.33); unset: one instance at a time")
    log_flags(run)

    call = sub.add_parser("call", help="act as the kubelet against a running daemon",
                          description="Act as the kubelet: register (GetInfo + NotifyRegistrationStatus), prepare "
                                      "or unprepare a claim (its uid read from the claim file), or watch health.")
    flag(call, "--standalone", "STANDALONE_DIR", None, "the daemon's standalone DIR", type=path, metavar="DIR")
    flag(call, "--driver-name", "DRIVER_NAME", DEFAULT_DRIVER_NAME, "DRA driver name")
    kubelet_dir_flags(call)
    flag(call, "--api", "DRA_API", "v1", "DRA service version to call: v1 or v1beta1",
          choices=("v1", "v1beta1"))
    call.add_argument("action", choices=("register", "prepare", "unprepare", "health"),
                      help="register: GetInfo on the registration socket, as the kubelet's plugin watcher; "
                           "prepare/unprepare: NodePrepareResources/NodeUnprepareResources of one claim; "
                           "health: the device health stream's first message")
    call.add_argument("claim", nargs="?", help="NAMESPACE/NAME (prepare, unprepare)")
    call.add_argument("--uid", default=None, help="the claim's uid; default: read from the --standalone claim file, "
                                                  "or from the API server with --kubeconfig")
    flag(call, "--kubeconfig", "KUBECONFIG", None,
          "cluster mode: read the claim's uid from the API server with this kubeconfig (unless --uid)")
    flag(call, "--rolling-update-id", "ROLLING_UPDATE_ID", None,
          "the daemon's --rolling-update-id: its sockets carry it (inside the chart's pod the env is set)")

    discover = sub.add_parser("discover", help="show what this node has, as a table or as ResourceSlices",
                              description="Run the profiles' discovery once and print the inventory: a table "
                                          "(device, chip, memory, NUMA, topology group, discovery tier) or the "
                                          "exact ResourceSlice objects the daemon would publish. Writes nothing. "
                                          "Exit code 1 when a profile failed to load or to discover.")
    node_flags(discover, node_required=False)
    discover.add_argument("--output", "-o", choices=("table", "yaml", "json"), default="table",
                          help="table (default): one row per device, then notes and failures; yaml: the "
                               "ResourceSlices the daemon would publish, notes as # comments; json: the same "
                               "as a v1 List")
    # Not LOG_LEVEL's twin: the chart's pod sets LOG_LEVEL=info for the daemon, and `discover` run
    # in it must still print only its table (log lines go to stderr).
    discover.add_argument("--log-level", type=log_level, default="warning",
                          help="log lines on stderr: debug, info, warning or error, as for run (default warning; "
                               "debug shows each discovery tier's npu-smi calls)")

    _webhook_parser(sub)

    profiles = sub.add_parser("profiles", help="list installed profiles, their distribution and load status",
                              description="List every profile installed in the ascend_dra.profiles entry-point "
                                          "group: name, distribution, version, target and whether it loads. "
                                          "Exit code 1 when any of them is broken.")
    profiles.add_argument("--output", "-o", choices=("table", "json", "yaml"), default="table",
                          help="table (default), json or yaml: one entry per installed profile")
    return parser


def _webhook_parser(sub: Any) -> None:
    hook = sub.add_parser("webhook", help="run the admission webhook (config validation, HAMi syntax conversion)",
                          description="Serve HTTPS admission webhooks: /validate-resource-claim-parameters checks the "
                                      "opaque configs of ResourceClaims and ResourceClaimTemplates; /mutate-pods "
                                      "converts HAMi resource syntax (huawei.com/Ascend310P, ...) into ResourceClaims. "
                                      "See docs/webhook.md.")
    flag(hook, "--port", "WEBHOOK_PORT", 8443, "HTTPS port of the webhook endpoints, /healthz and /readyz", type=int)
    flag(hook, "--address", "WEBHOOK_ADDRESS", "*", "address the HTTPS server listens on (*: every address, IPv4 "
          "and IPv6 where the kernel has it; '::' dual-stack; '0.0.0.0' IPv4 only)")
    flag(hook, "--tls-cert-file", "TLS_CERT_FILE", None, "PEM serving certificate, required (reloaded when it "
          "changes; hack/webhook-certs.sh makes one for a cluster, make webhook-up for the local one)", type=path)
    flag(hook, "--tls-private-key-file", "TLS_PRIVATE_KEY_FILE", None, "PEM private key of the certificate",
          type=path)
    flag(hook, "--driver-name", "DRIVER_NAME", DEFAULT_DRIVER_NAME, "DRA driver name")
    flag(hook, "--profiles", "PROFILES", ("npu-910",),
          "comma-separated profiles whose config kinds are validated (only these are imported)", type=comma_list)
    flag(hook, "--kubeconfig", "KUBECONFIG", None, "kubeconfig file (in-cluster service account if unset)")
    flag(hook, "--conversion-mode", "CONVERSION_MODE", "template",
          "template: a ResourceClaimTemplate per distinct request; claim: direct claims named as HAMi-DRA does, "
          "owned by their pod", choices=("template", "claim"))
    flag(hook, "--hami-device-config", "HAMI_DEVICE_CONFIG", None,
         "HAMi's device config (the device-config.yaml of its hami-scheduler-device ConfigMap): convert the "
         "resources its vnpus entries name, for their chipName (default: HAMi's built-in Ascend list)", type=path)
    flag(hook, "--orphan-grace", "ORPHAN_GRACE", 60.0,
          "seconds a direct claim waits for its pod before it is deleted (claim mode)", type=float)
    flag(hook, "--metrics-port", "METRICS_PORT", 0, "TCP port for Prometheus /metrics (0: off)", type=int)
    flag(hook, "--metrics-address", "METRICS_ADDRESS", "*", "address the metrics endpoint listens on (as --address)")
    log_flags(hook)


def option_sources(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """``{"PROFILE_OPTIONS": entries a flag does not override, "--profile-option": the flags}``.

    :raises SystemExit: exit code 2 after one line, when ``PROFILE_OPTIONS`` has an entry that is not
        KEY=VALUE (a configuration error, as the same entry in ``--profile-option``).
    """
    try:
        from_env = dict(options(os.environ.get("PROFILE_OPTIONS", "")))
    except argparse.ArgumentTypeError as exc:
        print(f"ascend-dra {args.command}: environment variable PROFILE_OPTIONS: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    flags = dict(args.profile_option)
    return {"PROFILE_OPTIONS": {k: v for k, v in from_env.items() if k not in flags}, "--profile-option": flags}


def unhealthy_devices(args: argparse.Namespace) -> str:
    """``--unhealthy-devices``, or what the older ``--taint-unhealthy`` (TAINT_UNHEALTHY) asks for:
    true is ``taint``, false ``publish`` (its default before ``--unhealthy-devices`` existed).
    Both given (as flags or variables) and at odds: a usage error naming where each came from."""
    if args.taint_unhealthy is None:
        return args.unhealthy_devices
    wanted = "taint" if args.taint_unhealthy else "publish"
    new_from = args.given.get("unhealthy_devices")
    if new_from is not None and args.unhealthy_devices != wanted:
        old_from = args.given.get("taint_unhealthy") or "--taint-unhealthy"
        print(f"ascend-dra {args.command}: {old_from} {str(args.taint_unhealthy).lower()} and {new_from} "
              f"{args.unhealthy_devices} disagree; give {new_from} only", file=sys.stderr)
        raise SystemExit(2)
    return wanted


def deprecated(args: argparse.Namespace) -> tuple[str, ...]:
    """One line for each deprecated setting given (flag or variable), with what to give instead
    (or, when the newer setting is given too and agrees, to drop it)."""
    if args.taint_unhealthy is None:
        return ()
    given = args.given.get("taint_unhealthy") or "--taint-unhealthy"
    if args.given.get("unhealthy_devices") is not None:  # and agrees: unhealthy_devices() refused it otherwise
        return (f"{given} is deprecated (since 2026-12-03) and says what {args.given['unhealthy_devices']} "
                f"says: drop it",)
    value = "taint" if args.taint_unhealthy else "publish"
    new = "UNHEALTHY_DEVICES=" if given == "TAINT_UNHEALTHY" else "--unhealthy-devices "
    return (f"{given} is deprecated (since 2026-12-03): give {new}{value} instead",)


#: Variables a subcommand reads that are no flag's twin (``PROFILE_OPTIONS``: ``--profile-option``
#: entries in one variable).
READ_DIRECTLY = {"run": ("PROFILE_OPTIONS",)}

#: How alike (difflib's ratio) an unknown variable's name must be to a setting's to be called its typo:
#: ``PROFILE`` and ``PROFILES`` are 0.93, ``HOSTNAME`` and ``NODE_NAME`` 0.59.
TYPO_SIMILARITY = 0.85


def _holds_whole(name: str, setting: str) -> bool:
    """Whether ``name`` is ``setting`` with words added before or after it (``MY_NODE_NAME``,
    ``NODE_NAME_OVERRIDE``): another program's variable, named on purpose, not a typo of ours."""
    return name.startswith(f"{setting}_") or name.endswith(f"_{setting}")


def misspelled(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """One line for each environment variable that is not a setting of the subcommand but is named
    almost like one (``PROFILE=fake`` for ``PROFILES``): it is ignored, and the default it leaves in
    place (the npu-910 profile, say) was found out only from what the daemon then did."""
    known = {*args.variables, *READ_DIRECTLY.get(args.command, ())}
    lines = []
    for name in sorted(os.environ if environ is None else environ):
        if name in known:
            continue
        # Upper-cased: a variable's name is case-sensitive, so ``profiles`` is ignored as well.
        upper = name.upper()
        match = difflib.get_close_matches(upper, known, n=1, cutoff=TYPO_SIMILARITY)
        if match and not _holds_whole(upper, match[0]):
            lines.append(f"environment variable {name} is not a setting of ascend-dra {args.command} and is "
                         f"ignored; did you mean {match[0]}?")
    return tuple(lines)


def profile_options(args: argparse.Namespace) -> dict[str, str]:
    """``--profile-option`` flags over ``PROFILE_OPTIONS`` entries, as one mapping."""
    return {k: v for given in option_sources(args).values() for k, v in given.items()}


def _preflight(args: argparse.Namespace, settings: Any) -> int:
    """The preflight checks of ``run`` (profiles, node paths, then the daemon's own paths) or of
    ``discover`` (``settings`` None: profiles and node paths); print the first problem's one line
    and return 2 (configuration) or 1 (paths), else 0."""
    from ascend_dra.cli.preflight import (
        PreflightError,
        check_node_paths,
        check_option_paths,
        check_paths,
        check_profiles,
    )

    try:
        loaded = check_profiles(tuple(args.profiles), option_sources(args))
    except PreflightError as exc:
        print(f"ascend-dra {args.command}: {exc}", file=sys.stderr)
        return 2
    try:
        check_node_paths(args.dev_root, args.sys_root, args.npu_smi)
        check_option_paths(loaded, option_sources(args))
        if settings is not None:
            check_paths(settings)
    except PreflightError as exc:
        print(f"ascend-dra {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


def _run(args: argparse.Namespace) -> int:
    if not args.node_name:
        print("ascend-dra run: --node-name (or NODE_NAME) is required", file=sys.stderr)
        return 2
    from ascend_dra.node.daemon import main as daemon_main
    from ascend_dra.node.settings import Settings, SettingsError

    registrar, plugins = kubelet_dirs(args)
    try:
        settings = Settings(
            node_name=args.node_name, profiles=args.profiles, driver_name=args.driver_name,
            standalone=args.standalone, kubeconfig=args.kubeconfig, cdi_root=args.cdi_root,
            kubelet_root_dir=args.kubelet_root_dir, registrar_dir=registrar, plugins_dir=plugins,
            health_service=args.health_service, claim_status=args.claim_status,
            device_metadata=args.device_metadata,
            fake_devices=args.fake_devices, npu_smi=args.npu_smi, dev_root=args.dev_root, sys_root=args.sys_root,
            dev_root_on_host=args.dev_root_on_host,
            boot_id_file=args.boot_id_file, discovery_timeout=args.discovery_timeout,
            rediscover_interval=args.rediscover_interval, metrics_port=args.metrics_port,
            health_interval=args.health_interval, unhealthy_devices=unhealthy_devices(args),
            profile_options=profile_options(args),
            metrics_address=args.metrics_address, rolling_update_id=args.rolling_update_id,
            healthcheck_port=args.healthcheck_port, healthcheck_address=args.healthcheck_address,
            log_level=args.log_level, log_format=args.log_format,
            warnings=deprecated(args) + misspelled(args),
        )
    except SettingsError as exc:
        for problem in exc.problems:
            print(f"ascend-dra run: {problem}", file=sys.stderr)
        return 2
    return _preflight(args, settings) or daemon_main(settings)


def _webhook(args: argparse.Namespace) -> int:
    if args.tls_cert_file is None or args.tls_private_key_file is None:
        print("ascend-dra webhook: --tls-cert-file and --tls-private-key-file (or TLS_CERT_FILE, "
              "TLS_PRIVATE_KEY_FILE) are required", file=sys.stderr)
        return 2
    from ascend_dra.cli.preflight import PreflightError, broken_profiles, check_installed
    from ascend_dra.webhook.server import main as webhook_main
    from ascend_dra.webhook.settings import WebhookSettings, WebhookSettingsError
    from ascend_dra.webhook.tls import TlsError

    # A name no distribution installs, in run's words (the webhook needs only the profiles' config
    # schemas, so check_profiles' other checks, pynvml's among them, are not asked).
    try:
        broken_profiles(check_installed(tuple(args.profiles)))  # quietly: one line, no traceback logged
    except PreflightError as exc:
        print(f"ascend-dra webhook: {exc}", file=sys.stderr)
        return 2
    from ascend_dra.cluster.apiclient import cluster_access_problem

    if args.kubeconfig and (problem := cluster_access_problem(args.kubeconfig)) is not None:
        print(f"ascend-dra webhook: {problem}", file=sys.stderr)  # not the bare errno text, after a log line
        return 2
    from ascend_dra.hami.chips import DEFAULT_CHIPS, DeviceConfigError, load_device_config

    try:
        chips = DEFAULT_CHIPS if args.hami_device_config is None else load_device_config(args.hami_device_config)
    except DeviceConfigError as exc:
        print(f"ascend-dra webhook: --hami-device-config {exc}", file=sys.stderr)
        return 2
    try:
        settings = WebhookSettings(
            tls_cert_file=args.tls_cert_file, tls_private_key_file=args.tls_private_key_file, port=args.port,
            address=args.address, driver_name=args.driver_name, profiles=args.profiles, kubeconfig=args.kubeconfig,
            conversion_mode=args.conversion_mode, orphan_grace_s=args.orphan_grace, hami_chips=chips,
            hami_device_config=args.hami_device_config,
            metrics_port=args.metrics_port or None, metrics_address=args.metrics_address,
            log_level=args.log_level, log_format=args.log_format, warnings=misspelled(args))
    except WebhookSettingsError as exc:
        for problem in exc.problems:
            print(f"ascend-dra webhook: {problem}", file=sys.stderr)
        return 2
    try:
        return webhook_main(settings)
    except (TlsError, ValueError, OSError) as exc:
        print(f"ascend-dra webhook: {exc}", file=sys.stderr)
        return 1


def _call(args: argparse.Namespace) -> int:
    from ascend_dra.cli.call import main as client_main

    return client_main(args)


def _discover(args: argparse.Namespace) -> int:
    import anyio

    from ascend_dra.cli import discover
    from ascend_dra.node.settings import fake_devices_problem, name_problems
    from ascend_dra.observe.logs import setup_logging

    problems = name_problems(args.driver_name, args.node_name)
    if (problem := fake_devices_problem(args.fake_devices)) is not None:
        problems.append(problem)
    if problems:
        for problem in problems:
            print(f"ascend-dra discover: {problem}", file=sys.stderr)
        return 2
    if code := _preflight(args, None):
        return code
    setup_logging(args.log_level)  # the tiers' warnings, with their details, go to stderr
    text, ok = anyio.run(discover.main, args, profile_options(args))
    print(text, end="")
    return 0 if ok else 1


def _profiles(args: argparse.Namespace) -> int:
    from ascend_dra.cli import profiles
    from ascend_dra.profiles.registry import load_installed

    print(profiles.run(args.output))
    return 0 if all(entry.error is None for entry in load_installed()) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ascend-dra`` console script; returns the exit code."""
    # Until the daemon's own handlers are installed (signals.py), SIGINT ends the process as SIGTERM
    # does: Python's KeyboardInterrupt in the middle of a C extension's import crashed the
    # interpreter's teardown (SIGSEGV), where the kernel's default action leaves nothing behind.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    args = build_parser().parse_args(argv)
    if args.command not in ("run", "webhook"):
        # `ascend-dra call ... | head` ends quietly, as any Unix tool does, instead of a BrokenPipeError.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    handler = {"run": _run, "call": _call, "discover": _discover, "profiles": _profiles,
               "webhook": _webhook}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())

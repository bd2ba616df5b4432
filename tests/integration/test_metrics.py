"""Prometheus metrics of a running daemon, read over HTTP as Prometheus would."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.claimfiles import claim_object, write_claim
from tests.cluster.controlplane import free_port
from tests.integration.daemon import DaemonProcess, Kubelet


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_claims_devices_and_registration(short_tmp):
    port = free_port()
    d = DaemonProcess(short_tmp / "sa", extra_args=["--metrics-port", str(port), "--metrics-address",
                                                     "127.0.0.1"]).start()
    k = Kubelet(d)
    try:
        before = scrape(port)
        assert before[("ascend_dra_devices", (("profile", "fake"), ("tier", "simulated")))] == 4
        assert before[("ascend_dra_claims_total", (("operation", "prepare"), ("result", "error")))] == 0
        assert before[("ascend_dra_registration_status", ())] == -1
        from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2

        k.registration.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
        good = write_claim(d.root, claim_object("good"))
        bad = claim_object("missing")
        k.prepare(good, bad)
        after = scrape(port)
        assert after[("ascend_dra_claims_total", (("operation", "prepare"), ("result", "ok")))] == 1
        assert after[("ascend_dra_claims_total", (("operation", "prepare"), ("result", "error")))] == 1
        assert after[("ascend_dra_prepare_requests_total", (("result", "error"),))] == 1
        assert after[("ascend_dra_prepare_seconds_count", ())] == 1
        assert after[("ascend_dra_prepared_claims", ())] == 1
        assert after[("ascend_dra_registration_status", ())] == 1
        k.unprepare(good)
        assert scrape(port)[("ascend_dra_prepared_claims", ())] == 0
    finally:
        k.close()
        d.stop()


def test_gauges_are_true_from_the_start_and_after_a_restart(short_tmp):
    port = free_port()
    d = DaemonProcess(short_tmp / "sa", extra_args=["--metrics-port", str(port), "--metrics-address", "127.0.0.1"])
    d.start()
    k = Kubelet(d)
    try:
        from tests.kubelet_pb.pluginregistration import api_pb2 as reg_pb2

        k.registration.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
        assert scrape(port)[("ascend_dra_registration_status", ())] == 1  # no Prepare needed to see it
        k.prepare(write_claim(d.root, claim_object("a")), write_claim(d.root, claim_object("b", results=[
            ("npu", "npu-1-0")])))
    finally:
        k.close()
        d.stop()
    d.start()
    try:
        after = scrape(port)
        assert after[("ascend_dra_prepared_claims", ())] == 2  # from the checkpoint, before any RPC
        assert after[("ascend_dra_registration_status", ())] == -1  # this process has not been told yet
    finally:
        d.stop()


def test_process_metrics_and_build_info_are_exported(short_tmp):
    import platform
    from importlib import metadata

    port = free_port()
    d = DaemonProcess(short_tmp / "sa", extra_args=["--metrics-port", str(port), "--metrics-address",
                                                     "127.0.0.1"]).start()
    try:
        samples = scrape(port)
        info = [labels for (name, labels) in samples if name == "ascend_dra_build_info"]
        assert info == [(("implementation", platform.python_implementation()), ("python", platform.python_version()),
                         ("version", metadata.version("ascend-dra")))]
        assert samples[("ascend_dra_build_info", info[0])] == 1
        assert samples[("process_resident_memory_bytes", ())] > 10 * 2**20
        assert samples[("process_open_fds", ())] > 0
        assert any(name == "python_info" for name, _ in samples)
    finally:
        d.stop()


def test_a_state_disk_that_takes_no_writes_shows_in_the_metrics_and_heals(short_tmp):
    """Every Prepare failed while the state disk was full, and /metrics and the probes said nothing
    (an audit of disk faults): ascend_dra_checkpoint_write_failures grows while it lasts."""
    import os

    from tests.integration.daemon import DRIVER

    root = short_tmp / "sa"
    state_dir = root / "plugins" / DRIVER
    state_dir.mkdir(parents=True)
    assert os.system(f"mount -t tmpfs -o size=64k tmpfs {state_dir}") == 0, "needs root (CI runs as root)"
    port = free_port()
    # Without device metadata files (KEP-5304): 16 of them, a page each, would fill this 64 KiB disk by
    # themselves; their own disk faults are in test_disk_faults.py.
    d = DaemonProcess(root, fake_devices=16,
                      extra_args=["--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                                  "--device-metadata", "false"]).start()
    k = Kubelet(d)
    filler = state_dir / "filler"
    try:
        assert scrape(port)[("ascend_dra_checkpoint_write_failures", ())] == 0
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)  # the disk fills up
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        # Appends go on in the journal's last page until it is full; then each one fails.
        errors = {}
        for i in range(16):
            claim = write_claim(d.root, claim_object(f"c{i}", results=[("npu", f"npu-{i}-0")]))
            errors[i] = (claim, k.prepare(claim).claims[claim["metadata"]["uid"]].error)
        failed = [(c, e) for c, e in errors.values() if e]
        assert failed and all("No space left on device" in e for _, e in failed)
        assert scrape(port)[("ascend_dra_checkpoint_write_failures", ())] >= len(failed)
        filler.unlink()
        for claim, _ in failed:
            assert k.prepare(claim).claims[claim["metadata"]["uid"]].error == ""
        assert scrape(port)[("ascend_dra_prepared_claims", ())] == 16
    finally:
        k.close()
        d.stop()
        os.system(f"umount {state_dir}")


def test_slices_that_cannot_be_published_show_in_the_metrics(short_tmp):
    """An RBAC refusal or an API server that does not answer left only a log line: /metrics said
    nothing (an audit of API faults)."""
    kubeconfig = short_tmp / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"  # refused
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
    port = free_port()
    d = DaemonProcess(short_tmp / "node", kubeconfig=kubeconfig,
                      extra_args=["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]).start()
    try:
        import time

        deadline = time.monotonic() + 20
        while scrape(port)[("ascend_dra_resourceslice_publish_failing", ())] != 1:
            assert time.monotonic() < deadline, "publish_failing never became 1"
            time.sleep(0.2)
    finally:
        d.stop()

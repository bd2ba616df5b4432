"""The registration checks of the 1.38 kubelet, and the kubelet dirs derived from --kubelet-root-dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_dra.kubelet.rules import driver_name_problem, endpoint_problems, registration_problems
from ascend_dra.node.settings import Settings, SettingsError


def test_the_default_layout_passes():
    assert registration_problems("ascend.project-hami.io", "/var/lib/kubelet/plugins/ascend.project-hami.io/dra.sock",
                                 "/var/lib/kubelet") == []


@pytest.mark.parametrize("name", ["Ascend.io", "a" * 64, "", "-ascend.io", "ascend_io", "ascend..io"])
def test_driver_names_the_kubelet_refuses(name):
    assert driver_name_problem(name) == (
        f"--driver-name {name!r}: the kubelet accepts only a lower-case DNS subdomain of at most 63 characters "
        "(letters, digits, '-' and '.'; e.g. ascend.project-hami.io)")


def test_a_63_character_driver_name_passes():
    assert driver_name_problem("a" * 30 + "." + "b" * 32) is None


def test_a_relative_endpoint_is_refused():
    assert endpoint_problems("plugins/x/dra.sock", "/var/lib/kubelet") == [
        "DRA socket 'plugins/x/dra.sock': the kubelet accepts only an absolute endpoint path"]


def test_an_endpoint_of_108_bytes_is_refused_and_107_passes():
    root = "/var/lib/kubelet"
    ok = root + "/" + "p" * (107 - len(root) - 1 - len("/dra.sock")) + "/dra.sock"
    assert len(ok) == 107 and endpoint_problems(ok, root) == []
    long = ok.replace("/dra.sock", "x/dra.sock")
    assert endpoint_problems(long, root) == [
        f"DRA socket {long}: 108 bytes long; the kubelet accepts only endpoints shorter than 108 bytes (a unix "
        "socket limit): use a shorter --kubelet-plugins-directory-path or --kubelet-root-dir"]


@pytest.mark.parametrize("endpoint", ["/run/ascend/dra.sock", "/var/lib/kubelet-other/plugins/x/dra.sock",
                                      "/var/lib/kubelet/../run/dra.sock", "/var/lib/kubelet"])
def test_an_endpoint_outside_the_kubelet_root_is_refused(endpoint):
    assert endpoint_problems(endpoint, "/var/lib/kubelet/") == [
        f"DRA socket {endpoint}: the kubelet accepts only endpoints inside its root dir /var/lib/kubelet "
        "(--kubelet-root-dir); put --kubelet-plugins-directory-path under it"]


def test_the_registry_and_plugin_dirs_follow_the_root_unless_given(tmp_path):
    s = Settings(node_name="n", kubelet_root_dir=Path("/data/kubelet"))
    assert (s.registrar_dir, s.plugins_dir) == (Path("/data/kubelet/plugins_registry"), Path("/data/kubelet/plugins"))
    assert s.dra_socket == Path("/data/kubelet/plugins/ascend.project-hami.io/dra.sock")
    given = Settings(node_name="n", kubelet_root_dir=Path("/data/kubelet"), registrar_dir=Path("/data/reg"))
    assert (given.registrar_dir, given.plugins_dir) == (Path("/data/reg"), Path("/data/kubelet/plugins"))
    assert Settings(node_name="n").dra_socket == Path("/var/lib/kubelet/plugins/ascend.project-hami.io/dra.sock")


def test_settings_refuse_plugins_outside_the_kubelet_root_in_cluster_mode_only(tmp_path):
    with pytest.raises(SettingsError) as refused:
        Settings(node_name="n", plugins_dir=Path("/run/plugins"))
    assert refused.value.problems == [
        "DRA socket /run/plugins/ascend.project-hami.io/dra.sock: the kubelet accepts only endpoints inside its "
        "root dir /var/lib/kubelet (--kubelet-root-dir); put --kubelet-plugins-directory-path under it"]
    standalone = Settings(node_name="n", standalone=tmp_path)  # no kubelet checks a standalone run
    assert standalone.dra_socket == tmp_path / "plugins" / "ascend.project-hami.io" / "dra.sock"

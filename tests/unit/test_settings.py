"""settings.py: the socket names of --rolling-update-id, and what it accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_dra.node.settings import Settings, SettingsError

UID = "0f3c1b2e-6d4a-4c3b-9e8f-7a6b5c4d3e2f"  # a pod UID


def test_rolling_update_sockets_carry_the_id():
    s = Settings(node_name="n", standalone=Path("/srv/sa"), rolling_update_id=UID)
    assert s.registration_socket == Path(f"/srv/sa/plugins_registry/ascend.project-hami.io-{UID}-reg.sock")
    assert s.dra_socket == Path(f"/srv/sa/plugins/ascend.project-hami.io/dra-{UID}.sock")
    plain = Settings(node_name="n", standalone=Path("/srv/sa"))
    assert (plain.registration_socket.name, plain.dra_socket.name) == ("ascend.project-hami.io-reg.sock", "dra.sock")


@pytest.mark.parametrize(("root", "registration"), [
    ("/" + "d" * 40, "ascend.project-hami.io-{h8}-reg.sock"),  # the uid does not fit, its short hash does
    ("/" + "d" * 49, "dra-{h16}-reg.sock"),  # not even the driver name fits beside it
], ids=["short hash", "no driver name"])
def test_rolling_update_sockets_fall_back_to_a_hash_of_the_id_when_the_path_is_too_long(root, registration):
    s = Settings(node_name="n", standalone=Path(root), rolling_update_id=UID)
    other = Settings(node_name="n", standalone=Path(root), rolling_update_id=UID[:-1] + "0")
    for path, name in ((s.registration_socket, registration), (s.dra_socket, "dra-{h16}.sock")):
        assert UID not in path.name and len(str(path)) < 108
        prefix, _, suffix = name.partition("{")
        assert path.name.startswith(prefix) and path.name.endswith(suffix.partition("}")[2])
    assert (s.registration_socket, s.dra_socket) != (other.registration_socket, other.dra_socket)


def test_a_rolling_update_id_that_is_no_file_name_is_refused():
    with pytest.raises(SettingsError) as err:
        Settings(node_name="n", standalone=Path("/tmp/x"), rolling_update_id="../evil")
    assert err.value.problems == ["--rolling-update-id '../evil' must be the pod UID (letters, digits, '-', '_' and "
                                  "'.', at most 63 characters): it goes into the socket file names"]


def test_the_health_and_metrics_ports_must_be_ports_and_differ():
    with pytest.raises(SettingsError) as err:
        Settings(node_name="n", standalone=Path("/tmp/x"), healthcheck_port=70000, metrics_port=9400)
    assert err.value.problems == ["--healthcheck-port 70000 must be a TCP port (1-65535) or 0 (off)"]
    with pytest.raises(SettingsError) as err:
        Settings(node_name="n", standalone=Path("/tmp/x"), healthcheck_port=9400, metrics_port=9400)
    assert err.value.problems == ["--metrics-port and --healthcheck-port are both 9400; give them different ports"]

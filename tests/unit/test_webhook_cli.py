"""``ascend-dra webhook`` start-up errors: each names the flag (cli.py, webhook/settings.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.webhook_certs import encrypted_key, issue, make_ca


def webhook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ascend_dra.cli", "webhook", *args], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})


def test_certificate_flags_are_required():
    result = webhook()
    assert (result.returncode, result.stderr) == (2, "ascend-dra webhook: --tls-cert-file and --tls-private-key-file "
                                                     "(or TLS_CERT_FILE, TLS_PRIVATE_KEY_FILE) are required\n")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    return issue(directory, make_ca(directory), "serving")


@pytest.mark.parametrize(("flags", "message"), [
    (["--port", "70000"], "--port 70000 is not a TCP port (0..65535)"),
    (["--driver-name", "Not_DNS"], "--driver-name 'Not_DNS' must be a lower-case DNS subdomain of at most 63 "
                                   "characters (e.g. ascend.project-hami.io)"),
    (["--orphan-grace", "1"], "--orphan-grace 1.0 must be a number of seconds, at least 15 (a review may take 10)"),
    # nan passed `< 15`, and every claim without its pod yet was deleted at the first sweep (an audit).
    (["--orphan-grace", "nan"], "--orphan-grace nan must be a number of seconds, at least 15 (a review may take "
                                "10)"),
    (["--port", "18443", "--metrics-port", "18443"], "--port and --metrics-port are both 18443; give them "
                                                     "different ports"),
    (["--profiles", "fake,fake"], "--profiles fake,fake names a profile twice"),
    (["--address", "no-such-host.invalid"], "--address 'no-such-host.invalid' is neither an IP address nor a name "
                                            "this host resolves (*: every address, IPv4 and IPv6; '::' dual-stack; "
                                            "'0.0.0.0' IPv4 only)"),
], ids=["port", "driver name", "orphan grace", "orphan grace nan", "same ports", "profile twice", "address"])
def test_bad_flags_name_the_flag(pair, flags, message):
    result = webhook("--tls-cert-file", str(pair[0]), "--tls-private-key-file", str(pair[1]), *flags)
    assert (result.returncode, result.stderr) == (2, f"ascend-dra webhook: {message}\n")


@pytest.mark.parametrize("which", ["--port", "--metrics-port"])
def test_a_port_in_use_is_one_line_naming_its_flag(pair, which):
    """It was a 45-line exception group from inside the server's task group (an audit)."""
    import socket

    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        flags = ["--port", str(port)] if which == "--port" else ["--port", "0", "--metrics-port", str(port)]
        result = webhook("--tls-cert-file", str(pair[0]), "--tls-private-key-file", str(pair[1]), "--profiles", "fake",
                         "--address", "127.0.0.1", "--metrics-address", "127.0.0.1", *flags)
    finally:
        taken.close()
    assert result.returncode == 1
    assert result.stderr == (f"ascend-dra webhook: {which} {port}: cannot listen on 127.0.0.1:{port}: Address already "
                             "in use\n")


def test_a_profile_that_does_not_load_is_one_line_without_a_logged_traceback(tmp_path, pair):
    """The quiet check found it, then loading it again for serving logged its traceback first (an audit)."""
    import os

    from tests.distributions import write_distribution

    write_distribution(tmp_path / "vendor", "broken-vendor-profile", {"broken": "import libvendor_not_there\n"})
    result = subprocess.run(
        [sys.executable, "-m", "ascend_dra.cli", "webhook", "--tls-cert-file", str(pair[0]),
         "--tls-private-key-file", str(pair[1]), "--profiles", "fake,broken"],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(filter(None, [
            str(tmp_path / "vendor"), os.environ.get("PYTHONPATH")]))})
    assert (result.returncode, result.stderr) == (2, "ascend-dra webhook: profile 'broken' from broken-vendor-profile "
                                                     "1.0: ModuleNotFoundError: No module named "
                                                     "'libvendor_not_there'\n")


def test_an_unreadable_kubeconfig_is_one_line_naming_the_flag(tmp_path, pair):
    """It was the bare "[Errno 21] Is a directory: '/tmp'" after a log line (an audit)."""
    result = webhook("--tls-cert-file", str(pair[0]), "--tls-private-key-file", str(pair[1]), "--profiles", "fake",
                     "--kubeconfig", str(tmp_path))
    assert (result.returncode, result.stderr) == (2, f"ascend-dra webhook: --kubeconfig {tmp_path} is not a file\n")


def test_key_of_another_certificate_is_refused_at_start(tmp_path, pair):
    other = issue(tmp_path, make_ca(tmp_path), "other")
    result = webhook("--tls-cert-file", str(pair[0]), "--tls-private-key-file", str(other[1]))
    assert result.returncode == 1
    # The tail is the ssl module's source location, which differs between Python builds.
    assert result.stderr.startswith(f"ascend-dra webhook: --tls-private-key-file {other[1]} is not the key of the "
                                    f"certificate in --tls-cert-file {pair[0]} ([X509: KEY_VALUES_MISMATCH] key "
                                    "values mismatch (_ssl.c:")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("case", ["key is no key", "cert is no cert", "key and cert swapped", "encrypted key"])
def test_an_unusable_certificate_file_is_named_with_what_it_lacks(tmp_path, pair, case):
    # Before, the first three gave only OpenSSL's "[SSL] PEM lib (_ssl.c:3926)" after both file names.
    junk = tmp_path / "junk.pem"
    junk.write_text("not a PEM file\n")
    cert, key = {"key is no key": (pair[0], junk), "cert is no cert": (junk, pair[1]),
                 "key and cert swapped": (pair[1], pair[0]),
                 "encrypted key": (pair[0], encrypted_key(pair[1], tmp_path / "enc.key"))}[case]
    result = webhook("--tls-cert-file", str(cert), "--tls-private-key-file", str(key))
    expected = {
        "key is no key": f"--tls-private-key-file {key} holds no PEM private key (a '-----BEGIN PRIVATE KEY-----' "
                         "block, or its RSA or EC form)",
        "cert is no cert": f"--tls-cert-file {cert} holds no PEM certificate (a '-----BEGIN CERTIFICATE-----' block)",
        "key and cert swapped": f"--tls-cert-file {cert} holds no PEM certificate (a '-----BEGIN CERTIFICATE-----' "
                                "block)",
        "encrypted key": f"--tls-private-key-file {key} is encrypted; the webhook needs the key unencrypted (it has "
                         "no passphrase)",
    }[case]
    assert (result.returncode, result.stderr) == (1, f"ascend-dra webhook: {expected}\n")


def test_no_kubeconfig_outside_a_pod_is_said_at_start(pair):
    result = webhook("--tls-cert-file", str(pair[0]), "--tls-private-key-file", str(pair[1]), "--profiles", "fake")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == ("ascend-dra webhook: no --kubeconfig and not in a pod "
                                              "(KUBERNETES_SERVICE_HOST is unset)")


def test_unknown_profile_is_refused_naming_the_installed_ones(pair):
    result = webhook("--tls-cert-file", str(pair[0]), "--tls-private-key-file", str(pair[1]), "--profiles", "nope",
                     "--kubeconfig", "/dev/null")
    assert result.returncode == 2  # a configuration error, as run's and discover's
    assert result.stderr.startswith("ascend-dra webhook: --profiles nope: no profile 'nope' is installed; installed: ")
    assert result.stderr.count("\n") == 1  # one line (was: 'from unknown', after two log lines)


@pytest.mark.parametrize("missing", ["cert", "key"])
def test_a_missing_certificate_file_is_named_by_its_flag(tmp_path, pair, missing):
    # A README trial: "--tls-cert-file tls.crt / --tls-private-key-file tls.key: [Errno 2] No such file
    # or directory: 'tls.crt'" named both flags and quoted Python's error.
    absent = tmp_path / "absent.pem"
    cert, key = (absent, pair[1]) if missing == "cert" else (pair[0], absent)
    result = webhook("--tls-cert-file", str(cert), "--tls-private-key-file", str(key))
    flag = "--tls-cert-file" if missing == "cert" else "--tls-private-key-file"
    assert (result.returncode, result.stderr) == (1, f"ascend-dra webhook: {flag} {absent} does not exist\n")


def test_a_variable_named_almost_like_a_setting_is_a_warning_at_start(tmp_path, pair):
    """As for ``run``: ``WEBHOOK_PRT`` (for WEBHOOK_PORT) would be ignored without a word."""
    kubeconfig = tmp_path / "kubeconfig"  # an API server that is not there: the webhook waits for it
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                          "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                          "users: [{name: u, user: {token: x}}]\n"
                          "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ascend_dra.cli", "webhook", "--tls-cert-file", str(pair[0]), "--tls-private-key-file",
         str(pair[1]), "--profiles", "fake", "--kubeconfig", str(kubeconfig), "--port", "0"],
        stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin", "WEBHOOK_PRT": "9443"})
    assert proc.stderr is not None
    with proc.stderr:
        try:
            first = proc.stderr.readline()  # the first line it logs
        finally:
            proc.kill()
            proc.wait(10)
    assert first.rstrip().endswith("environment variable WEBHOOK_PRT is not a setting of ascend-dra webhook and is "
                                   "ignored; did you mean WEBHOOK_PORT?"), first


@pytest.mark.parametrize(("text", "said"), [
    ("garbage: [\n", "is not YAML: while parsing a flow node"),
    ("contexts:\n- foo: 1\n", "contexts[0] must be a mapping with name and context"),
    ("users: [{name: u, user: token}]\nclusters: []\n", "users[0] must be a mapping with name and user"),
], ids=["not yaml", "context without name", "user not a mapping"])
def test_a_malformed_kubeconfig_is_one_line(pair, tmp_path, text, said):
    """A README trial: a YAML error or an entry without its name was a 60-line traceback."""
    kubeconfig = tmp_path / "bad.kc"
    kubeconfig.write_text(text)
    result = webhook("--tls-cert-file", str(pair[0]), "--tls-private-key-file", str(pair[1]), "--profiles", "fake",
                     "--port", "0", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.splitlines()[-1]  # after the INFO lines of the profiles loaded
    assert line.startswith(f"ascend-dra webhook: kubeconfig {kubeconfig}") and said in line, line

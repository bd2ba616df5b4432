"""The Helm chart (deployments/helm/ascend-dra) as the cluster tests use it: render with the real
``helm`` (hack/build-helm.sh), and send rendered objects to a real API server.

* :func:`helm` runs the cached binary; :func:`render` returns the objects ``helm template`` prints.
* :func:`collection_path` finds an object's REST collection through the API server's discovery, so
  no kind-to-path table is kept here.
* :func:`api_as` makes one request with another bearer token (a service account's).
* :func:`install_cert_manager_crds` gives the API server cert-manager's kinds (Issuer, Certificate)
  under cert-manager's own schemas, so the chart's certManager objects are sent, not only rendered.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deployments" / "helm" / "ascend-dra"
BUILD_HELM = ROOT / "hack" / "build-helm.sh"
FETCH_CERT_MANAGER_CRDS = ROOT / "hack" / "fetch-cert-manager-crds.sh"
RELEASE = "ascend-dra"

#: cert-manager's kinds the chart and deployments/webhook create (webhook.certificate.mode certManager).
CERT_MANAGER_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}


def helm_binary() -> Path:
    """The helm that ``make helm-bin`` builds; fail (with what to run) when it is missing."""
    path = Path(subprocess.run(["bash", str(BUILD_HELM), "--print"], check=True, capture_output=True,
                               text=True).stdout.strip())
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} missing: run `make helm-bin` (hack/build-helm.sh builds it from its Go module)",
                    pytrace=False)
    return path


def helm(*args: str) -> str:
    """Run ``helm ARGS`` and return its stdout; a failure shows helm's stderr."""
    proc = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout


def render(namespace: str, *value_files: str, set_values: tuple[str, ...] = (),
           kube_version: str = "1.35", release: str = RELEASE) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders for ``value_files`` (names under the chart's ci/)."""
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", kube_version]
    for name in value_files:
        args += ["-f", str(CHART / "ci" / name)]
    for item in set_values:
        args += ["--set", item]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The rendered objects of ``kind``."""
    return [o for o in objects if o["kind"] == kind]


def collection_path(cp: Any, obj: dict[str, Any]) -> str:
    """The REST collection of ``obj`` (``/apis/apps/v1/namespaces/ns/daemonsets``), from discovery."""
    api_version = obj["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    status, listing = cp.api("GET", base)
    assert status == 200, f"discovery {base}: {status} {listing}"
    [resource] = [r for r in listing["resources"] if r["kind"] == obj["kind"] and "/" not in r["name"]]
    if resource["namespaced"]:
        return f"{base}/namespaces/{obj['metadata']['namespace']}/{resource['name']}"
    return f"{base}/{resource['name']}"


def api_as(cp: Any, token: str, method: str, path: str, body: Any = None,
           content_type: str = "application/json") -> tuple[int, Any]:
    """One request to ``cp``'s API server with ``token`` instead of the admin's."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(cp.server + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}", "Accept": "application/json",
                                          "Content-Type": content_type})
    ctx = ssl.create_default_context(cafile=str(cp.ca_file))
    ctx.check_hostname = False  # the serving certificate is for the apiserver's names, we dial 127.0.0.1
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def token_kubeconfig(cp: Any, token: str, path: Path) -> Path:
    """A kubeconfig for ``cp`` that authenticates with ``token``."""
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
           "clusters": [{"name": "c", "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_file)}}],
           "users": [{"name": "sa", "user": {"token": token}}],
           "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def install_cert_manager_crds(cp: Any) -> None:
    """Create cert-manager's CRDs in ``cp`` (server-side apply: idempotent) and wait until the API
    server serves ``cert-manager.io/v1`` with them; fail with what to run when they were not fetched.

    The CRDs are cert-manager's own, from its Go module (hack/fetch-cert-manager-crds.sh, which
    ``make cluster-bins`` runs): their schemas judge our Issuers and Certificates. Nothing issues
    the certificates (cert-manager's controller cannot be built here; the script says why).
    """
    crd_dir = Path(subprocess.run(["bash", str(FETCH_CERT_MANAGER_CRDS), "--print"], check=True,
                                  capture_output=True, text=True).stdout.strip())
    files = sorted(crd_dir.glob("cert-manager.io_*.yaml"))
    if not (crd_dir / ".complete").is_file() or not files:
        pytest.fail(f"cert-manager's CRDs missing in {crd_dir}: run `make cluster-bins` "
                    f"({FETCH_CERT_MANAGER_CRDS.relative_to(ROOT)} fetches them from the Go module proxy)",
                    pytrace=False)
    names = []
    for file in files:
        crd = yaml.safe_load(file.read_text())
        names.append(crd["metadata"]["name"])
        status, reply = cp.api(
            "PATCH", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{names[-1]}"
            "?fieldManager=ascend-dra-tests&force=true", crd, content_type="application/apply-patch+yaml")
        assert status in (200, 201), f"CRD {names[-1]}: {status} {reply}"

    def served() -> bool:
        for name in names:
            status, crd = cp.api("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = crd.get("status", {}).get("conditions", []) if status == 200 else []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        status, listing = cp.api("GET", "/apis/cert-manager.io/v1")
        return status == 200 and {"Issuer", "Certificate"} <= {r["kind"] for r in listing["resources"]}

    deadline = time.monotonic() + 60
    while not served():
        assert time.monotonic() < deadline, "cert-manager's CRDs not served within 60 s"
        time.sleep(0.2)

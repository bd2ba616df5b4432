"""A HAMi device config as the webhook's chip table (ascend_dra/hami/chips.py, docs/webhook.md),
and the conversion of the resources it names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ascend_dra.hami.chips import DEFAULT_CHIPS, DeviceConfigError, HamiChip, load_device_config
from ascend_dra.hami.convert import convert_pod, unconverted_resources

#: HAMi's current layout (``vnpus: {hamiVnpuCore, configs}``, Project-HAMi/HAMi ``VNPUs``), with a
#: chip its defaults lack (910B1), two chip names under one commonWord (as in HAMi's own device
#: tests: 910B4 and 910B4-1 as ``Ascend910B4``) and HAMi's other keys, which are not read.
CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
vnpus:
  hamiVnpuCore: true
  configs:
  - chipName: 910B1
    commonWord: Ascend910B1
    resourceName: huawei.com/Ascend910B1
    resourceMemoryName: huawei.com/Ascend910B1-memory
    memoryAllocatable: 65536
    memoryCapacity: 65536
    aiCore: 25
    templates: [{name: vir05_1c_16g, memory: 16384, aiCore: 5}]
  - chipName: 910B4
    commonWord: Ascend910B4
    resourceName: huawei.com/Ascend910B4
    resourceMemoryName: huawei.com/Ascend910B4-memory
  - chipName: 910B4-1
    commonWord: Ascend910B4
    resourceName: huawei.com/Ascend910B4
    resourceMemoryName: huawei.com/Ascend910B4-memory
  - chipName: 310P3
    commonWord: Ascend310P
    resourceName: huawei.com/Ascend310P
    resourceMemoryName: huawei.com/Ascend310P-memory
    resourceCoreName: huawei.com/Ascend310P-core
    runtimeClassName: ascend
"""
DRIVER = "ascend.project-hami.io"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "device-config.yaml"
    path.write_text(text)
    return path


def test_the_current_layout_gives_one_chip_per_common_word_in_the_configs_order(tmp_path):
    chips = load_device_config(write(tmp_path, CONFIG))
    assert chips == (
        HamiChip("Ascend910B1", "huawei.com/Ascend910B1", "huawei.com/Ascend910B1-memory", None, "chipName",
                 ("910B1",), memory_allocatable_mib=65536),
        HamiChip("Ascend910B4", "huawei.com/Ascend910B4", "huawei.com/Ascend910B4-memory", None, "chipName",
                 ("910B4", "910B4-1")),
        HamiChip("Ascend310P", "huawei.com/Ascend310P", "huawei.com/Ascend310P-memory", "huawei.com/Ascend310P-core",
                 "chipName", ("310P3",), runtime_class="ascend"),
    )


def test_the_older_layout_a_bare_vnpus_list_is_read_too(tmp_path):
    """HAMi before the hamiVnpuCore switch, and volcano-vgpu's device config, list the chips under vnpus."""
    older = "vnpus:\n- chipName: 310P3\n  commonWord: Ascend310P\n  resourceName: huawei.com/Ascend310P\n"
    assert load_device_config(write(tmp_path, older)) == (
        HamiChip("Ascend310P", "huawei.com/Ascend310P", None, None, "chipName", ("310P3",)),)


@pytest.mark.parametrize(("text", "message"), [
    ("nvidia: {}\n", "no vnpus key; give the device-config.yaml of HAMi's hami-scheduler-device ConfigMap"),
    ("vnpus: {hamiVnpuCore: true, configs: []}\n", "vnpus.configs must be a non-empty list of chips"),
    ("vnpus: []\n", "vnpus must be a non-empty list of chips"),
    ("vnpus: [chipName]\n", "vnpus[0] must be a mapping"),
    ("vnpus:\n- {chipName: 910B1, commonWord: Ascend910B1, resourceName: huawei.com/Ascend910B1}\n"
     "- {chipName: 910B2, resourceName: huawei.com/Ascend910B2}\n", "vnpus[1].commonWord is missing"),
    ("vnpus: [{commonWord: Ascend910B1, resourceName: huawei.com/Ascend910B1}]\n", "vnpus[0].chipName is missing"),
    ("vnpus: [{chipName: 910B1, commonWord: Ascend910B1}]\n", "vnpus[0].resourceName is missing"),
    ("vnpus: [{chipName: 910B1, commonWord: Ascend910B1, resourceName: 12}]\n",
     "vnpus[0].resourceName must be a string, not 12"),
    ("vnpus: [{chipName: 910B1, commonWord: 'Ascend 910', resourceName: huawei.com/x}]\n",
     "vnpus[0].commonWord 'Ascend 910' must be letters, digits and '-'"),
    ("vnpus: [{chipName: 910B1, commonWord: Ascend910B1, resourceName: Ascend910B1}]\n",
     "vnpus[0].resourceName 'Ascend910B1' is not a resource name (<domain>/<name>"),
    ("vnpus:\n- {chipName: 910B4, commonWord: Ascend910B4, resourceName: huawei.com/Ascend910B4}\n"
     "- {chipName: 910B4-1, commonWord: Ascend910B4, resourceName: huawei.com/Ascend910B4-1}\n",
     "vnpus[1] and vnpus[0] share commonWord Ascend910B4 but name different resources"),
    ("vnpus:\n- {chipName: 910B3, commonWord: Ascend910B3, resourceName: huawei.com/Ascend910B}\n"
     "- {chipName: 910B3, commonWord: Ascend910B, resourceName: huawei.com/Ascend910B}\n",
     "vnpus[1].resourceName huawei.com/Ascend910B is also a resource of commonWord Ascend910B3"),
    ("vnpus: [{chipName: 910B1, commonWord: Ascend910B1, resourceName: huawei.com/a,\n"
     "          resourceCoreName: huawei.com/a}]\n", "vnpus[0] names one resource twice"),
    ("vnpus: [{chipName: 910B1, commonWord: Ascend910B1, resourceName: example.com/npu}]\n",
     "vnpus[0].resourceName example.com/npu is not under huawei.com/: the API server sends the webhook only pods"),
    ("vnpus: [\n", "not YAML: "),
], ids=["no vnpus", "empty configs", "empty list", "entry not a mapping", "no commonWord", "no chipName",
        "no resourceName", "not a string", "bad commonWord", "bad resource", "shared word, other resources",
        "shared resource", "one resource twice", "other domain", "not yaml"])
def test_a_config_that_cannot_be_used_names_the_file_and_the_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(DeviceConfigError) as caught:
        load_device_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(DeviceConfigError, match=r"device-config.yaml: cannot be read: No such file or directory"):
        load_device_config(tmp_path / "device-config.yaml")


def pod(limits: dict[str, str], annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def test_a_chip_only_the_config_names_is_converted_for_its_chip_name(tmp_path):
    chips = load_device_config(write(tmp_path, CONFIG))
    limits = {"huawei.com/Ascend910B1": "2", "huawei.com/Ascend910B1-memory": "16384", "cpu": "1"}
    annotations = {"hami.io/use-Ascend910B1-uuid": "A-1"}
    assert convert_pod(pod(limits, annotations), "ns", chips=DEFAULT_CHIPS) is None  # not a default name
    conversion = convert_pod(pod(limits, annotations), "ns", chips=chips)
    assert conversion is not None
    [claim] = conversion.claims
    assert (claim.pod_claim_name, claim.common_word) == ("c-ascend910b1", "Ascend910B1")
    exactly = claim.spec["devices"]["requests"][0]["exactly"]
    assert (exactly["count"], exactly["capacity"]) == (2, {"requests": {"memory": "17179869184"}})
    assert [s["cel"]["expression"] for s in exactly["selectors"]][1:] == [
        f'device.attributes["{DRIVER}"].?chipName.orValue("") == "910B1"',
        f'device.attributes["{DRIVER}"].uuid in ["A-1"]']
    container = next(p for p in conversion.patch if p["path"] == "/spec/containers/0/resources")
    assert container["value"] == {"limits": {"cpu": "1"}, "claims": [{"name": "c-ascend910b1"}]}


def test_a_common_word_with_two_chip_names_selects_either(tmp_path):
    chips = load_device_config(write(tmp_path, CONFIG))
    [claim] = convert_pod(pod({"huawei.com/Ascend910B4": "1"}), "ns", chips=chips).claims
    selectors = claim.spec["devices"]["requests"][0]["exactly"]["selectors"]
    assert selectors[1]["cel"]["expression"] == \
        f'device.attributes["{DRIVER}"].?chipName.orValue("") in ["910B4","910B4-1"]'


def test_a_resource_the_config_does_not_name_stays_in_the_pod_and_is_warned_about(tmp_path):
    """The 910B1 entry names no core resource, as HAMi's 910 entries do not: HAMi then leaves
    ``-core`` alone, and so does the conversion, which says so in a warning."""
    chips = load_device_config(write(tmp_path, CONFIG))
    limits = {"huawei.com/Ascend910B1": "1", "huawei.com/Ascend910B1-core": "50"}
    conversion = convert_pod(pod(limits), "ns", chips=chips)
    container = next(p for p in conversion.patch if p["path"] == "/spec/containers/0/resources")
    assert container["value"]["limits"] == {"huawei.com/Ascend910B1-core": "50"}
    assert "cores" not in conversion.claims[0].spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
    assert unconverted_resources(pod(limits), chips) == ["spec.containers[0]: huawei.com/Ascend910B1-core"]
    # Ascend910A is one of HAMi's defaults but not in this config: not converted here.
    assert unconverted_resources(pod({"huawei.com/Ascend910A": "1"}), chips) == [
        "spec.containers[0]: huawei.com/Ascend910A"]
    assert unconverted_resources(pod({"huawei.com/Ascend910A": "1"})) == []


def test_the_cli_refuses_an_unusable_config_in_one_line(tmp_path):
    from tests.webhook_certs import issue, make_ca

    cert, key = issue(tmp_path, make_ca(tmp_path), "serving")
    bad = write(tmp_path, "vnpus: [{chipName: 910B1, commonWord: Ascend910B1}]\n")
    result = subprocess.run([sys.executable, "-m", "ascend_dra.cli", "webhook", "--tls-cert-file", str(cert),
                             "--tls-private-key-file", str(key), "--hami-device-config", str(bad)],
                            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert (result.returncode, result.stderr) == (
        2, f"ascend-dra webhook: --hami-device-config {bad}: vnpus[0].resourceName is missing\n")

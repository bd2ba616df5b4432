"""Opaque-config validation of ResourceClaims and ResourceClaimTemplates (ascend_dra/webhook/validate.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_dra.profiles import fake, gpu
from ascend_dra.profiles.ascend import npu310p, npu910
from ascend_dra.webhook.validate import claim_problems, denial_message

DRIVER = "ascend.project-hami.io"
API = f"{DRIVER}/v1alpha1"
PROFILES = {"gpu": gpu.factory(), "fake": fake.factory(), "npu-310P": npu310p.factory(), "npu-910": npu910.factory()}


def claim(configs: list[dict[str, Any]], version: str = "v1", template: bool = False) -> dict[str, Any]:
    request = ({"name": "gpu", "deviceClassName": "gpu.example.com"} if version == "v1beta1"
               else {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}})
    spec = {"devices": {"requests": [request], "config": configs}}
    return {"metadata": {"name": "c"}, "spec": {"spec": spec} if template else spec}


def ours(parameters: Any, requests: list[str] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"opaque": {"driver": DRIVER, "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    return entry


BAD_GPU = {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "Bogus"}}
GOOD_GPU = {"apiVersion": API, "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1beta2"])
@pytest.mark.parametrize("template", [False, True], ids=["claim", "template"])
def test_bad_enum_names_path_allowed_values_and_request_in_every_version(version, template):
    root = "spec.spec" if template else "spec"
    kind = "ResourceClaimTemplate" if template else "ResourceClaim"
    problems = claim_problems(claim([ours(BAD_GPU, ["gpu"])], version, template), kind, version, DRIVER, PROFILES)
    assert problems == [f"{root}.devices.config[0].opaque.parameters.sharing.strategy: 'Bogus' is not one of "
                        "TimeSlicing, SpacePartitioning (for request gpu (class gpu.example.com))"]


@pytest.mark.parametrize(("parameters", "expected"), [
    (GOOD_GPU, []),
    ({"apiVersion": API, "kind": "FakeConfig", "aicoreLimit": 50}, []),
    ({"apiVersion": API, "kind": "NpuConfig", "logLevel": "debug"}, []),
    ([1, 2], ["parameters: must be a JSON object with apiVersion and kind, got an array"]),
    ("text", ["parameters: must be a JSON object with apiVersion and kind, got str"]),
    (None, [f"parameters: required field missing: a config for driver {DRIVER} needs apiVersion {API} and a kind"]),
    ({"apiVersion": API, "kind": "Nope"}, ["parameters.kind: 'Nope' is not one of FakeConfig, GpuConfig, NpuConfig"]),
    ({"apiVersion": "x/v1", "kind": "NpuConfig"}, [f"parameters.apiVersion: 'x/v1' is not '{API}'"]),
    ({"apiVersion": API, "kind": "NpuConfig", "logLevel": "loud", "extra": 1},
     ["parameters.logLevel: 'loud' is not one of inherit, debug, info, warning, error, null",
      "parameters: unknown field(s) extra; allowed fields: logLevel, logToStdout, mountTools"]),
    ({"apiVersion": API, "kind": "FakeConfig", "pad": "a" * 20000},
     ["parameters: is 20077 bytes of JSON, more than the 10240 allowed"]),
], ids=["good GpuConfig", "good FakeConfig", "good NpuConfig", "array", "string", "missing", "unknown kind",
        "wrong apiVersion", "two faults at once", "oversized"])
def test_config_problems(parameters, expected):
    problems = claim_problems(claim([ours(parameters)]), "ResourceClaim", "v1", DRIVER, PROFILES)
    assert problems == [f"spec.devices.config[0].opaque.{p} (for all requests)" for p in expected]


def test_other_drivers_configs_pass_untouched_and_every_problem_is_reported():
    configs = [ours(BAD_GPU, ["gpu"]), {"opaque": {"driver": "other.example.com", "parameters": [1]}},
               {"requests": ["gpu"]}, ours([1])]
    problems = claim_problems(claim(configs), "ResourceClaim", "v1", DRIVER, PROFILES)
    assert [p.split(":")[0] for p in problems] == ["spec.devices.config[0].opaque.parameters.sharing.strategy",
                                                   "spec.devices.config[3].opaque.parameters"]


def test_kind_known_only_to_unloaded_profile_is_refused_listing_loaded_kinds():
    problems = claim_problems(claim([ours(GOOD_GPU)]), "ResourceClaim", "v1", DRIVER, {"fake": PROFILES["fake"]})
    assert problems == ["spec.devices.config[0].opaque.parameters.kind: 'GpuConfig' is not one of FakeConfig "
                        "(for all requests)"]


def test_subrequest_is_named():
    obj = {"spec": {"devices": {"requests": [{"name": "r", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.example.com"}]}], "config": [ours(BAD_GPU, ["r/big"])]}}}
    [problem] = claim_problems(obj, "ResourceClaim", "v1beta2", DRIVER, PROFILES)
    assert problem.endswith("(for request r/big (class gpu.example.com))")


def test_unknown_version_is_an_error():
    with pytest.raises(ValueError, match="'v2' is not one of v1, v1beta1, v1beta2"):
        claim_problems(claim([]), "ResourceClaim", "v2", DRIVER, PROFILES)


def test_denial_message_counts_and_names_the_object():
    assert denial_message("ResourceClaim", "ns", "", ["a: b", "c: d"]) == (
        "ResourceClaim ns/<generated>: 2 problems in opaque configs for our driver: a: b; c: d")

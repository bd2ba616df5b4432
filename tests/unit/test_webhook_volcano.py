"""A Volcano Job's task templates converted as pods are (ascend_dra/hami/volcano.py,
docs/webhook.md#volcano-jobs)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ascend_dra.hami.convert import ConversionError, Mode, convert_pod
from ascend_dra.hami.volcano import VOLCANO_VERSION_WARNING, conversion_warnings, convert_job
from tests.jsonpatch import apply_patch


def job(*, with_metadata: bool = True) -> dict[str, Any]:
    """A HAMi-era Volcano Job (Lab 13's shape): a worker task asking for 310P shares, a plain one."""
    worker: dict[str, Any] = {"spec": {"schedulerName": "volcano", "restartPolicy": "Never", "containers": [{
        "name": "infer", "image": "x",
        "resources": {"limits": {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "4096",
                                 "huawei.com/Ascend310P-core": "25", "cpu": "2"}}}]}}
    if with_metadata:
        worker["metadata"] = {"annotations": {"hami.io/use-Ascend310P-uuid": "U-1"}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "vjob", "namespace": "ns"},
            "spec": {"minAvailable": 2, "schedulerName": "volcano", "tasks": [
                {"name": "worker", "replicas": 2, "template": worker},
                {"name": "plain", "replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            ]}}


def test_a_task_template_is_converted_as_its_pod_would_be_in_template_mode():
    source = job()
    conversion = convert_job(source, "ns")
    assert conversion is not None and conversion.mode is Mode.TEMPLATE
    template = source["spec"]["tasks"][0]["template"]
    as_pod = convert_pod({"metadata": template["metadata"], "spec": template["spec"]}, "ns", mode=Mode.TEMPLATE)
    [claim] = conversion.claims
    assert (claim.object_name, claim.spec) == (as_pod.claims[0].object_name, as_pod.claims[0].spec)
    assert claim.container == "spec.tasks[0].template.spec.containers[0]"
    converted = apply_patch(copy.deepcopy(source), [dict(op) for op in conversion.patch])
    worker = converted["spec"]["tasks"][0]["template"]
    assert worker["spec"]["resourceClaims"] == [{"name": "infer-ascend310p",
                                                 "resourceClaimTemplateName": claim.object_name}]
    assert worker["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "2"},
                                                            "claims": [{"name": "infer-ascend310p"}]}
    assert worker["metadata"]["labels"] == {"hami.io/dra": "true"}
    assert 'uuid in ["U-1"]' in str(claim.spec)  # the template's annotations select, as the pod's would
    assert converted["spec"]["tasks"][1] == source["spec"]["tasks"][1]  # asks for nothing: untouched
    assert {k: v for k, v in converted["spec"].items() if k != "tasks"} == {"minAvailable": 2,
                                                                         "schedulerName": "volcano"}


def test_a_template_without_metadata_gets_it_with_the_label():
    """JSON Patch cannot add /metadata/labels below a template that has no metadata."""
    source = job(with_metadata=False)
    conversion = convert_job(source, "ns")
    converted = apply_patch(copy.deepcopy(source), [dict(op) for op in conversion.patch])
    assert converted["spec"]["tasks"][0]["template"]["metadata"] == {"labels": {"hami.io/dra": "true"}}


def test_a_job_without_hami_resources_is_left_alone():
    source = job()
    source["spec"]["tasks"] = source["spec"]["tasks"][1:]
    assert convert_job(source, "ns") is None
    assert convert_job({"spec": {"tasks": "junk"}}, "ns") is None
    assert convert_job({"spec": None}, "ns") is None


def test_problems_and_warnings_name_the_task():
    source = job()
    limits = source["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["huawei.com/Ascend310P-core"] = "150"
    conversion = convert_job(source, "ns")
    assert conversion.warnings == ((
        'spec.tasks[0].template.spec.containers[0].resources.limits["huawei.com/Ascend310P-core"]',
        "'150' is more than 100 percent of a chip: capped to 100, the whole chip's cores, as HAMi caps it"),)
    limits["huawei.com/Ascend310P-core"] = "-1"
    with pytest.raises(ConversionError) as caught:
        convert_job(source, "ns")
    assert list(caught.value.problems) == [(
        'spec.tasks[0].template.spec.containers[0].resources.limits["huawei.com/Ascend310P-core"]',
        "'-1' must be 0 or more (percent of a chip)")]


def test_a_converted_job_is_told_the_volcano_it_needs_and_its_stale_min_resources():
    source = job()
    assert conversion_warnings(source) == [VOLCANO_VERSION_WARNING]
    source["spec"]["minResources"] = {"cpu": "2", "huawei.com/Ascend310P": "2", "huawei.com/Ascend310P-memory": "8192"}
    warnings = conversion_warnings(source)
    assert warnings[0] == VOLCANO_VERSION_WARNING and "Volcano 1.11 or later" in warnings[0]
    assert [w.split(" is not")[0] for w in warnings[1:]] == ["spec.minResources: huawei.com/Ascend310P",
                                                              "spec.minResources: huawei.com/Ascend310P-memory"]

"""HAMi resources in a Volcano Job's task templates -> ResourceClaimTemplates (pure; no API calls).

Volcano creates a Job's pods from ``spec.tasks[].template`` and sizes its PodGroup from those
templates too (the requests of ``minAvailable`` pods, ``minResources``). A Job written for HAMi
asks there for ``huawei.com/*`` resources that no node advertises once HAMi's device plugin is
gone, so converting only its pods (which the pod webhook does) left the Job waiting in Volcano's
queue for resources that cannot come. Each task template is converted as a pod is
(:func:`ascend_dra.hami.convert.convert_pod`), always in template mode: a task makes many pods, so
each gets its own claim from the template, created by the claim controller. docs/webhook.md#volcano-jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ascend_dra.hami.chips import DEFAULT_CHIPS, RESOURCE_PREFIX, HamiChip
from ascend_dra.hami.convert import ConversionError, Mode, PodConversion, convert_pod

__all__ = ("GROUP", "KIND", "VOLCANO_VERSION_WARNING", "conversion_warnings", "convert_job", "task_templates")

#: ``batch.volcano.sh/v1alpha1`` ``Job`` (the version Volcano serves; its v1beta1 is the PodGroup's).
GROUP = "batch.volcano.sh"
KIND = "Job"


#: Given with every converted Job: Volcano's Job CRD keeps the converted fields, in this shape,
#: from v1.11 (v1.7-v1.8 prune them, v1.8.2-v1.10 nest the template name under ``source``).
VOLCANO_VERSION_WARNING = (
    "its task templates now ask for ResourceClaimTemplates (spec.resourceClaims, containers[].resources.claims): "
    "Volcano 1.11 or later keeps them; an older Volcano drops them and its pods start without an NPU "
    "(label such jobs and their task templates ascend.project-hami.io/webhook=ignore)")


def conversion_warnings(job: Mapping[str, Any]) -> list[str]:
    """Admission warnings for a Job that is converted: the Volcano version it needs, and each
    ``spec.minResources`` entry that asks for ``huawei.com/*`` (left as the user wrote it: no node
    advertises it any more, so the job waits for it)."""
    spec = job.get("spec")
    minimum = spec.get("minResources") if isinstance(spec, Mapping) else None
    stale = [name for name in (minimum if isinstance(minimum, Mapping) else ())
             if str(name).startswith(RESOURCE_PREFIX)]
    return [VOLCANO_VERSION_WARNING] + [
        f"spec.minResources: {name} is not converted and no node advertises it once HAMi's device plugin is gone; "
        "remove it, or the job waits for it" for name in stale]


def task_templates(job: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """``(index, template)`` of every task of ``job`` that has a pod template with a ``spec``
    (Volcano's own validation refuses a task without one; a malformed job yields fewer)."""
    spec = job.get("spec")
    tasks = spec.get("tasks") if isinstance(spec, Mapping) else None
    found = []
    for index, task in enumerate(tasks if isinstance(tasks, list) else ()):
        template = task.get("template") if isinstance(task, Mapping) else None
        if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
            found.append((index, template))
    return found


def _no_name() -> str:
    return ""  # template mode names nothing after the pod (a task's pods are named by Volcano)


def convert_job(job: Mapping[str, Any], namespace: str, *, driver_name: str = "ascend.project-hami.io",
                chips: Sequence[HamiChip] = DEFAULT_CHIPS, random5: Callable[[], str] = _no_name,
                ) -> PodConversion | None:
    """Plan the conversion of every task template of a Volcano Job.

    :param job: the Job as the API server sent it (``request.object``).
    :param namespace: ``request.namespace``.
    :param driver_name: the driver in the CEL selectors.
    :param chips: the HAMi resources converted (:mod:`ascend_dra.hami.chips`).
    :returns: the templates to create and the Job's JSON Patch (paths under
        ``/spec/tasks/<i>/template``), in template mode; None when no task asks for an Ascend chip.
    :raises ConversionError: with every problem of every task, each path starting
        ``spec.tasks[<i>].template.`` (and so do the conversion's warnings).
    """
    problems: list[tuple[str, str]] = []
    warnings: list[tuple[str, str]] = []
    planned = []
    patch: list[Mapping[str, Any]] = []
    for index, template in task_templates(job):
        where = f"spec.tasks[{index}].template"
        pod = {"metadata": template.get("metadata") or {}, "spec": template["spec"]}
        try:
            conversion = convert_pod(pod, namespace, mode=Mode.TEMPLATE, driver_name=driver_name, chips=chips,
                                     random5=random5)
        except ConversionError as exc:
            problems.extend((f"{where}.{path}", message) for path, message in exc.problems)
            continue
        if conversion is None:
            continue
        warnings.extend((f"{where}.{path}", message) for path, message in conversion.warnings)
        planned.extend(attrs.evolve(claim, container=f"{where}.{claim.container}") for claim in conversion.claims)
        prefix = f"/spec/tasks/{index}/template"
        for op in conversion.patch:
            if op["path"].startswith("/metadata") and not isinstance(template.get("metadata"), Mapping):
                # A template without metadata: JSON Patch cannot add below a member that is not there.
                patch.append({"op": "add", "path": f"{prefix}/metadata", "value": {"labels": op["value"]}})
            else:
                patch.append({**op, "path": prefix + op["path"]})
    if problems:
        raise ConversionError(problems)
    if not patch:
        return None
    return PodConversion(Mode.TEMPLATE, tuple(planned), tuple(patch), tuple(warnings))

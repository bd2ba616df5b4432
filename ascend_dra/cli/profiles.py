"""``ascend-dra profiles``: every installed profile, the distribution that shipped it, and whether it loads.

Each entry point of the group ``ascend_dra.profiles`` is imported and its factory called, exactly
as the daemon would (:func:`ascend_dra.profiles.registry.load_installed`), so a profile that is
broken here is broken in the daemon too. Discovery is not run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib.metadata import EntryPoint

import yaml

from ascend_dra.profiles import registry

__all__ = ("OUTPUTS", "rows", "run")

#: Output formats of :func:`run`.
OUTPUTS = ("table", "json", "yaml")
_COLUMNS = ("NAME", "DISTRIBUTION", "VERSION", "TARGET", "STATUS")


def rows(eps: Iterable[EntryPoint] | None = None) -> list[dict[str, str]]:
    """One dict per installed profile: ``name``, ``distribution``, ``version``, ``target``, ``status``.

    ``status`` is ``"ok"``, ``"broken: <reason>"``, or ``"ok; cannot start with its default options:
    <reason>"`` when the profile's optional ``preflight({})`` refuses (gpu without pynvml: ``run``
    refuses it too unless an option such as ``gpu.simulate=always`` is given).

    :param eps: entry points to list; default every installed one.
    """
    return [
        {"name": p.name, "distribution": p.distribution, "version": p.version, "target": p.target,
         "status": _status(p)}
        for p in registry.load_installed(eps, log=False)
    ]


def _status(loaded: registry.LoadedProfile) -> str:
    check = getattr(loaded.profile, "preflight", None)
    if loaded.error is not None or not callable(check):
        return loaded.status
    try:
        check({})
    except Exception as exc:  # whatever a third party's hook raises is its reason
        return f"ok; cannot start with its default options: {exc}"
    return "ok"


def run(output: str = "table", eps: Iterable[EntryPoint] | None = None) -> str:
    """Render the installed profiles as a table, JSON (a list of objects) or YAML.

    :param output: one of :data:`OUTPUTS`.
    :param eps: entry points to list; default every installed one.
    :returns: the text to print, ending with a newline.
    :raises ValueError: if ``output`` is not one of :data:`OUTPUTS`.
    """
    if output not in OUTPUTS:
        raise ValueError(f"profiles: output {output!r} is not one of {', '.join(OUTPUTS)}")
    table = rows(eps)
    if output == "json":
        return json.dumps(table, indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(table, sort_keys=False)
    lines = [list(_COLUMNS)] + [[row[c.lower()] for c in _COLUMNS] for row in table]
    widths = [max(len(line[i]) for line in lines) for i in range(len(_COLUMNS) - 1)]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)) + "  " + line[-1] + "\n"
        for line in lines
    )

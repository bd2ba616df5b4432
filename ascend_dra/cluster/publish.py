"""Publishing the node's pool: ResourceSlice files (standalone) or objects in the API server.

The slice objects come from :func:`ascend_dra.cluster.slices.build_slices`. Standalone mode writes them
to ``DIR/resourceslices/<node>-<driver>-<index>.yaml``; the pool generation rises whenever the
set of slices changes, and files of slices that no longer exist are removed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import yaml

from ascend_dra.cluster.slices import build_slices
from ascend_dra.model import Inventory
from ascend_dra.system.atomicfile import remove_durably, write_atomic

__all__ = ("FilePublisher", "build_slices")

log = logging.getLogger(__name__)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _specs_without_generation(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**s["spec"], "pool": {**s["spec"]["pool"], "generation": None}} for s in slices]


class FilePublisher:
    """Writes the pool's ResourceSlices as YAML files under ``directory`` (standalone mode)."""

    def __init__(self, directory: Path, *, driver_name: str, node_name: str) -> None:
        self.directory = directory
        self.driver_name = driver_name
        self.node_name = node_name
        self.generation = 0
        self._published: list[dict[str, Any]] | None = None

    def _file(self, index: int) -> Path:
        return self.directory / f"{self.node_name}-{self.driver_name}-{index}.yaml"

    def _read_existing(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.directory.glob(f"{self.node_name}-{self.driver_name}-*.yaml")):
            try:
                found.append(yaml.load(path.read_text(), Loader=_Loader))
            except (OSError, yaml.YAMLError):
                log.warning("ignoring an unreadable slice file", extra={"file": str(path)})
        return [s for s in found if isinstance(s, dict) and "spec" in s]

    def _write(self, inventory: Inventory) -> bool:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._published is None:
            self._published = self._read_existing()
            self.generation = max((s["spec"]["pool"].get("generation", 0) for s in self._published), default=0)
        desired = build_slices(inventory, driver_name=self.driver_name, node_name=self.node_name,
                               pool_generation=self.generation + 1)
        if self._published and _specs_without_generation(desired) == _specs_without_generation(self._published):
            return False
        self.generation += 1
        for index, obj in enumerate(desired):
            write_atomic(self._file(index), yaml.dump(obj, Dumper=_Dumper, sort_keys=False).encode())
        index = len(desired)
        while remove_durably(self._file(index)):
            index += 1
        self._published = desired
        return True

    async def publish(self, inventory: Inventory) -> bool:
        """Write the slices of ``inventory``; return True if anything changed (generation raised)."""
        changed = await anyio.to_thread.run_sync(self._write, inventory)
        if changed:
            log.info("published ResourceSlices", extra={"directory": str(self.directory),
                                                         "generation": self.generation,
                                                         "devices": len(inventory.devices)})
        return changed

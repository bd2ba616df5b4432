"""The layering is declared once, as import-linter contracts in pyproject.toml ([tool.importlinter],
docs/architecture.md#modules-and-layering), and checked by ``lint-imports`` (``make lint``).

These tests run the real tool: on the tree as it is (every contract kept), and on a copy of the package
with one import planted, to show that the contracts catch what they are there for: a cycle, and an
import that points up.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

LAYERS = "Layers: each package imports only the packages below it"
NO_CYCLE = "No import cycle anywhere"


def lint_imports(tree: Path) -> tuple[int, dict[str, str]]:
    """Run ``lint-imports`` on the ``ascend_dra`` package under ``tree`` with the repository's
    contracts; return its exit code and contract name -> ``KEPT`` or ``BROKEN``."""
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")],
        cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        check=False)
    # A contract's name may wrap onto the next line before its verdict.
    text = " ".join(result.stdout.split())
    verdicts = {}
    for name in (LAYERS, NO_CYCLE, "The webhook is its own program: none of the node daemon's layers",
                 "The state: DeviceState holds its collaborators, which import nothing above themselves"):
        for verdict in ("KEPT", "BROKEN"):
            if f"{name} {verdict}" in text:
                verdicts[name] = verdict
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, verdicts


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the ``ascend_dra`` package, found before the installed one (``PYTHONPATH``)."""
    shutil.copytree(ROOT / "ascend_dra", tmp_path / "ascend_dra", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def plant(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}  # planted\n")


def test_the_tree_keeps_every_contract() -> None:
    code, verdicts = lint_imports(ROOT)
    assert (code, set(verdicts.values())) == (0, {"KEPT"}), verdicts


def test_a_planted_cycle_breaks_the_no_cycle_contract(tree: Path) -> None:
    """The webhook's server imports its review module; the review module importing the server back
    closes a cycle inside one package, which no layers contract covers: only the cycle contract sees it."""
    plant(tree, "ascend_dra.webhook.review", "from ascend_dra.webhook import server")
    code, verdicts = lint_imports(tree)
    assert code == 1
    assert verdicts[NO_CYCLE] == "BROKEN"
    assert verdicts[LAYERS] == "KEPT"


def test_a_planted_mixin_cycle_breaks_the_state_contract(tree: Path) -> None:
    """What the mixins were: a piece of DeviceState importing DeviceState back."""
    plant(tree, "ascend_dra.state.replay", "from ascend_dra.state.devicestate import DeviceState")
    code, verdicts = lint_imports(tree)
    assert code == 1
    assert verdicts["The state: DeviceState holds its collaborators, which import nothing above themselves"] == \
        "BROKEN"
    assert verdicts[NO_CYCLE] == "BROKEN"


def test_a_planted_upward_import_breaks_the_layers_contract(tree: Path) -> None:
    """Logging (the bottom) importing the HAMi chip table (above it): no cycle, only a wrong direction."""
    plant(tree, "ascend_dra.observe.logs", "import ascend_dra.hami.chips")
    code, verdicts = lint_imports(tree)
    assert code == 1
    assert verdicts[LAYERS] == "BROKEN"
    assert verdicts[NO_CYCLE] == "KEPT"


def test_the_webhook_importing_the_state_breaks_its_contract(tree: Path) -> None:
    plant(tree, "ascend_dra.webhook.validate", "import ascend_dra.state.claims")
    code, verdicts = lint_imports(tree)
    assert code == 1
    assert verdicts["The webhook is its own program: none of the node daemon's layers"] == "BROKEN"

"""The repository cites only itself, and its packages stay readable.

* Every ``docs/<name>.md[#anchor]`` written anywhere, and every relative Markdown link, names a file
  that exists here and a heading that exists in it (GitHub's anchor rules); every repository path
  named (a path under ``ascend_dra``, ``tests``, ``docs``, ...) exists.
* No file cites documents that are not in the repository (briefing files, their section numbers).
* Every package says in its ``__init__.py`` what it owns and what it may import, holds at most
  :data:`MAX_MODULES` modules, and no module is over :data:`MAX_LINES` lines. The imports themselves
  are checked by import-linter's contracts (pyproject.toml; test_layering.py,
  docs/architecture.md#modules-and-layering).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED_DIRS = ("ascend_dra", "docs", "tests", "bench", "hack", "plugins", "deployments", "examples", ".ci")
SCANNED_TOP = ("README.md", "Makefile", "pyproject.toml")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".proto", ".sh", ".toml", ".txt", ""}
SKIPPED_PARTS = {"__pycache__", "_gen", "kubelet_pb", ".venv", "results"}

# Built from pieces so that this file does not match itself.
FORBIDDEN = [re.compile(p) for p in (
    "DESIGN" + r"(\.md| §)", "STYLE" + " §", "/work/" + "shared", r"\.\./" + "shared", "shared" + " reference",
    "seed" + r" (lab|design)", "kubelet-dra-" + r"protocol\.md", "toolchain" + r"\.md", "dra-" + r"drivers\.md",
    r"(?<![\w/-])" + "ascend" + r"\.md", "§",
)]
DOC_CITATION = re.compile(r"(?<![\w./-])docs/([\w.-]+\.md)(?:#([\w-]+))?")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"(?<![\w./-])((?:ascend_dra|tests|docs|bench|hack|plugins|examples|deployments)/[\w./-]+"
                       r"\.(?:py|md|yaml|sh|toml|proto|txt|json))")
#: Files that cite other repositories' paths on purpose (provenance of captured outputs).
CITES_OTHER_REPOS = {"tests/fixtures/npu-smi/SOURCES.md"}


def scanned_files() -> Iterator[Path]:
    for name in SCANNED_TOP:
        yield ROOT / name
    for directory in SCANNED_DIRS:
        for path in sorted((ROOT / directory).rglob("*")):
            if (path.is_file() and path.suffix in SUFFIXES and not SKIPPED_PARTS & set(path.parts)
                    and not (path.suffix == ".txt" and "fixtures" in path.parts)):
                yield path


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to ``-``."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    found = set()
    in_code = False
    for line in markdown.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := re.match(r"#{1,6} (.+)", line)):
            found.add(slug(match.group(1)))
    return found


def test_slugs_follow_github() -> None:
    assert slug("What the Go helper does") == "what-the-go-helper-does"
    assert slug("DeviceClass and CEL") == "deviceclass-and-cel"
    assert slug("`--log-level` and `LOG_LEVEL`") == "--log-level-and-log_level"
    assert slug("310P templates") == "310p-templates"


def test_no_file_cites_documents_outside_the_repository() -> None:
    offences = []
    for path in scanned_files():
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            offences += [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"
                         for pattern in FORBIDDEN if pattern.search(line)]
    assert offences == []


def test_every_docs_citation_resolves() -> None:
    broken = []
    for path in scanned_files():
        text = path.read_text(errors="replace")
        for match in DOC_CITATION.finditer(text):
            target = ROOT / "docs" / match.group(1)
            where = f"{path.relative_to(ROOT)}: docs/{match.group(1)}"
            if not target.is_file():
                broken.append(f"{where}: no such file")
            elif match.group(2) and match.group(2) not in anchors(target):
                broken.append(f"{where}#{match.group(2)}: no such heading")
    assert broken == []


def test_every_repository_path_named_exists() -> None:
    missing = []
    for path in scanned_files():
        if str(path.relative_to(ROOT)) in CITES_OTHER_REPOS:
            continue
        text = path.read_text(errors="replace")
        missing += [f"{path.relative_to(ROOT)}: {m.group(1)}" for m in REPO_PATH.finditer(text)
                    if not (ROOT / m.group(1)).exists()]
    assert missing == []


@pytest.mark.parametrize("markdown", [p for p in scanned_files() if p.suffix == ".md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_markdown_link_resolves(markdown: Path) -> None:
    broken = []
    for match in MD_LINK.finditer(markdown.read_text()):
        link = match.group(1)
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:
        file_part, _, anchor = link.partition("#")
        target = (markdown.parent / file_part).resolve() if file_part else markdown
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no such heading")
    assert broken == []


#: The most modules a package holds, and the most lines a module has (generated code aside): beyond
#: them a reader cannot take a package or a module in at once.
MAX_MODULES = 12
MAX_LINES = 500


def packages() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "ascend_dra").rglob("__init__.py") if "_gen" not in p.parts)


@pytest.mark.parametrize("package", packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_says_what_it_owns_and_stays_small(package: Path) -> None:
    modules = [p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(modules) <= MAX_MODULES, sorted(modules)
    assert ast.get_docstring(ast.parse((package / "__init__.py").read_text())), "no docstring in __init__.py"


def test_no_module_is_too_long() -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "ascend_dra").rglob("*.py")
            if "_gen" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}

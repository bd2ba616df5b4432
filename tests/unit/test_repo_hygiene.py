"""The repository cites only itself, and its layering holds.

* Every ``docs/<name>.md[#anchor]`` written anywhere, and every relative Markdown link, names a file
  that exists here and a heading that exists in it (GitHub's anchor rules); every repository path
  named (a path under ``ascend_dra``, ``tests``, ``docs``, ...) exists.
* No file cites documents that are not in the repository (briefing files, their section numbers).
* The webhook never imports the kubelet side, the state or the daemon; profiles never import the
  layers above them (docs/architecture.md#modules-and-layering).
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


def imports_of(package: str) -> dict[str, set[str]]:
    """Module path -> the ``ascend_dra`` modules it imports (top-level package after ``ascend_dra.``)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "ascend_dra" / package).rglob("*.py"):
        if "_gen" in path.parts:
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ascend_dra."):
                names.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                names |= {a.name.split(".")[1] for a in node.names if a.name.startswith("ascend_dra.")}
        found[str(path.relative_to(ROOT))] = names
    return found


#: The node daemon's own modules: its state, its durable records, its kubelet and API server halves,
#: and its command line. Neither the webhook nor a profile nor the CDI writer may reach into them.
NODE_DAEMON = {
    "kubelet", "state", "guardnotes", "replay", "unprepare", "recovery", "guard", "records", "checkpoint", "journal",
    "planning", "claims", "daemon", "inventories", "upkeep", "hotplug", "settings", "metrics", "loopstall", "preflight",
    "cluster", "slicewatch", "apiclient", "gateprobe", "publish", "slices", "poolview", "claimstatus",
    "statusentries", "statusmerge", "statushook", "instancelock", "sharedlock", "cli", "cliflags", "commands",
    "evidence", "usage",
}
#: What every layer may use (the data model, file and fault helpers, logging, listening, signals), and the
#: three packages the layering test checks.
SHARED = {"model", "atomicfile", "faults", "logs", "listen", "signals", "version", "cdi", "profiles", "webhook"}


def test_every_module_is_placed_in_a_layer() -> None:
    """A module renamed, split away or added must be placed, or the layering check would not see it."""
    present = {p.stem for p in (ROOT / "ascend_dra").glob("*.py") if p.stem != "__init__"} | {
        p.name for p in (ROOT / "ascend_dra").iterdir() if (p / "__init__.py").exists()}
    assert NODE_DAEMON & SHARED == set()
    assert {"unplaced": present - NODE_DAEMON - SHARED, "gone": (NODE_DAEMON | SHARED) - present} == {
        "unplaced": set(), "gone": set()}


@pytest.mark.parametrize(("package", "never"), [
    ("webhook", NODE_DAEMON),
    ("profiles", NODE_DAEMON | {"webhook"}),
    ("cdi", NODE_DAEMON | {"webhook", "profiles", "model"}),
])
def test_layering(package: str, never: set[str]) -> None:
    assert {module: names & never for module, names in imports_of(package).items() if names & never} == {}

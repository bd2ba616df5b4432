"""``make e2e-up`` / ``make e2e-down``: the tier's bed left running with our chart installed, for a
user to try ascend-dra on (README.md, "Try it on a local cluster").

    python -m tests.e2e.cli up --dir .e2e     # bed + image + both releases; prints the exports
    python -m tests.e2e.cli down --dir .e2e   # stops everything `up` started, removes the dir
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.e2e import images
from tests.e2e.bed import STATE_FILE, Bed, BedError
from tests.e2e.release import CommandFailed, Tools, helm_bin, install


def up(workdir: Path) -> int:
    """Start the bed in ``workdir``, import the image, install the chart; print the shell exports."""
    if (workdir / STATE_FILE).exists():
        print(f"a bed runs in {workdir} already; `make e2e-down` stops it", file=sys.stderr)
        return 1
    ref = images.user_reference()
    try:
        tarball = images.archive(ref)
    except images.ImageMissing as e:
        print(e, file=sys.stderr)
        return 1
    print("starting the control plane and two nodes (node-a: fake profile, node-b: the simulated Lab 18 node) ...")
    try:
        bed = Bed(workdir).start()
    except BedError as e:
        print(f"the bed did not start: {e}", file=sys.stderr)
        return 1
    try:
        bed.import_image(tarball)
        (workdir / "user").mkdir(exist_ok=True)
        print(f"installing the chart with {ref} (helm install ascend-dra, ascend-dra-fake) ...")
        install(Tools(bed, workdir / "user"), *ref.rsplit(":", 1))
    except (CommandFailed, OSError) as e:
        bed.stop()
        (workdir / STATE_FILE).unlink(missing_ok=True)
        print(f"installing the chart failed: {e}", file=sys.stderr)
        return 1
    assert bed.cp is not None
    print("ready. In your shell:\n")
    print(f"export KUBECONFIG={bed.cp.kubeconfig} PATH={bed.kubectl_bin().parent}:{helm_bin().parent}:$PATH")
    return 0


def down(workdir: Path) -> int:
    """Stop the bed of ``workdir`` and remove the directory."""
    if not (workdir / STATE_FILE).exists():
        print(f"no bed in {workdir}")
        return 0
    try:
        Bed.attach(workdir).stop()
    except BedError as e:
        print(f"stopping the bed: {e}", file=sys.stderr)
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"stopped; {workdir} removed")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.e2e.cli", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=("up", "down"))
    ap.add_argument("--dir", type=Path, default=Path(".e2e"))
    args = ap.parse_args(argv)
    return up(args.dir.resolve()) if args.cmd == "up" else down(args.dir.resolve())


if __name__ == "__main__":
    sys.exit(main())

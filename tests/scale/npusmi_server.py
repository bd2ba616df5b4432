"""The npu-smi simulator (ascend_dra/profiles/ascend/sim/npusmi_sim.py) served from one process for
every simulated hard-vNPU node of the scale bed (fleet.py says why).

Protocol, one call per TCP connection on 127.0.0.1: the client sends the node's simulator state
directory and the npu-smi arguments, tab-separated, ending with a newline; the server answers the
exit status on a line of its own, then what the simulator prints, and closes. The simulator's own
code runs the call (``npusmi_sim.run``), on the node's own state files and lock, so a vNPU made here
is the one the simulator's ``info-vnpu`` lists.

Run: ``python -m tests.scale.npusmi_server PORT_FILE`` (binds a free port, writes it to PORT_FILE).
"""

from __future__ import annotations

import socketserver
import sys
from pathlib import Path

from ascend_dra.profiles.ascend.sim import npusmi_sim


def answer(line: str) -> tuple[int, str]:
    """Run one request line; return ``(exit status, stdout)`` as the simulator's ``main`` would."""
    directory, *argv = line.rstrip("\n").split("\t")
    try:
        return 0, npusmi_sim.run(argv, Path(directory))
    except npusmi_sim.SimError as exc:
        return exc.code, "\n".join((npusmi_sim._kv("Status", "FAILED"), npusmi_sim._kv("Message", str(exc)))) + "\n"


#: The calls that change a node's vNPUs; the server logs each (one line: the call and its status),
#: so a run can tell which tier made the vNPUs (the bed's DCMI nodes make none through npu-smi).
MUTATING = ("create-vnpu", "destroy-vnpu")


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline().decode()
        code, out = answer(line)
        self.wfile.write(f"{code}\n{out}".encode())
        argv = line.rstrip("\n").split("\t")[1:]
        if any(a in MUTATING for a in argv):
            print(" ".join(argv), "->", code, flush=True)


def main(argv: list[str]) -> int:
    socketserver.TCPServer.allow_reuse_address = True
    with socketserver.TCPServer(("127.0.0.1", 0), _Handler) as server:
        Path(argv[0]).write_text(str(server.server_address[1]))
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

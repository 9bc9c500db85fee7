"""Instructions a server process executes in chosen windows, counted by valgrind's callgrind.

The server starts under ``valgrind --tool=callgrind --instr-atstart=no`` (``argv``): it runs
uninstrumented — nothing counted, ~5x slower than native — until ``Counted.window`` turns
instrumentation on (``callgrind_control -i on PID``; it returns once callgrind has done it),
runs the caller's requests and waits, turns it off and dumps the counters
(``callgrind_control -d``: the dump holds what ran since the last one, and nothing runs
counted between windows).
A dump's ``totals:`` line is the number of instructions (callgrind's ``Ir``) of every thread
of the process while instrumentation was on — user space only, the kernel's share is not
in it. The toggles land while the server waits in ``epoll_wait`` (the client sends nothing
during them), so the window holds the requests' instructions and whatever the process's
timers did meanwhile (uvicorn's 0.1 s tick, log flushes, pollers): ``idle`` measures that
rate on the same process in a window without requests, and ``per_request`` subtracts it
pro rata to the window's length. Valgrind's own work (translation, instrumentation) is not
guest code and is never counted.

Each dump stays on disk as ``OUT.N`` (N = 1, 2, …), for ``callgrind_annotate OUT.N``: the
C functions of the interpreter and the extensions, by instructions (Python functions
appear as the interpreter's ``_PyEval_EvalFrameDefault``; see ``py-spy`` for those).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("valgrind", "callgrind_control")


def missing() -> str | None:
    """A one-line reason when valgrind's tools are not installed, else None."""
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if not absent:
        return None
    return (f"{', '.join(absent)} not found: install Debian's valgrind package "
            "(`make valgrind`, or `apt-get install valgrind`)")


def argv(out: Path, command: list[str]) -> list[str]:
    """``command`` under callgrind, instrumentation off until a window turns it on, dumps
    written to ``out.N``."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}", *command]


def totals(dump: Path) -> int:
    """The instructions (``Ir``) a callgrind dump counted: its ``totals:`` line. Raises
    ValueError when the file has none."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise ValueError(f"{dump}: no totals line (not a callgrind dump?)")


@dataclass(frozen=True)
class Window:
    """One counted window: ``instructions`` (Ir) while instrumentation was on, ``seconds``
    it was on (between the midpoints of the two toggles), the ``dump`` holding them."""

    instructions: int
    seconds: float
    dump: Path


def per_request(window: Window, requests: int, idle_per_s: float) -> float:
    """Instructions per request of ``window``: its count less ``idle_per_s`` (the process's
    timers, ``Counted.idle``) for as long as it lasted, over ``requests``."""
    return (window.instructions - idle_per_s * window.seconds) / requests


class Counted:
    """The callgrind controls of the process ``pid`` started with ``argv(out, …)``."""

    def __init__(self, pid: int, out: Path):
        self.pid, self.out = pid, out
        self._dumps = 0

    def window(self, work: Callable[[], None]) -> Window:
        """Count the instructions the process runs while ``work()`` runs (``work`` sends
        the requests and waits until the server has finished what they left to do)."""
        on = self._timed("-i", "on")
        work()
        off = self._timed("-i", "off")
        self._control("-d")
        self._dumps += 1
        dump = Path(f"{self.out}.{self._dumps}")
        return Window(totals(dump), off - on, dump)

    def idle(self, seconds: float) -> float:
        """Instructions per second the process runs with no request (its timers), counted
        over ``seconds``."""
        w = self.window(lambda: time.sleep(seconds))
        return w.instructions / w.seconds

    def _timed(self, *args: str) -> float:
        """Run the control command; returns the midpoint of its run (monotonic s)."""
        start = time.monotonic()
        self._control(*args)
        return (start + time.monotonic()) / 2

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)

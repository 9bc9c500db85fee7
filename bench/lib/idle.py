"""Keep idle cores out of deep idle states while a latency benchmark runs.

An idle core that enters a deep idle state (on a VM: the vCPU halts and the host deschedules
it) takes tens to hundreds of µs to answer its next wake-up. In a 1-client loop that lands on
whichever path leaves the upstream's core idle longest — the gate-on path, whose router
classifies for ~4 ms before it sends — and so adds the machine's wake-up latency to that
path's own cost (on the development VM it was part of the gap, not all: docs/benchmarks.md). The standard remedy (``tuned``'s latency-performance profile,
``cyclictest``) is a CPU latency QoS request: a process holds ``/dev/cpu_dma_latency`` open
with the value 0 µs written to it, and while it does, cpuidle governors choose only the
polling state (Linux, Documentation/power/pm_qos_interface.rst). The request ends when the
file is closed; nothing outlives the run.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path

DEVICE = Path("/dev/cpu_dma_latency")


@contextlib.contextmanager
def shallow_idle(device: Path = DEVICE) -> Iterator[str]:
    """Hold a 0 µs CPU latency QoS request for the ``with`` block.

    Yields a one-line account for the report: ``"held (…)"`` when the request is in place,
    otherwise why not (no such device, or not permitted: writing it normally needs root).
    Never raises for a missing or unwritable device: the benchmark then
    runs as the machine is, and says so.
    """
    try:
        handle = device.open("wb", buffering=0)
    except OSError as exc:
        yield f"not held ({device}: {exc.strerror or exc})"
        return
    with handle:
        handle.write(struct.pack("i", 0))  # a native s32, as the interface requires
        yield f"held ({device} = 0 µs: idle cores poll instead of halting)"

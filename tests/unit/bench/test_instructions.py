"""bench/instructions.py and bench/lib/callgrind.py: a dump's count is read from its totals
line, the timers' rate is taken out pro rata, and — under a real valgrind, on the
passthrough path — a window counts the server's instructions for its requests and nothing
else: twice the requests, twice the count."""

from __future__ import annotations

import shutil
import sys

import pytest

DUMP_HEAD = """# callgrind format
version: 1
creator: callgrind-3.19.0
events: Ir
summary: 0

fn=(1) main
1 5
"""


@pytest.fixture(scope="module")
def grind(bench_module):
    return bench_module("lib.callgrind")


def test_a_dump_counts_its_totals_line_and_a_file_without_one_is_refused(grind, tmp_path):
    dump = tmp_path / "out.1"
    dump.write_text(DUMP_HEAD + "totals: 1234567\n")
    assert grind.totals(dump) == 1234567
    other = tmp_path / "other"
    other.write_text("not a dump\n")
    with pytest.raises(ValueError, match="no totals line"):
        grind.totals(other)


def test_the_timers_rate_is_taken_out_for_as_long_as_the_window_lasted(grind, tmp_path):
    window = grind.Window(instructions=1_000_000, seconds=2.0, dump=tmp_path / "out.1")
    assert grind.per_request(window, 10, idle_per_s=0.0) == 100_000
    assert grind.per_request(window, 10, idle_per_s=50_000.0) == 90_000


@pytest.mark.slow
def test_a_window_counts_the_requests_of_the_passthrough_and_nothing_else(bench_module,
                                                                        tmp_path):
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        pytest.skip("valgrind is not installed (`make valgrind`: Debian's package)")
    inst = bench_module("instructions")
    procs = inst.procs
    port = procs.free_port()
    up = procs.start("upstream", [sys.executable, str(inst.LIB / "upstream.py"), str(port),
                                  "4", "0"], port, {0, 1}, tmp_path)
    try:
        procs.wait_ready(up, inst.chat_ok, timeout_s=30)
        served = inst.start(["passthrough"], tmp_path, up.url)["passthrough"]
        try:
            inst.send(served, 20, False)
            idle = served.counted.idle(0.5)
            ten = served.counted.window(lambda: inst.send(served, 10, False))
            thirty = served.counted.window(lambda: inst.send(served, 30, False))
        finally:
            served.server.stop()
    finally:
        up.stop()
    one, three = (inst.callgrind.per_request(ten, 10, idle),
                  inst.callgrind.per_request(thirty, 30, idle))
    assert one > 100_000  # a Python HTTP request through Starlette and aiohttp, at least
    assert three == pytest.approx(one, rel=0.1)
    assert served.answered == 61  # the readiness probe, the warm-up and both windows

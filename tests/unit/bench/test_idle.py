"""bench/lib/idle.py: the CPU latency QoS request the overhead benchmark holds while measuring."""

from __future__ import annotations

import importlib.util
import os
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _idle_module():
    spec = importlib.util.spec_from_file_location("bench_idle", ROOT / "bench" / "lib" / "idle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _open_on(path: Path) -> bool:
    """Whether this process holds a file descriptor on ``path`` (Linux /proc)."""
    fds = Path("/proc/self/fd")
    return any(os.path.realpath(fds / fd) == str(path) for fd in os.listdir(fds))


def test_writes_a_zero_s32_and_holds_it_open_for_the_block_only(tmp_path):
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(b"\xff" * 4)
    with _idle_module().shallow_idle(device) as account:
        assert account.startswith("held")
        assert device.read_bytes() == struct.pack("i", 0)
        assert _open_on(device)
    assert not _open_on(device)


def test_a_missing_device_is_reported_not_raised(tmp_path):
    with _idle_module().shallow_idle(tmp_path / "absent" / "cpu_dma_latency") as account:
        assert account.startswith("not held")
        assert "absent" in account

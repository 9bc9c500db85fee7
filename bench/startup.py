"""Cold start: the seconds from ``llmroute serve`` to a 200 on ``GET /ready``, over remote
engines that are already running (two emulated engines in a process of their own), with the
semantic gate as configured by default.

* warm (``cold_start_warm_s``, target ≤ 3 s): ``$LLMROUTE_CACHE`` holds the exported
  encoder and the fitted heads (one unmeasured start first makes sure of it); the median of
  ``STARTS`` starts;
* empty (``cold_start_empty_cache_s``): ``$LLMROUTE_CACHE`` an empty folder, so the start
  exports the encoder to ONNX and fits the heads first (one start; ``--smoke`` skips it:
  null);
* gate off (``cold_start_gate_off_s``, same run): the part of the warm start that is not
  the gate's (Python, the app, the engines' first polls).

Python's bytecode cache counts as a cache too: each server writes and reads its compiled
modules in the run's own folder (``PYTHONPYCACHEPREFIX``, with ``PYTHONDONTWRITEBYTECODE``
cleared), so a warm start reads bytecode as an installed package does (pip compiles at
install) rather than compiling the router's sources anew when the environment forbids
writing bytecode next to them; the first, unmeasured start writes it.

Beside each, the server process's own CPU seconds until ready (``…_cpu_s``): on a shared
machine the wall time is mostly what other processes took; the CPU time is the start's own
cost. ``--smoke``: one start each, without the unmeasured one.

``python bench/startup.py [--quick | --smoke]``. The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from modes import mode, parser, pick  # noqa: E402
from served import config_text, emulated, seconds_to_ready, serve  # noqa: E402

from llmroute.emulator.spec import EngineSpec  # noqa: E402
from llmroute.gate.export import ENV_CACHE  # noqa: E402


def start(config: Path, work: Path, cache: str | None) -> tuple[float, float]:
    """Seconds from starting ``llmroute serve`` (``$LLMROUTE_CACHE`` = ``cache``, None: as
    set; bytecode cached in ``work``) to a 200 on ``/ready``, and the server's CPU seconds by
    then; the server is stopped after."""
    env = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(work / "bytecode")}
    if cache is not None:
        env[ENV_CACHE] = cache
    started = time.monotonic()
    server = serve("router", config, work, env)
    try:  # an empty cache exports the encoder first: up to the export's own 600 s bound
        return seconds_to_ready(server, started, 300.0 if cache is None else 900.0), \
            server.cpu_s()
    finally:
        server.stop()


def run(starts: int, empty: bool, settle: bool) -> dict[str, object]:
    """The measurement (module docstring); returns the RESULT."""
    specs = [EngineSpec("a100-80g", "7b", time_scale=0.1, served_model="m", seed=i)
             for i in range(2)]
    with emulated(specs) as urls, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        backends = {f"e{i}": url for i, url in enumerate(urls)}
        gated, plain = work / "semantic.yaml", work / "off.yaml"
        gated.write_text(config_text(backends, "semantic"))
        plain.write_text(config_text(backends, "off"))
        if settle:
            start(gated, work, None)  # makes the cache warm, not measured
        warm = [start(gated, work, None) for _ in range(starts)]
        off = [start(plain, work, None) for _ in range(starts)]
        fresh = start(gated, work, str(work / "empty-cache")) if empty else (None, None)
    return {"cold_start_warm_s": _median(warm, 0), "cold_start_warm_cpu_s": _median(warm, 1),
            "cold_start_empty_cache_s": None if fresh[0] is None else round(fresh[0], 3),
            "cold_start_empty_cache_cpu_s": None if fresh[1] is None else round(fresh[1], 3),
            "cold_start_gate_off_s": _median(off, 0), "cold_start_gate_off_cpu_s": _median(off, 1),
            "cold_start_warm_starts_s": [round(x, 3) for x, _ in warm],
            "target_cold_start_warm_s": 3.0, "cache": os.environ.get(ENV_CACHE, "default")}


def _median(pairs: list[tuple[float, float]], i: int) -> float:
    """The median of the ``i``-th member of ``pairs``, rounded to ms."""
    return round(statistics.median(p[i] for p in pairs), 3)


def main() -> int:
    """Command line entry; returns the exit code."""
    size = mode(parser(__doc__.splitlines()[0]).parse_args())
    result = run(pick(size, 5, 3, 1), size != "smoke", size != "smoke")
    print(f"to /ready (CPU s of the server by then): warm cache {result['cold_start_warm_s']} s "
          f"({result['cold_start_warm_cpu_s']}; every start {result['cold_start_warm_starts_s']}),"
          f" empty cache {result['cold_start_empty_cache_s']} s "
          f"({result['cold_start_empty_cache_cpu_s']}), gate off "
          f"{result['cold_start_gate_off_s']} s ({result['cold_start_gate_off_cpu_s']})")
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

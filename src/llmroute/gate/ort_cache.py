"""ONNX Runtime sessions over a graph optimised once and kept on disk.

Creating a session optimises the graph first (constant folding, the attention, GELU and
quantised-MatMul fusions): ~0.12 CPU-s of a ~0.16 s load for the gate's int8 encoder. ONNX
Runtime can write the optimised graph out (``SessionOptions.optimized_model_filepath``,
ONNX Runtime's "offline mode"); a later start loads that file and finds nothing left to fuse
(~0.045 s). The file is written at ``ORT_ENABLE_EXTENDED`` — the highest level whose output
is not tied to this machine's CPU (ONNX Runtime warns against storing the layout level) —
and loaded at ``ORT_ENABLE_ALL``, so the layout optimisations still run, for this machine;
the embeddings are the same numbers either way.

One file per model, ``<dir>/ort-<key>.onnx`` (``dir``: ``$LLMROUTE_CACHE/gate``), ``key`` a
BLAKE2b digest of the ONNX Runtime version and the model file's resolved path, size and
modification time (what Python's bytecode cache checks). It is written to a temporary name
and renamed into place; a file ONNX Runtime cannot load is deleted and the model loaded as
shipped. Writing is best effort. The ``heads_cache.KEEP`` most recently used files are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any

from llmroute.gate.export import cache_root


def open_session(path: Path, threads: int, folder: Path | None = None) -> Any:
    """An ``onnxruntime.InferenceSession`` (CPU, ``threads`` intra-op threads, one inter-op)
    over the model at ``path``, from its optimised copy in ``folder`` (default
    ``$LLMROUTE_CACHE/gate``) when there is one, else optimising it and storing the copy.
    Raises what ONNX Runtime raises when ``path`` itself cannot be loaded."""
    import onnxruntime as ort

    folder = cache_root() / "gate" if folder is None else folder
    stat = path.stat()
    key = hashlib.blake2b(f"{ort.__version__}|{path.resolve()}|{stat.st_size}|"
                          f"{stat.st_mtime_ns}".encode(), digest_size=12).hexdigest()
    cached = folder / f"ort-{key}.onnx"
    if not cached.is_file():
        _store(path, cached, threads)
    if cached.is_file():
        try:
            session = _session(cached, threads, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
            os.utime(cached)  # recently used: kept by prune()
            return session
        except Exception:  # noqa: BLE001 - onnxruntime's own error types: load as shipped
            cached.unlink(missing_ok=True)
    return _session(path, threads, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)


def _session(path: Path, threads: int, level: Any, out: Path | None = None) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = level
    if out is not None:
        opts.optimized_model_filepath = str(out)
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _store(path: Path, cached: Path, threads: int) -> None:
    """Write ``path``'s graph optimised at ``ORT_ENABLE_EXTENDED`` to ``cached`` (through a
    temporary name), then prune the folder. Best effort: never raises."""
    import onnxruntime as ort

    from llmroute.gate.heads_cache import prune

    tmp = cached.with_name(f"{cached.stem}.{os.getpid()}.tmp.onnx")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        _session(path, threads, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, tmp)
        os.replace(tmp, cached)
        prune(cached.parent, None, "ort-*.onnx")
    except Exception:  # noqa: BLE001 - a read-only cache: the model loads as shipped
        with contextlib.suppress(OSError):
            tmp.unlink()

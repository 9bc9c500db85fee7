"""The win head on disk: fitted once per outcome file (``llmroute gate fit-router``, or the
gate's start when ``gate.router`` names a file), read back on every later start.

One file per fit, ``<dir>/win-<key>.npz`` (``dir``: the gate's heads folder,
``heads_cache.heads_dir``). ``key`` is a BLAKE2b digest of what the head's numbers depend on:
``FORMAT``, the package versions and fitting code (``heads_cache.code_version`` plus this
package's ``WIN_MODULES``), the outcome file's bytes, the ladder and the gate's first stage
(its classes, temperature and weights: the intent probabilities the head reads). Arrays
only (``WinHead.state``), written to a temporary file and renamed into place; a file that
cannot be read is logged and refitted.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import structlog

from llmroute.errors import ConfigError
from llmroute.gate.heads_cache import code_version
from llmroute.gate.model import GateModel
from llmroute.gate.outcomes import read_outcomes
from llmroute.gate.win import WinHead
from llmroute.gate.win_fit import fit_win, gate_rows

_log = structlog.get_logger("llmroute.gate")
FORMAT = "win-1"
WIN_MODULES = ("llmroute.gate.win", "llmroute.gate.win_fit", "llmroute.gate.outcomes",
               "llmroute.gate.compress", "llmroute.gate.complexity", "llmroute.gate.verdict")


def win_key(data: Path, pools: Sequence[str], model: GateModel) -> str:
    """The cache key (hex) of the head for ``pools`` fitted on the file ``data`` through
    ``model``'s first stage. Raises OSError when ``data`` cannot be read."""
    h = hashlib.blake2b(digest_size=12)
    h.update(json.dumps([FORMAT, code_version(), list(pools), list(model.classes),
                         model.fast.temperature]).encode())
    for module in WIN_MODULES:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            h.update(Path(spec.origin).read_bytes())
    h.update(np.ascontiguousarray(model.fast.weights).tobytes())
    h.update(data.read_bytes())
    return h.hexdigest()


def fit_router(model: GateModel, data: Path, pools: Sequence[str], folder: Path
               ) -> tuple[WinHead, bool]:
    """The win head for ladder ``pools`` (cheapest first) fitted on the outcome file
    ``data`` (``outcomes.read_outcomes``), read from ``folder`` when fitted before, else
    fitted and stored there; with True when it was read. Blocking (seconds for thousands of
    rows). Raises ConfigError for a bad file (naming line and field; nothing is written)."""
    try:
        key = win_key(data, pools, model)
    except OSError as err:
        raise ConfigError(f"{data}: cannot read: {err}") from err
    path = folder / f"win-{key}.npz"
    head = read_win(path)
    if head is not None:
        return head, True
    rows = read_outcomes(data, pools)
    quality = np.array([r.quality for r in rows])
    head = fit_win(gate_rows(model, [r.request for r in rows]), quality, pools, model.classes,
                   None, 0, key=key)
    write_win(path, head)
    return head, False


def read_win(path: Path) -> WinHead | None:
    """The head stored at ``path``; None when there is none or it cannot be read (logged).
    Never raises."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            return WinHead.restore({name: npz[name] for name in npz.files})
    except Exception as err:  # noqa: BLE001 - any damage to the file means: refit
        _log.warning("win head cache unreadable; refitting", path=str(path), error=repr(err))
        return None


def write_win(path: Path, head: WinHead) -> None:
    """Store ``head`` at ``path`` atomically. Best effort: failures are logged."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **head.state())
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as err:
        _log.warning("win head not written", path=str(path), error=repr(err))

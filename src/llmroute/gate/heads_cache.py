"""Fitted heads on disk: a start that has fitted the same heads before reads them (~0.1 s)
instead of refitting them (~10 s).

One file per fit, ``<dir>/heads-<key>.npz`` (``dir``: ``gate.cache_dir``, default
``$LLMROUTE_CACHE/gate``, i.e. ``~/.cache/llmroute/gate``, the folder that holds the
exported encoder). ``key`` is a BLAKE2b digest of everything the fitted numbers depend on
(``heads_key``): ``FORMAT``, the llmroute, numpy, scipy and scikit-learn versions, the source
of the fitting code (``FIT_MODULES``), the encoder's identity (none without one), and every
fitted text with its label (the shipped utterances, the config's ``gate.utterances`` and the
examples stored by ``gate fit``, as the heads read them). Rules and thresholds are applied
after the heads, so changing them keeps the key.

The file holds arrays only (``np.savez``; ``head.state()``), read back with
``allow_pickle=False``, so loading it runs no code. It is written to a temporary file in the
same folder and renamed into place, so a reader sees a whole file or none. A file that cannot
be read or does not fit (truncated, corrupt, wrong shapes) is logged and treated as absent:
the heads are refitted and the file rewritten. Writing is best effort (a read-only folder is
logged, the fitted heads are used). The ``KEEP`` most recently used files are kept.
"""

from __future__ import annotations

import hashlib
import io
import importlib.metadata
import importlib.util
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import structlog

from llmroute.gate.export import cache_root
from llmroute.gate.head import EmbeddingHead, NgramHead

_log = structlog.get_logger("llmroute.gate")
FORMAT = "heads-1"
FIT_MODULES = ("llmroute.gate.head", "llmroute.gate.heads_cache", "llmroute.gate.model",
               "llmroute.gate.probs", "llmroute.text")
VERSIONED = ("llmroute", "numpy", "scipy", "scikit-learn")
KEEP = 4
PREFIXES = ("fast", "embed")
Heads = tuple[NgramHead, EmbeddingHead | None]


def heads_dir(configured: str = "") -> Path:
    """The folder for fitted heads: ``configured`` when set, else ``$LLMROUTE_CACHE/gate``."""
    return Path(configured).expanduser() if configured else cache_root() / "gate"


def code_version() -> str:
    """Package versions and a digest of the fitting code's source files (hex)."""
    h = hashlib.blake2b(digest_size=8)
    for name in VERSIONED:
        h.update(f"{name}={_version(name)};".encode())
    for module in FIT_MODULES:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        h.update(Path(origin).read_bytes() if origin else module.encode())
    return h.hexdigest()


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def heads_key(texts: Sequence[str], labels: Sequence[str], encoder: str | None) -> str:
    """The cache key (hex) of heads fitted on ``texts``/``labels`` with ``encoder`` (its
    identity, e.g. the export folder's name and token limit; None: first stage only)."""
    h = hashlib.blake2b(digest_size=12)
    h.update(json.dumps([FORMAT, code_version(), encoder], ensure_ascii=False).encode())
    for text, label in zip(texts, labels, strict=True):
        h.update(json.dumps([text, label], ensure_ascii=False).encode())
    return h.hexdigest()


def heads_path(folder: Path, key: str) -> Path:
    """Where the heads of ``key`` are stored in ``folder``."""
    return folder / f"heads-{key}.npz"


def read_heads(path: Path, with_embed: bool) -> Heads | None:
    """The heads stored at ``path``, or None when there is no usable file (a bad one is
    logged). ``with_embed``: the embedding head must be there too. Never raises."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        fast = NgramHead().restore(_part(arrays, "fast"))
        embed = EmbeddingHead().restore(_part(arrays, "embed")) if with_embed else None
        if embed is not None and embed.classes != fast.classes:
            raise ValueError("the two heads' classes differ")
        os.utime(path)  # recently used: kept by prune()
    except Exception as err:  # noqa: BLE001 - any damage to the file means: refit
        _log.warning("gate heads cache unreadable; refitting", path=str(path), error=repr(err))
        return None
    return fast, embed  # type: ignore[return-value]


def _part(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """One head's arrays (``fast.rows`` → ``rows``). Raises KeyError when it has none."""
    part = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith(prefix + ".")}
    if not part:
        raise KeyError(f"no {prefix} head stored")
    return part


def write_heads(path: Path, fast: NgramHead, embed: EmbeddingHead | None) -> None:
    """Store the heads at ``path`` atomically (temporary file + rename), then prune the
    folder to the ``KEEP`` newest files. Best effort: failures are logged, never raised."""
    arrays = {f"fast.{k}": v for k, v in fast.state().items()}
    if embed is not None:
        arrays |= {f"embed.{k}": v for k, v in embed.state().items()}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    if replace_atomically(path, buffer.getvalue()):
        prune(path.parent)


def replace_atomically(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` through a temporary file in the same folder renamed into
    place, so a reader sees a whole file or none. Best effort: False (logged) when it
    cannot be written, never raises."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as err:
        _log.warning("gate cache file not written", path=str(path), error=repr(err))
        return False
    return True


def prune(folder: Path, keep: int | None = None, pattern: str = "heads-*.npz") -> None:
    """Delete all but the ``keep`` (default ``KEEP``) most recently used files matching
    ``pattern`` in ``folder``."""
    files = sorted(folder.glob(pattern), key=_mtime, reverse=True)
    for stale in files[KEEP if keep is None else keep:]:
        stale.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0

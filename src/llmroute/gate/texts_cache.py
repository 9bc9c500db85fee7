"""Compressed fitting texts on disk: a start that has compressed the same examples before
reads what the heads read of them (~15 ms for the ~3,000 shipped utterances) instead of
compressing each again (~150 ms), once for the fine-tuned encoder's key
(``tuned.model_key``) and once for the heads' (``model.build_model``).

One file per list, ``<dir>/texts-<key>.json`` (``dir``: the heads' folder,
``heads_cache.heads_dir``). ``key`` is a BLAKE2b digest of the compression code's source
(``TEXT_MODULES``), the Unicode database's version (``unicodedata``: the NFKC step) and every
text in order, so a change to any of them is a new file. The file is a JSON list of strings,
written atomically (``heads_cache.replace_atomically``); a file that cannot be read or does
not fit (not a list of as many strings) is treated as absent and rewritten. Writing is best
effort. The ``KEEP`` most recently used files are kept.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

from llmroute.gate.heads_cache import KEEP, prune, replace_atomically

TEXT_MODULES = ("llmroute.gate.compress", "llmroute.gate.constants", "llmroute.text",
                "llmroute.types")
"""The modules whose source decides what compression makes of a text."""


def texts_key(texts: Sequence[str]) -> str:
    """The cache key (hex) of what compression makes of ``texts`` (module docstring)."""
    h = hashlib.blake2b(digest_size=12)
    h.update(unicodedata.unidata_version.encode())
    for module in TEXT_MODULES:
        spec = importlib.util.find_spec(module)
        h.update(Path(spec.origin).read_bytes() if spec and spec.origin else module.encode())
    h.update(json.dumps(list(texts), ensure_ascii=False).encode())
    return h.hexdigest()


def compressed(texts: Sequence[str], folder: Path, compress: Callable[[str], str]
               ) -> list[str]:
    """``[compress(t) for t in texts]``, read from ``folder`` when stored there before, else
    computed and stored (best effort). Never raises for the cache's sake."""
    path = folder / f"texts-{texts_key(texts)}.json"
    stored = _read(path, len(texts))
    if stored is not None:
        return stored
    out = [compress(t) for t in texts]
    replace_atomically(path, json.dumps(out, ensure_ascii=False).encode())
    prune(folder, KEEP, "texts-*.json")
    return out


def _read(path: Path, n: int) -> list[str] | None:
    """The list stored at ``path`` when it is ``n`` strings, else None."""
    try:
        value = json.loads(path.read_bytes())
        os.utime(path)  # recently used: kept by prune()
    except (OSError, ValueError):
        return None
    if not isinstance(value, list) or len(value) != n or not all(
            isinstance(v, str) for v in value):
        return None
    return value

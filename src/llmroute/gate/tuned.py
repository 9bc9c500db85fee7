"""Where the fine-tuned encoder comes from, and whether a copy of it may be loaded.

A fine-tuned model is a folder holding ``model-int8.onnx``, ``tokenizer.json.gz`` and
``manifest.json`` (``key``: what it was trained on and with, ``files``: each file's SHA-256,
and the fine-tune's summary, with the torch/transformers/onnxruntime versions it ran on).
``model_key`` is a BLAKE2b digest of what the weights depend on: ``FORMAT``, the fine-tuning
rows as the encoder reads them (``model.fit_texts``, so a change to compression that alters
what is read changes the key, and one that does not keeps it) with their intents, the
``finetune.Recipe``, the encoder's reading constants (``PREFIX``, ``MAX_TOKENS``,
``HEAD_TOKENS``), the source of the code that builds, trains and exports the model
(``KEY_MODULES``) and the base model file's size. Library versions are not part of it: a
patch release of onnxruntime should not cost a machine a fine-tune. ``pick.resolve()`` chooses
which intact copy the gate loads.

Rows from the sources that ``bench/gate_quality.py`` scores (``HELD_OUT_SOURCES``) are kept
out of the fine-tune, so its leave-one-source-out figures stay held out for the encoder too.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

from llmroute.errors import ConfigError
from llmroute.gate.encoder import TUNED_TOKENIZER
from llmroute.gate.export import INT8, cache_root

_log = structlog.get_logger("llmroute.gate")
FORMAT = "tuned-1"
MANIFEST = "manifest.json"
FILES = (INT8, TUNED_TOKENIZER)
KEY_MODULES = ("llmroute.gate.finetune", "llmroute.gate.e5base", "llmroute.gate.export")
VERSIONED = ("torch", "transformers", "onnxruntime", "tokenizers")
HELD_OUT_SOURCES = frozenset({"mt-bench", "mt-bench-101", "gsm8k", "bfcl", "glaive", "qmsum",
                              "p3", "codealpaca"})
Row = tuple[int, str, str]
"""``(line, text, intent)``: a fine-tuning row and the line of its file."""


def shipped_folder() -> Path:
    """The fine-tuned model shipped in the package."""
    return Path(str(importlib.resources.files("llmroute.gate") / "data" / "tuned"))


def cache_folder(key: str) -> Path:
    """The set-up fine-tune's folder for ``key``."""
    return cache_root() / "gate" / f"tuned-{key[:16]}"


def tuning_rows() -> list[Row]:
    """The shipped utterances the encoder is fine-tuned on: every row of
    ``gate/data/utterances.jsonl`` whose ``source`` is not in ``HELD_OUT_SOURCES``, as the
    gate reads it."""
    from llmroute.gate.examples import UTTERANCES, _row_text

    ref = importlib.resources.files("llmroute.gate") / "data" / UTTERANCES
    rows = []
    for n, line in enumerate(ref.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if row.get("source") not in HELD_OUT_SOURCES:
                rows.append((n, _row_text(row), str(row["intent"])))
    return rows


def labelled_rows(path: Path) -> list[Row]:
    """``(line, text, intent)`` for each row of a labelled JSONL file (``prompt``/``text``
    or ``messages``, and ``intent``), as the gate reads it. Raises ConfigError naming a
    line that is not such a row."""
    from llmroute.gate.compress import compress
    from llmroute.gate.examples import _request

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from err
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows.append((n, compress(_request(row)).text, str(row["intent"])))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise ConfigError(f"{path}:{n}: need intent and prompt or messages ({err})") from err
    return rows


def code_version() -> str:
    """A digest (hex) of ``KEY_MODULES``' source."""
    h = hashlib.blake2b(digest_size=8)
    for module in KEY_MODULES:
        spec = importlib.util.find_spec(module)
        h.update(Path(spec.origin).read_bytes() if spec and spec.origin else module.encode())
    return h.hexdigest()


def versions() -> dict[str, str]:
    """The ``VERSIONED`` packages' versions (recorded in a manifest, not keyed)."""
    out = {}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "none"
    return out


def model_key(rows: Sequence[Row], recipe: object) -> str:
    """The key (hex) of a model fine-tuned on ``rows`` with ``recipe`` (module docstring)."""
    from llmroute.gate.e5base import base_path
    from llmroute.gate.encoder import HEAD_TOKENS, MAX_TOKENS, PREFIX
    from llmroute.gate.heads_cache import heads_dir
    from llmroute.gate.model import fit_texts

    h = hashlib.blake2b(digest_size=16)
    base = base_path()
    size = base.stat().st_size if base.is_file() else 0
    h.update(json.dumps([FORMAT, code_version(), vars(recipe), size, PREFIX, MAX_TOKENS,
                         HEAD_TOKENS]).encode())
    read = fit_texts([(text, intent) for _, text, intent in rows], heads_dir())
    for text, (_, _, intent) in zip(read, rows, strict=True):
        h.update(json.dumps([text, intent], ensure_ascii=False).encode())
    return h.hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path, key: str, summary: Mapping[str, object]) -> None:
    """Write ``folder/manifest.json``: ``key``, each of ``FILES``' SHA-256, ``summary``."""
    files = {name: _sha256(folder / name) for name in FILES}
    (folder / MANIFEST).write_text(json.dumps({"format": FORMAT, "key": key, "files": files,
                                               "summary": summary, "versions": versions()},
                                              indent=1) + "\n")


def verified_key(folder: Path) -> str | None:
    """The key of the model in ``folder`` when its manifest is readable and every file
    matches its SHA-256; None otherwise (no folder, a missing or altered file)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
        if manifest.get("format") != FORMAT or set(files) != set(FILES):
            return None
        if any(_sha256(folder / name) != digest for name, digest in files.items()):
            return None
        return str(manifest["key"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def usable(folder: Path, key: str) -> bool:
    """True when ``folder`` holds an intact model for ``key``."""
    return verified_key(folder) == key


def current(key: str) -> Path | None:
    """The intact model folder for ``key`` (shipped or cached), or None."""
    for folder in (shipped_folder(), cache_folder(key)):
        if usable(folder, key):
            return folder
    return None

"""Which fine-tuned encoder the gate loads (``tuned`` says what a model folder is and
whether a copy may be loaded; this module picks one, and is the one place that reads
``finetune.Recipe``, so neither of those two imports the other both ways).

``resolve()`` picks the model for the gate, cheapest first, and never loads a copy whose
files do not match their digests:

1. the model shipped in the package (``gate/data/tuned``) when its key is the current key —
   the usual case: nothing to train;
2. ``$LLMROUTE_CACHE/gate/tuned-<key>`` when a set-up fine-tune
   (``python -m llmroute.gate.finetune``, run by ``make engine`` beside the engine build)
   wrote it; a copy that fails its digests is logged and deleted (the next set-up run
   rebuilds it);
3. the shipped model although its key is stale (the rows or the code changed and no
   set-up fine-tune ran yet), with a warning naming the command that brings it up to date.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import structlog

from llmroute.errors import GateModelError
from llmroute.gate.finetune import Recipe
from llmroute.gate.tuned import (
    cache_folder,
    model_key,
    shipped_folder,
    tuning_rows,
    usable,
    verified_key,
)

_log = structlog.get_logger("llmroute.gate")


def current_key() -> str:
    """The key of the model the shipped rows and this code give."""
    return model_key(tuning_rows(), Recipe())


def resolve() -> Path:
    """The folder of the fine-tuned model to load (module docstring). Raises GateModelError
    when there is none intact."""
    key, shipped = current_key(), shipped_folder()
    shipped_key = verified_key(shipped)
    if shipped_key == key:
        return shipped
    cached = cache_folder(key)
    if cached.exists():
        if usable(cached, key):
            return cached
        _log.warning("gate fine-tuned model damaged; deleted, not loaded", path=str(cached))
        shutil.rmtree(cached, ignore_errors=True)
    if shipped_key is not None:
        _log.warning("gate fine-tuned model is older than its data or code; using it until "
                     "`python -m llmroute.gate.finetune` has run", path=str(shipped))
        return shipped
    raise GateModelError("gate: no intact fine-tuned encoder (run python -m llmroute.gate.finetune)")

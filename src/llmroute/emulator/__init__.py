"""An engine emulator: an OpenAI-compatible server with vLLM-format ``/metrics`` whose
timing comes from a performance model of a GPU fleet (see docs/emulator.md)."""

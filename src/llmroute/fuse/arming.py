"""Is the entropy trigger armed for a request on a backend? One answer, for the relay (which
asks for logprobs and arms the ``Fuse`` only then) and for ``/debug/fuse`` (which reports it).

Armed when all hold: the fuse is enabled; the request is a chat completion (legacy
completions carry no per-token ``top_logprobs`` the monitor reads); the backend streams
logprobs (its configured ``capabilities``, else its engine kind's default); and, for a
request with ``tools``, the engine accepts ``logprobs`` beside them (llama-server refuses
them with tools on a stream, so such a request runs without the trigger).
"""

from __future__ import annotations

from llmroute.backends.engines import capabilities, capabilities_of
from llmroute.config import FuseConfig
from llmroute.types import Backend, Endpoint


def entropy_armed(fuse: FuseConfig, backend: Backend, endpoint: Endpoint,
                  has_tools: bool) -> bool:
    """True when the entropy trigger runs for a request to ``endpoint`` (with ``tools``
    when ``has_tools``) on ``backend`` under ``fuse`` (see the module docstring). Pure."""
    if not fuse.enabled or endpoint != "chat" or "logprobs" not in capabilities_of(backend):
        return False
    return not has_tools or capabilities(backend.engine).logprobs_with_tools

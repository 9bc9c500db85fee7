"""Real prompt counts: an engine's own tokenize endpoint, or a tokenizer file.

``EngineTokenizer`` asks the engine (the shapes are in the engine-kind table,
``backends/engines.py``): vLLM and SGLang count a chat with its template applied; llama-server
renders the chat with ``/apply-template`` and counts that with ``/tokenize``.
``FileTokenizer`` reads a Hugging Face ``tokenizer.json`` with the ``tokenizers`` package and
counts the prompt text plus the estimate's per-message overhead (no chat template).
``tiktoken`` is not offered: its encodings are downloaded on first use, which an offline
gateway cannot do, and OpenAI's hosted models refuse an oversized prompt themselves.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import tokenizers

from llmroute.backends.engines import TokenizeEndpoint
from llmroute.errors import ConfigError, UpstreamProtocolError
from llmroute.text import MESSAGE_OVERHEAD_TOKENS
from llmroute.types import Backend, ChatRequest


class Tokenizer(Protocol):
    """Counts a request's prompt in one backend's tokens."""

    async def count(self, request: ChatRequest) -> int:
        """Prompt tokens of ``request`` (≥ 0). Raises BackendError (or UpstreamProtocolError
        for an answer of the wrong shape)."""
        ...


class Poster(Protocol):
    """The engine client's side-call method (``backends.client.BackendClient.post_json``)."""

    async def post_json(self, backend: Backend, path: str, body: dict[str, Any],
                        timeout_s: float) -> dict[str, Any]:
        """The JSON object ``backend`` answers to ``body`` at ``path``."""
        ...


class EngineTokenizer:
    """``backend``'s own tokenize ``endpoint`` through ``client``, each call bounded by
    ``timeout_s`` seconds."""

    def __init__(self, client: Poster, backend: Backend, endpoint: TokenizeEndpoint,
                 timeout_s: float):
        self._client, self._backend, self._endpoint = client, backend, endpoint
        self._timeout_s = timeout_s

    async def count(self, request: ChatRequest) -> int:
        """Prompt tokens of ``request`` as the engine counts them. Raises BackendError."""
        if self._endpoint.shape == "openai":
            key = "messages" if request.endpoint == "chat" else "prompt"
            prompt = request.body["messages"] if key == "messages" else _prompt(request)
            answer = await self._post(self._endpoint.path,
                                      {"model": self._backend.model, key: prompt})
            return _count_of(answer, self._backend)
        text = _prompt(request)
        if request.endpoint == "chat" and self._endpoint.template_path is not None:
            rendered = await self._post(self._endpoint.template_path,
                                        {"messages": request.body["messages"]})
            text = _field(rendered, "prompt", str, self._backend)
        answer = await self._post(self._endpoint.path, {"content": text, "add_special": True})
        return _count_of(answer, self._backend)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._client.post_json(self._backend, path, body, self._timeout_s)


class FileTokenizer:
    """A Hugging Face ``tokenizer.json`` at ``path``, loaded now. Raises ConfigError when
    the file is missing or not a tokenizer."""

    def __init__(self, path: str):
        try:
            self._tokenizer = tokenizers.Tokenizer.from_file(path)
        except Exception as exc:  # the library raises bare Exception for a bad file
            raise ConfigError(f"tokenizer.hf_file {path!r}: {exc}") from exc

    async def count(self, request: ChatRequest) -> int:
        """Tokens of the prompt text plus ``MESSAGE_OVERHEAD_TOKENS`` per chat message,
        encoded in a worker thread (a long prompt takes milliseconds)."""
        text = request.text
        encoding = await asyncio.to_thread(self._tokenizer.encode, text,
                                           add_special_tokens=False)
        messages = len(request.body.get("messages", ())) if request.endpoint == "chat" else 0
        return len(encoding.ids) + MESSAGE_OVERHEAD_TOKENS * messages


def _prompt(request: ChatRequest) -> str:
    prompt = request.body.get("prompt")
    return prompt if isinstance(prompt, str) else request.text


def _count_of(answer: dict[str, Any], backend: Backend) -> int:
    """``count`` when the engine gives it, else the length of ``tokens``."""
    count = answer.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    return len(_field(answer, "tokens", list, backend))


def _field(answer: dict[str, Any], name: str, kind: type, backend: Backend) -> Any:
    value = answer.get(name)
    if not isinstance(value, kind):
        raise UpstreamProtocolError(f"the tokenizer's answer has no {name!r}",
                                    backend_id=backend.id)
    return value

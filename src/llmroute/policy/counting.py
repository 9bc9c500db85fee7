"""Context length (the pipeline's "count tokens" step): the prompt's size in real tokens
where it decides something, the character estimate everywhere else.

The estimate (``text.py``) is trusted to ``margin`` either way, and for non-ASCII
text up to its UTF-8 length (byte-level tokenizers spend at most a token per byte; emoji
and CJK punctuation are where the estimate is worst); a chat's upper bound adds what the
chat templates add (``policy/template.py``: learned per backend from its tokenizer, else
``template_tokens``), and each image part ``image_tokens`` (a stated upper bound). The
output budget is the one the request will carry to each backend: ``max_completion_tokens
or max_tokens``, or the smaller of the two for an engine that reads ``max_tokens`` alone
(``budget_field``: llama.cpp, Ollama). A request whose prompt plus output
budget fits every context limit at that upper bound costs one comparison. Only when a limit
(a chat backend's context, or the key's ``max_context_tokens``) lies inside the uncertain
range — or the request's ``max_tokens`` must be clamped — is the prompt counted by a
backend's tokenizer (``policy/tokenizers.py``; the one whose context is nearest the request's
need), bounded by ``tokens.timeout_ms`` and cached per (backend model, prompt digest). A
count that fails or is late leaves the estimate, noted in the trace (step ``tokens``,
``fallback``) and logged when a backend's tokenizer starts or stops failing.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Sequence

import orjson
import structlog
from cachetools import LRUCache

from llmroute.backends.quirks import smaller_budget
from llmroute.config.policy import TokensConfig
from llmroute.errors import BackendError, ContextLengthExceeded
from llmroute.observe.trace import Recorder
from llmroute.policy.auth import Caller
from llmroute.policy.template import TemplateBook
from llmroute.policy.tokenizers import FileTokenizer, Tokenizer
from llmroute.text import MESSAGE_OVERHEAD_TOKENS
from llmroute.types import Backend, ChatRequest

log = structlog.get_logger("llmroute.tokens")

Counting = tuple[Backend, Tokenizer]
"""A chat backend and the tokenizer that counts in its tokens."""

Limit = tuple[int, bool]
"""A chat backend's context (tokens) and whether its engine reads the smaller of
``max_tokens`` / ``max_completion_tokens`` (``Quirks.budget_field`` set)."""


class TokenCounter:
    """The count-tokens step over the chat backends' context ``limits`` (tokens, any order;
    or ``Limit`` pairs) and the ``tokenizers`` that can count (possibly none), as ``config``
    says; ``templates`` what their chat templates add (default: ``template_tokens`` for
    every backend)."""

    def __init__(self, config: TokensConfig, limits: Sequence[int | Limit],
                 tokenizers: Sequence[Counting], templates: TemplateBook | None = None):
        self._config = config
        self._rows = tuple(sorted({(lim, False) if isinstance(lim, int) else lim
                                   for lim in limits}))
        self._limits = tuple(sorted({ctx for ctx, _ in self._rows}))
        self._tokenizers = tuple(tokenizers)
        self.templates = templates or TemplateBook([], config.template_tokens)
        self._cache: LRUCache[tuple[str, bytes], int] = LRUCache(max(config.cache_size, 1))
        self._failing: set[str] = set()

    def bounds(self, request: ChatRequest) -> tuple[int, int]:
        """The range (low, high) the request's real prompt tokens lie in, as far as the
        estimate knows: exact for a prompt of token ids; a chat's high end includes what the
        chat templates add."""
        est, margin = request.prompt_tokens, self._config.margin
        if not request.text:
            return est, est
        high = math.ceil(est * (1 + margin))
        if request.endpoint == "chat":
            high += self.templates.fixed
        if not request.text.isascii():
            overhead = MESSAGE_OVERHEAD_TOKENS * len(request.body.get("messages", ()))
            high = max(high, len(request.text.encode("utf-8")) + overhead)
        return int(est * (1 - margin)), high

    async def measure(self, request: ChatRequest, key_limit: int | None = None,
                      trace: Recorder | None = None) -> ChatRequest:
        """``request`` with its real prompt tokens where they decide the fit (else as is;
        its image parts counted at ``image_tokens`` each), and, with
        ``auto_clamp_max_tokens``, its ``max_tokens`` lowered to what fits.
        ``key_limit``: the caller's ``max_context_tokens`` (None: none). Raises
        ContextLengthExceeded (400) when the prompt plus the output budget it carries fits no
        chat backend's context (or the key's limit), naming the count."""
        rows = self._capped(key_limit)
        if not rows:
            return request
        if request.images:
            request = request._replace(prompt_tokens=request.prompt_tokens
                                       + request.images * self._config.image_tokens)
        out = request.max_tokens or self._config.min_output_tokens
        low, high = self.bounds(request)
        if high + out <= rows[0][0]:  # the common case: fits everywhere, whatever it counts
            return request
        if any(low + out <= lim < high + out for lim, _ in rows) or self._clampable(
                request, low, rows[-1][0]):
            request = await self._count(request, low + out, trace)
        return self._fit(request, rows, trace)

    def _capped(self, key_limit: int | None) -> tuple[Limit, ...]:
        if key_limit is None:
            return self._rows
        return tuple(sorted({(min(lim, key_limit), small) for lim, small in self._rows}))

    def _clampable(self, request: ChatRequest, low: int, top: int) -> bool:
        mt = request.max_tokens
        return (self._config.auto_clamp_max_tokens and mt is not None and low + mt > top
                and low + self._config.min_output_tokens <= top)

    async def count(self, request: ChatRequest) -> ChatRequest:
        """``request`` with its prompt counted by the tokenizer of a backend that serves
        its ``model`` (a served model name or a pool; else the first that can count),
        cached as ``measure``'s counts; as is (the estimate) when none can count in time.
        For a client asking the count itself (``/v1/messages/count_tokens``)."""
        if not self._tokenizers:
            return request
        named = [bt for bt in self._tokenizers
                 if request.model in (bt[0].model, bt[0].pool)] or self._tokenizers
        return await self._counted(request, named[0], None)

    async def _count(self, request: ChatRequest, need: int, trace: Recorder | None
                     ) -> ChatRequest:
        """The request with the nearest backend's count (cached), or as is on failure. A
        count without the chat template (a tokenizer file) gets the template's tokens added,
        and every count the image parts'."""
        if not self._tokenizers:
            return request
        return await self._counted(request, min(
            self._tokenizers, key=lambda bt: abs(bt[0].context_length - need)), trace)

    async def _counted(self, request: ChatRequest, counting: Counting,
                       trace: Recorder | None) -> ChatRequest:
        """The request with ``counting``'s count (cached), or as is on failure."""
        backend, tokenizer = counting
        key = (backend.model, _digest(request))
        tokens = self._cache.get(key)
        source = "cache" if tokens is not None else "tokenizer"
        if tokens is None:
            tokens = await self._ask(backend, tokenizer, request, trace)
            if tokens is None:
                return request
            self._cache[key] = tokens
        if request.endpoint == "chat" and isinstance(tokenizer, FileTokenizer):
            tokens += self.templates.of(backend.id)
        tokens += request.images * self._config.image_tokens
        if trace is not None:
            trace.step("tokens", source=source, backend=backend.id,
                       estimate=request.prompt_tokens, tokens=tokens)
        return request._replace(prompt_tokens=tokens, prompt_counted=True)

    async def _ask(self, backend: Backend, tokenizer: Tokenizer, request: ChatRequest,
                   trace: Recorder | None) -> int | None:
        """The tokenizer's count within the time bound, or None (the estimate stays)."""
        bound_s = self._config.timeout_ms / 1000
        try:
            async with asyncio.timeout(bound_s):
                tokens = await tokenizer.count(request)
        except (TimeoutError, BackendError) as exc:
            reason = f"no count within {self._config.timeout_ms:g} ms" if isinstance(
                exc, TimeoutError) else exc.message
            if backend.id not in self._failing:
                self._failing.add(backend.id)
                log.warning("tokenizer_failing", backend=backend.id, reason=reason,
                            request_id=request.request_id)
            if trace is not None:
                trace.step("tokens", source="estimate", backend=backend.id,
                           estimate=request.prompt_tokens, fallback=reason)
            return None
        if backend.id in self._failing:
            self._failing.discard(backend.id)
            log.info("tokenizer_recovered", backend=backend.id)
        return tokens

    def _fit(self, request: ChatRequest, rows: tuple[Limit, ...], trace: Recorder | None
             ) -> ChatRequest:
        """``request`` if it fits some row's context with the output budget it carries
        there, clamped if allowed, else refused. An estimate (not counted) is taken with
        the tokens the learned chat templates add (``TemplateBook.known``; the unlearned
        default only decides whether to count)."""
        prompt = request.prompt_tokens
        if not request.prompt_counted and request.endpoint == "chat" and request.text:
            prompt += self.templates.known
        big = request.max_tokens or self._config.min_output_tokens
        small = smaller_budget(request) or self._config.min_output_tokens
        if any(prompt + (small if takes_small else big) <= ctx for ctx, takes_small in rows):
            return request if prompt == request.prompt_tokens else \
                request._replace(prompt_tokens=prompt)  # the anchor fits the same figure
        room = rows[-1][0] - prompt
        if (self._config.auto_clamp_max_tokens and request.max_tokens is not None
                and room >= self._config.min_output_tokens):
            if trace is not None:
                trace.step("clamp", max_tokens=room, requested=request.max_tokens)
            return clamp(request, room)
        top, takes_small = rows[-1]
        raise too_long(request._replace(prompt_tokens=prompt), top,
                       small if takes_small else big)


def clamp(request: ChatRequest, max_tokens: int) -> ChatRequest:
    """``request`` asking for ``max_tokens`` output tokens (in its body too: whichever of
    ``max_tokens`` / ``max_completion_tokens`` it sent)."""
    body = dict(request.body)
    for name in ("max_tokens", "max_completion_tokens"):
        if body.get(name) is not None:
            body[name] = max_tokens
    return request._replace(body=body, max_tokens=max_tokens)


def too_long(request: ChatRequest, longest: int, output: int | None = None
             ) -> ContextLengthExceeded:
    """The 400 for a request that fits no context of at most ``longest`` tokens, naming its
    prompt tokens (counted by a tokenizer, or "about" the estimate) and ``output`` tokens
    (default: its ``max_tokens``)."""
    size = (f"{request.prompt_tokens} prompt tokens (counted by the engine's tokenizer)"
            if request.prompt_counted else f"about {request.prompt_tokens} prompt tokens")
    out = request.max_tokens or 0 if output is None else output
    return ContextLengthExceeded(
        f"This request needs {size} plus {out} output tokens; "
        f"the largest context is {longest} tokens",
        param="messages" if request.endpoint == "chat" else "prompt")


def context_limit(caller: Caller | None) -> int | None:
    """The lowest ``max_context_tokens`` of the caller's key and tenant (None: none)."""
    if caller is None:
        return None
    key, tenant = caller.key.limits.max_context_tokens, caller.tenant.limits.max_context_tokens
    if key is None or tenant is None:
        return tenant if key is None else key
    return min(key, tenant)


def _digest(request: ChatRequest) -> bytes:
    """What the count depends on: the endpoint and its messages (roles, parts) or prompt."""
    prompt = request.body.get("messages") if request.endpoint == "chat" else request.text
    raw = orjson.dumps([request.endpoint, prompt], option=orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(raw, digest_size=16).digest()

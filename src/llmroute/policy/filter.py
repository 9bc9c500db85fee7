"""The sensitive-word filter the pipeline calls: ``check`` a request before the gate,
``answer`` a JSON answer, ``stream`` an SSE answer (``policy/filter_stream.py``).

The compiled lists (``policy/wordlist.py``) are swapped whole on ``reload``; a request
reads them once, so a reload never changes the lists under a request under way. A list
that fails to load keeps the old lists and says why (log, ``status``,
``llmroute_content_filter_reloads_total{outcome="invalid"}``). Every match is counted in
``llmroute_content_filter_hits_total{list, action, direction}``, logged (list and action,
never the text) and noted in the request's trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import Counter

from llmroute.errors import ConfigError, ContentFiltered
from llmroute.observe.trace import Recorder
from llmroute.policy.filter_stream import filter_sse
from llmroute.policy.normalize import Normalizer
from llmroute.policy.scan import Scanned, TextScan, scan_text
from llmroute.policy.wordlist import Hit, Matcher
from llmroute.types import ChatRequest

log = structlog.get_logger("llmroute.filter")


@dataclass(frozen=True)
class FilterStatus:
    """The last load: ``outcome`` (``loaded``, ``applied`` or ``invalid``), ``at`` epoch
    seconds, ``words`` compiled entries in use, ``messages`` why a reload was invalid."""

    outcome: str
    at: float
    words: int
    messages: tuple[str, ...] = ()


class ContentFilter:
    """The live word lists (``matcher``); ``load()`` compiles them again (raises
    ConfigError; run in a worker thread by ``reload``). ``hits`` and ``reloads`` are the
    metric counters (``observe.metrics.Metrics.filter_hits`` / ``filter_reloads``)."""

    def __init__(self, matcher: Matcher, load: Callable[[], Matcher], hits: Counter,
                 reloads: Counter, wall_clock: Callable[[], float]):
        self.matcher = matcher
        self.normalizer = Normalizer()
        self._load, self._hits, self._reloads, self._clock = load, hits, reloads, wall_clock
        self.status = FilterStatus("loaded", wall_clock(), matcher.size)

    async def reload(self) -> FilterStatus:
        """Compile the lists again in a worker thread and swap them in; a bad list keeps
        the old ones (logged, counted, in ``status``). Never raises for a bad list."""
        try:
            matcher = await asyncio.to_thread(self._load)
        except ConfigError as exc:
            self.status = FilterStatus("invalid", self._clock(), self.matcher.size,
                                       tuple(exc.message.splitlines()))
            log.warning("content_filter_reload", outcome="invalid",
                        problems=list(self.status.messages))
        else:
            self.matcher, self.normalizer = matcher, Normalizer()
            self.status = FilterStatus("applied", self._clock(), matcher.size)
            log.info("content_filter_reload", outcome="applied", words=matcher.size)
        self._reloads.labels(self.status.outcome).inc()
        return self.status

    def check(self, request: ChatRequest, trace: Recorder) -> ChatRequest:
        """``request`` with ``mask`` matches replaced by ``*``s (itself when nothing
        matched): its text (every message, any role) and its tool-call arguments. Raises
        ContentFiltered (400 ``content_filter``) on a ``block`` match."""
        matcher = self.matcher
        if not matcher.longest["input"]:
            return request
        texts = _texts(request)
        if self._clean(matcher, texts):  # the common case: no entry anywhere
            return request
        scans = [self._scan(matcher, t) for t in texts]
        hits = [h for s in scans for h in s.hits]
        if not hits:
            return request
        self.record(hits, "input", trace)
        blocked = next((s.blocked for s in scans if s.blocked is not None), None)
        if blocked is not None:
            raise ContentFiltered(f"The request was refused by the content filter (list "
                                  f"{blocked.spec.name!r}).", param="messages")
        if not any(h.spec.action == "mask" for h in hits):
            return request
        body = _masked(request.body, lambda s: self._scan(matcher, s).text)
        return request._replace(body=body, text=scans[0].text)

    def answer(self, request: ChatRequest, body: Any, trace: Recorder) -> Any:
        """A JSON answer ``body`` with its choices' text filtered in place: masks applied;
        on a block, the text cut where the match starts and ``finish_reason`` set to
        ``content_filter``."""
        matcher = self.matcher
        if not matcher.longest["output"] or not isinstance(body, dict):
            return body
        key = "message" if request.endpoint == "chat" else None
        for choice in body.get("choices") or ():
            holder = choice.get(key) if key and isinstance(choice, dict) else choice
            text = holder.get("content" if key else "text") if isinstance(holder, dict) else None
            if not isinstance(text, str) or not text or self._clean(matcher, (text,)):
                continue
            found = scan_text(matcher, self.normalizer, text, "output")
            self.record(found.hits, "output", trace)
            holder["content" if key else "text"] = found.text
            if found.blocked is not None:
                choice["finish_reason"] = "content_filter"
                trace.finish_reason("content_filter")
        return body

    def stream(self, request: ChatRequest, stream: AsyncIterator[bytes], trace: Recorder
               ) -> AsyncIterator[bytes]:
        """``stream`` (the relay's SSE bytes) with its text filtered as it passes
        (``policy/filter_stream.py``; the trace's answer becomes the text let out, so the
        log line and the audit's digest hold what the client got); ``stream`` itself when
        no list applies to output."""
        matcher = self.matcher
        if not matcher.longest["output"]:
            return stream
        scan = TextScan(matcher, self.normalizer, "output")
        return filter_sse(stream, scan, request.endpoint,
                          lambda hits: self.record(hits, "output", trace), trace.filtered)

    def record(self, hits: Iterable[Hit], direction: str, trace: Recorder) -> None:
        """Count, log and trace each of ``hits`` (list and action; never the text)."""
        for h in hits:
            self._hits.labels(h.spec.name, h.spec.action, direction).inc()
            log.info("content_filter", list=h.spec.name, action=h.spec.action,
                     direction=direction, request_id=trace.request_id)
            trace.step("filter", list=h.spec.name, action=h.spec.action, direction=direction)
            if h.spec.action == "block" and direction == "output":
                trace.finish_reason("content_filter")

    def _clean(self, matcher: Matcher, texts: Iterable[str]) -> bool:
        """Whether no list entry occurs in any of ``texts`` (normalised): then nothing is
        masked, blocked or recorded, and the texts pass as they are."""
        normalize = self.normalizer.text
        for text in texts:
            if not matcher.clean(normalize(text)):
                return False
        return True

    def _scan(self, matcher: Matcher, text: str) -> Scanned:
        return scan_text(matcher, self.normalizer, text, "input")


def _texts(request: ChatRequest) -> list[str]:
    """The request's text, then the ``arguments`` strings of the tool calls in a chat
    request's messages."""
    out = [request.text]
    if request.endpoint == "chat":
        for m in request.body.get("messages") or ():
            for call in m.get("tool_calls") or ():
                args = (call.get("function") or {}).get("arguments")
                if isinstance(args, str):
                    out.append(args)
    return out


def _masked(body: dict[str, Any], mask: Callable[[str], str]) -> dict[str, Any]:
    """A copy of ``body`` with ``mask`` applied to each message's text (a string content or
    its text parts) and tool-call arguments, or to the completion ``prompt``."""
    if "messages" not in body:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return {**body, "prompt": mask(prompt)}
        if isinstance(prompt, list):
            return {**body, "prompt": [mask(p) if isinstance(p, str) else p for p in prompt]}
        return body
    return {**body, "messages": [_masked_message(m, mask) for m in body["messages"]]}


def _masked_message(m: dict[str, Any], mask: Callable[[str], str]) -> dict[str, Any]:
    out = dict(m)
    content = m.get("content")
    if isinstance(content, str):
        out["content"] = mask(content)
    elif isinstance(content, list):
        out["content"] = [{**p, "text": mask(p["text"])} if isinstance(p.get("text"), str)
                          else p for p in content]
    if m.get("tool_calls"):
        out["tool_calls"] = [{**c, "function": {**c["function"], "arguments": mask(
            c["function"]["arguments"])}} for c in m["tool_calls"]]
    return out

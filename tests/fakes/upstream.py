"""A scripted OpenAI-compatible engine on a real loopback port (aiohttp.web).

Each request takes the next step of ``script`` (the last step repeats). Steps:
``ok`` (answer normally: JSON, or SSE chunks with text ``reply``), ``("status", code,
retry_after)`` (``retry_after`` seconds, or a dict of response headers), ``("cut", n)``
(stream n chunks then drop the connection), ``("stall", s)`` (stream one chunk, then wait
s seconds), ``malformed`` (a non-JSON chunk after one good one), ``inband`` (an in-band
error event after one good one), ``no_done`` (stream without [DONE]),
``("hang", s)`` (wait s seconds before answering at all), ``("entropic", n)`` (stream the
reply with peaked logprobs for the first n words and flat, high-entropy ones after),
``tool_cut`` (one tool-call fragment, then the connection drops), ``cut_after_finish``
(the whole answer, then the connection drops before ``[DONE]``),
``("say", text)`` (answer normally, non-streamed, with ``text`` instead of ``reply``),
``("context", engine[, status])`` (a context-length refusal, 400 unless ``status`` is given,
as an engine in ``CONTEXT_ERRORS`` words it),
``("clean_end", n)`` (n content chunks, then the body ends cleanly: no ``finish_reason``, no
``[DONE]``, as a crashing proxy terminates a chunked body), ``("keepalive", s)`` (one chunk,
then only ``: keep-alive`` comments every 50 ms for s seconds, then the rest),
``("keepalive_ttft", s)`` (the comments for s seconds before the first chunk),
``empty_data`` (an event with an empty ``data:`` line between two chunks),
``("slow", n, tps)`` (n words at the usual pace, then the rest at ``tps`` words a second: a
stream that never stalls but crawls), ``("raw", events)``
(each item of ``events`` — a dict sent as JSON, or a str sent as is — as one ``data:`` event,
then ``[DONE]``; a non-streamed request gets the first dict as its JSON answer).

With ``stream_options.include_usage`` a usage chunk (no choices) follows the finish chunk
(prompt tokens: 5 plus one per word of a trailing assistant message, as a continuation
prefills its prefix).
When a request asks for ``logprobs``, every streamed word carries ``top_logprobs``
(peaked: entropy ≈ 0.072 nats; flat: 5 × p = 0.02, entropy = ln 50 ≈ 3.9 nats); a
non-streamed answer then carries each word's logprob (ln 0.99 peaked, ln 0.02 flat; with
``("entropic", n)`` the words after the first n are flat). With
``echo=True`` the upstream behaves like llama.cpp at a trailing assistant message: its first
content delta repeats that message's text before the first new word.

``rules`` (``fakes/engine_rules.py``) make it refuse, before any step, what a real engine
refuses, in that engine's words.

``("freeze", s)`` stops answering as a SIGSTOPped engine does once a non-streamed request's
response headers are out: the body comes only after s seconds, and from then on ``GET
/metrics`` (served with ``metrics=True``: a vLLM-style scrape while not ``frozen``) answers no
poll.

``tokenize`` scripts the engine's ``POST /tokenize`` (vLLM's shape, ``{"count"}``; also
llama-server's ``/apply-template``): an int answers that count, ``("hang", s)`` waits s
seconds first, ``"chatml"`` renders ``/apply-template`` as llama-server does with SmolLM2's
chat template (``chatml``) and counts ``/tokenize`` by ``chatml_tokens``; the bodies it
received are in ``tokenized``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from fakes.engine_rules import refusal

UPSTREAM = web.AppKey("upstream", "Upstream")


@dataclass
class Upstream:
    """A running fake engine: ``base_url``, the ``requests`` bodies it received (and their
    ``headers``, lower-case names), and how many streams were ``cancelled`` by the router
    closing the connection; ``GET /health`` answers 200 while ``healthy``."""

    script: list[Any]
    reply: str = "Hello from the fake engine."
    echo: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    cancelled: int = 0
    base_url: str = ""
    tokenize: Any = 0
    tokenized: list[dict[str, Any]] = field(default_factory=list)
    healthy: bool = True
    rules: tuple[Any, ...] = ()
    frozen: bool = False

    def next_step(self) -> Any:
        i = min(len(self.requests) - 1, len(self.script) - 1)
        return self.script[i]

    def words(self) -> list[str]:
        parts = self.reply.split(" ")
        return [p if i == 0 else " " + p for i, p in enumerate(parts)]


def _completion(up: Upstream, body: dict[str, Any], step: Any = "ok") -> dict[str, Any]:
    msg = {"role": "assistant", "content": up.reply}
    if body.get("tools"):
        msg = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": body["tools"][0]["function"]["name"], "arguments": "{}"}}]}
    choice: dict[str, Any] = {"index": 0, "message": msg, "finish_reason": "stop"}
    if body.get("logprobs"):
        calm = step[1] if isinstance(step, tuple) and step[0] == "entropic" else len(up.words())
        choice["logprobs"] = {"content": [
            {"token": w, "logprob": (PEAKED if i < calm else FLAT)[0]}
            for i, w in enumerate(up.words())]}
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "choices": [choice],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}


PEAKED = [math.log(0.99)] + [math.log(0.002)] * 4
FLAT = [math.log(0.02)] * 5
CONTEXT_ERRORS = {
    "llamacpp": {"error": {"code": 400, "type": "exceed_context_size_error", "n_ctx": 2048,
                           "message": "the request exceeds the available context size"}},
    "vllm": {"object": "error", "type": "BadRequestError", "code": 400, "message": (
        "This model's maximum context length is 2048 tokens. However, you requested 4000 "
        "tokens.")},
    "vllm-v1": {"object": "error", "type": "BadRequestError", "code": 400, "message": (
        "The decoder prompt (length 4000) is longer than the maximum model length of 2048. "
        "Make sure that `max_model_len` is no smaller than the number of text tokens.")},
    "sglang": {"object": "error", "type": "BadRequestError", "code": 400, "param": None,
               "message": "The input (4000 tokens) is longer than the model's context length "
                          "(2048 tokens)."},
    "llamacpp-old": {"error": {"code": 400, "type": "invalid_request_error",
                               "message": "the request exceeds the available context size, "
                                          "try increasing it"}},
    "openai": {"error": {"message": "Your input is too long for this model.",
                         "type": "invalid_request_error", "param": "messages",
                         "code": "context_length_exceeded"}},
}


def _chunk(text: str | None, finish: str | None = None, lps: list[float] | None = None,
           cid: str = "chatcmpl-fake") -> bytes:
    delta = {} if text is None else {"content": text}
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if lps is not None:
        tops = [{"token": f"t{i}", "logprob": lp} for i, lp in enumerate(lps)]
        choice["logprobs"] = {"content": [{"token": text, "logprob": lps[0],
                                           "top_logprobs": tops}]}
    obj = {"id": cid, "object": "chat.completion.chunk", "created": 1,
           "model": "fake", "choices": [choice]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _handle(request: web.Request) -> web.StreamResponse:
    up: Upstream = request.app[UPSTREAM]
    body = await request.json()
    up.requests.append(body)
    up.headers.append({k.lower(): v for k, v in request.headers.items()})
    refused = refusal(up.rules, body, request.path)
    if refused is not None:
        return web.json_response(refused[1], status=refused[0])
    step = up.next_step()
    kind = step[0] if isinstance(step, tuple) else step
    if kind == "context":
        return web.json_response(CONTEXT_ERRORS[step[1]],
                                 status=step[2] if len(step) > 2 else 400)
    if kind == "status":
        extra = step[2] if len(step) > 2 else None
        headers = extra if isinstance(extra, dict) else \
            {"Retry-After": str(extra)} if extra else {}
        err = {"error": {"message": f"scripted {step[1]}", "type": "server_error",
                         "param": None, "code": None}}
        return web.json_response(err, status=step[1], headers=headers)
    if kind == "hang":
        try:
            await asyncio.sleep(step[1])
        except asyncio.CancelledError:
            up.cancelled += 1
            raise
    if kind == "say":
        return web.json_response(_completion(dataclasses.replace(up, reply=step[1]), body))
    if kind == "freeze" and not body.get("stream"):
        return await _freeze(request, up, step[1], body)
    if not body.get("stream"):
        if kind == "raw":
            return web.json_response(next(e for e in step[1] if isinstance(e, dict)))
        return web.json_response(_completion(up, body, step))
    return await _stream(request, up, step, body)


async def _freeze(request: web.Request, up: Upstream, seconds: float,
                  body: dict[str, Any]) -> web.StreamResponse:
    """The response headers, then nothing for ``seconds`` (the upstream stays ``frozen``),
    then the answer."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    up.frozen = True
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        up.cancelled += 1
        raise
    await resp.write(json.dumps(_completion(up, body)).encode())
    await resp.write_eof()
    return resp


METRICS = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 0
"""
"""A vLLM ``/metrics`` scrape of an idle engine."""


async def _metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: ``METRICS``; no answer while ``frozen``."""
    while request.app[UPSTREAM].frozen:
        await asyncio.sleep(0.05)
    return web.Response(text=METRICS, content_type="text/plain")


async def _tokenize(request: web.Request) -> web.StreamResponse:
    up: Upstream = request.app[UPSTREAM]
    up.tokenized.append(await request.json())
    if isinstance(up.tokenize, tuple):
        await asyncio.sleep(up.tokenize[1])
    body = up.tokenized[-1]
    if request.path == "/apply-template":
        rendered = chatml(body["messages"]) if up.tokenize == "chatml" else "<rendered>"
        return web.json_response({"prompt": rendered})
    if up.tokenize == "chatml":
        return web.json_response({"tokens": [1] * chatml_tokens(body["content"])})
    if "content" in body:  # llama-server's shape: the tokens only
        return web.json_response({"tokens": [1] * up.tokenize})
    return web.json_response({"count": up.tokenize, "max_model_len": 4096})


SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(messages: list[dict[str, Any]]) -> str:
    """``messages`` rendered as llama-server's ``/apply-template`` renders them with
    SmolLM2-135M-Instruct's chat template (its GGUF's ``tokenizer.chat_template``): a default
    system message when the first is not one, ``<|im_start|>role\ncontent<|im_end|>\n``
    each, then the generation prompt."""
    head = "" if messages and messages[0].get("role") == "system" else \
        f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n"
    turns = "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n"
                    for m in messages)
    return head + turns + "<|im_start|>assistant\n"


_PIECES = re.compile(r"<\|im_(?:start|end)\|>|\w+|[^\w\s]|\n")


def chatml_tokens(text: str) -> int:
    """A count of ``text`` close to SmolLM2's tokenizer on such prompts: a token per special
    marker, word, punctuation mark and newline (the real one: 31 for "hi" rendered above,
    where this gives 27)."""
    return len(_PIECES.findall(text))


async def _stream(request: web.Request, up: Upstream, step: Any,
                  body: dict[str, Any]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    kind = step[0] if isinstance(step, tuple) else step
    try:
        await _play(resp, up, kind, step, body)
    except (ConnectionResetError, asyncio.CancelledError):
        up.cancelled += 1
        raise
    return resp


def _continued(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    return last.get("content") or "" if last.get("role") == "assistant" else ""


def _echoed(up: Upstream, body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    return last.get("content") or "" if up.echo and last.get("role") == "assistant" else ""


async def _play(resp: web.StreamResponse, up: Upstream, kind: str, step: Any,
                body: dict[str, Any]) -> None:
    words = up.words()
    words[0] = _echoed(up, body) + words[0]
    calm = len(words) if kind != "entropic" else step[1]
    lps = [PEAKED if i < calm else FLAT for i in range(len(words))]
    if not body.get("logprobs"):
        lps = [None] * len(words)
    cid = f"chatcmpl-{len(up.requests)}"
    if kind == "raw":
        for e in step[1]:
            data = e if isinstance(e, str) else json.dumps(e)
            await resp.write(b"data: " + data.encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return
    if kind == "clean_end":
        for w, lp in zip(words[: step[1]], lps, strict=False):
            await resp.write(_chunk(w, lps=lp, cid=cid))
        await resp.write_eof()
        return
    if kind == "tool_cut":
        call = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"ci'}}
        obj = {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": "fake",
               "choices": [{"index": 0, "delta": {"tool_calls": [call]},
                            "finish_reason": None}]}
        await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        kind, step = "cut", ("cut", 0)
    if kind == "cut":
        for w, lp in zip(words[: step[1]], lps, strict=False):
            await resp.write(_chunk(w, lps=lp, cid=cid))
        resp.force_close()
        if resp.task is not None and resp._req is not None:
            resp._req.transport.close()
        return
    if kind == "keepalive_ttft":
        await _keep_alive(resp, step[1])
    await resp.write(_chunk(words[0], lps=lps[0], cid=cid))
    if kind == "stall":
        await asyncio.sleep(step[1])
    if kind == "keepalive":
        await _keep_alive(resp, step[1])
    if kind == "empty_data":
        await resp.write(b"data:\n\n")
    if kind == "malformed":
        await resp.write(b"data: {not json\n\n")
        return
    if kind == "inband":
        await resp.write(b'data: {"error": {"message": "engine exploded"}}\n\n')
        return
    for i, (w, lp) in enumerate(zip(words[1:], lps[1:], strict=True), 1):
        slow = kind == "slow" and i >= step[1]
        await asyncio.sleep(1 / step[2] if slow else 0.005)
        await resp.write(_chunk(w, lps=lp, cid=cid))
    await resp.write(_chunk(None, "stop", cid=cid))
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt = 5 + len(_continued(body).split())  # a continuation's prefix is prompt
        usage = {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": "fake",
                 "choices": [], "usage": {"prompt_tokens": prompt,
                                          "completion_tokens": len(words),
                                          "total_tokens": prompt + len(words)}}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
    if kind == "cut_after_finish":
        resp.force_close()
        if resp._req is not None:
            resp._req.transport.close()
        return
    if kind != "no_done":
        await resp.write(b"data: [DONE]\n\n")


async def _health(request: web.Request) -> web.Response:
    """``GET /health``: 200 while ``healthy``, else 503 (as an engine still loading)."""
    return web.json_response({"status": "ok"} if request.app[UPSTREAM].healthy
                             else {"status": "loading"},
                             status=200 if request.app[UPSTREAM].healthy else 503)


async def _keep_alive(resp: web.StreamResponse, seconds: float) -> None:
    for _ in range(int(seconds / 0.05)):
        await resp.write(b": keep-alive\n\n")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def serve_upstream(script: list[Any], reply: str = "Hello from the fake engine.",
                         echo: bool = False, rules: tuple[Any, ...] = (),
                         metrics: bool = False) -> AsyncIterator[Upstream]:
    """Serve a scripted upstream on 127.0.0.1 (a free port) for the duration of the block,
    refusing what ``rules`` refuse; ``metrics``: with ``GET /metrics`` (``_metrics``; without
    it a poll gets a 404)."""
    up = Upstream(list(script), reply, echo, rules=tuple(rules))
    app = web.Application()
    app[UPSTREAM] = up
    app.router.add_post("/v1/chat/completions", _handle)
    app.router.add_post("/v1/completions", _handle)
    app.router.add_post("/tokenize", _tokenize)
    app.router.add_post("/apply-template", _tokenize)
    app.router.add_get("/health", _health)
    if metrics:
        app.router.add_get("/metrics", _metrics)
    runner = web.AppRunner(app, shutdown_timeout=0.1, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    up.base_url = f"http://127.0.0.1:{port}"
    try:
        yield up
    finally:
        await runner.cleanup()

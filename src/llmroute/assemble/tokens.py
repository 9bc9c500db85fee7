"""Config → the count-tokens step (``policy.counting.TokenCounter``): the chat backends'
context limits (with whether each engine reads the smaller output budget), per backend the
tokenizer that counts in its tokens — a configured ``tokenizer.hf_file``, else its engine
kind's tokenize endpoint (``backends/engines.py``), else none — and the book of what their
chat templates add (``policy/template.py``, learned once the Runtime is served)."""

from __future__ import annotations

from llmroute.backends.engines import engine_kind
from llmroute.backends.quirks import quirks_of
from llmroute.config import Config
from llmroute.policy.counting import Counting, TokenCounter
from llmroute.policy.template import TemplateBook
from llmroute.policy.tokenizers import EngineTokenizer, FileTokenizer, Poster, Tokenizer
from llmroute.types import Backend


def build_counter(config: Config, backends: dict[str, Backend], client: Poster
                  ) -> TokenCounter:
    """The counter over ``backends`` (chat ones), asking engines through ``client``.
    Reads each ``tokenizer.hf_file`` now; raises ConfigError for a bad one."""
    files = {b.id: b.tokenizer.hf_file for b in config.backends if b.tokenizer is not None}
    chat = [b for b in backends.values() if b.mode == "chat"]
    counting: list[Counting] = []
    every: list[tuple[Backend, Tokenizer | None]] = []
    for b in chat:
        tokenizer = _tokenizer(b, files.get(b.id), client, config.tokens.timeout_ms / 1000)
        every.append((b, tokenizer))
        if tokenizer is not None:
            counting.append((b, tokenizer))
    limits = [(b.context_length, quirks_of(b.shape).budget_field is not None) for b in chat]
    return TokenCounter(config.tokens, limits, counting,
                        TemplateBook(every, config.tokens.template_tokens))


def _tokenizer(backend: Backend, hf_file: str | None, client: Poster, timeout_s: float
               ) -> Tokenizer | None:
    if hf_file is not None:
        return FileTokenizer(hf_file)
    endpoint = engine_kind(backend.engine).tokenize
    return EngineTokenizer(client, backend, endpoint, timeout_s) if endpoint else None

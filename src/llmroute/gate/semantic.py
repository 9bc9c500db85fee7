"""The semantic gate: n-gram first stage, fine-tuned encoder second opinion, rules as overrides.

Per request (docs/gate.md):

1. ``compress`` the request; nothing to classify → ``nothing_intent`` (chat, confidence 0);
2. the LRU + TTL cache, keyed by ``Compressed.key``, may already hold the model's answer;
3. first stage: ``NgramHead`` probabilities × structure priors (source ``fast``);
4. when the top probability is below ``second_opinion_below``, the latest turn is not
   pasted material (``Compressed.pasted``: the encoder would read only its two ends) and
   the encoder is started, the fine-tuned multilingual encoder (``pick.resolve()``;
   English and Chinese alike) embeds the latest turn (micro-batched in the gate's worker
   thread) and the two opinions are combined, the encoder's under the same structure terms
   as the first stage (``verdict.structure_vector``; source ``fast+encoder``);
5. config rule overrides are applied last (source gains ``+rule``; ``replace_rules`` swaps
   them while serving);
6. complexity from ``complexity.ComplexityScorer`` (the one formula) over the compressed
   text (so a 1 MB prompt costs what a 1 kB one does), with the request's token count for
   length;
7. with a win head (``gate.router``: ``win.py``), each cheaper pool's probability of
   answering as well as the ladder's reference, from the first stage's features (cached
   with them): ``Intent.wins``.

Until ``start()`` has fitted the heads (in a worker thread) the verdict's label comes from
``RulesClassifier`` (source ``rules``), with the complexity step 6 gives, so a prompt's
complexity does not change once the models are ready. Tolerated failures (``health``):
when the encoder fails the first stage answers alone (not cached); when anything else
fails the rules classifier answers. Each is counted and logged when its state changes, not
per request. The gate never raises into the request path and never blocks the event loop
on a model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import structlog
from cachetools import TTLCache

from llmroute.config import GateConfig
from llmroute.errors import LLMRouteError
from llmroute.gate.batcher import MicroBatcher
from llmroute.gate.clauses import CLAUSE_MIN, clauses, composite_of
from llmroute.gate.complexity import ComplexityScorer
from llmroute.gate.compress import Compressed, compress
from llmroute.gate.examples import shipped_utterances, user_examples, with_extras
from llmroute.gate.health import GateHealth
from llmroute.gate.heads_cache import heads_dir
from llmroute.gate.intents import INTENTS
from llmroute.gate.model import GateModel, build_model
from llmroute.gate.overrides import RuleOverrides
from llmroute.gate.pick import resolve
from llmroute.gate.rules import RulesClassifier
from llmroute.gate.verdict import (
    combine,
    first_stage,
    make_intent,
    nothing_intent,
    override,
    structure_vector,
)
from llmroute.gate.win import WinHead, dense_features
from llmroute.types import ChatRequest, Intent, Win

_log = structlog.get_logger("llmroute.gate")


@dataclass(frozen=True, slots=True)
class _Scored:
    """The model's (cacheable) answer: probabilities, complexity, source and the labels of
    the instruction's clauses (``clauses.py``; empty when it has none), and the encoder's
    ``embedding`` of the latest turn when it was asked (handed on in ``Intent.embedding``)."""

    probs: np.ndarray
    complexity: float
    source: str
    clauses: tuple[str | None, ...] = ()
    embedding: np.ndarray | None = None
    wins: tuple[Win, ...] = ()


class SemanticGate:
    """The default ``Gate`` (see the module docstring and ``protocol.Gate``).

    ``examples`` (default: the shipped utterances plus ``cfg.utterances``) are what the heads
    fit on; ``encoder_folder`` overrides the exported model's folder (default: export on
    first start, cached); ``clock`` (seconds) drives the cache's TTL; ``model`` is an already
    fitted ``GateModel`` to use instead of fitting (``load`` then only adopts it); ``pools``:
    the configured pools (a win head fitted for others is ignored with one warning).
    Construction does no I/O and raises ConfigError for bad override rules.
    """

    def __init__(self, cfg: GateConfig, *, examples: Sequence[tuple[str, str]] | None = None,
                 encoder_folder: Path | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 model: GateModel | None = None, pools: Sequence[str] = ()) -> None:
        self.cfg = cfg
        self._examples = examples
        self._folder = encoder_folder
        labels = tuple(dict.fromkeys([*INTENTS, *cfg.utterances]))
        self.overrides = RuleOverrides(cfg.rules, labels)
        self._rules = RulesClassifier()
        self._complexity = ComplexityScorer()
        self.health = GateHealth("encoder", "model")
        self._encoder_health = self.health.stages["encoder"]
        self._model_health = self.health.stages["model"]
        self._cache: TTLCache[str, _Scored] = TTLCache(max(cfg.cache_size, 1), cfg.cache_ttl_s,
                                                       timer=clock)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmroute-gate")
        self._batcher: MicroBatcher | None = None
        self.model: GateModel | None = None
        self._preset = model
        self._pools = tuple(pools)
        self.win: WinHead | None = None

    @property
    def ready(self) -> bool:
        """True once the heads are fitted."""
        return self.model is not None

    def load(self) -> GateModel:
        """Fit the heads and load the fine-tuned encoder (``pick.resolve``). Blocking; a
        missing or damaged encoder leaves the first stage alone. The fitted heads are cached on disk
        (``heads_cache``; in ``cfg.cache_dir``, default ``$LLMROUTE_CACHE/gate``) for the
        default examples, and for given ``examples`` when ``cfg.cache_dir`` is set. Raises
        ConfigError for unusable examples."""
        if self._preset is not None:
            self.model = self._preset
            self.win = self._win_head(self.model)
            return self.model
        examples = self._examples or with_extras(
            [*shipped_utterances(), *user_examples()], self.cfg.utterances)
        folder = self._folder
        if folder is None and self.cfg.encoder:
            try:
                folder = resolve()
            except LLMRouteError as err:
                _log.warning("gate encoder unavailable; first stage only", error=err.message)
        cache = self.cfg.cache_dir or self._examples is None
        model = build_model(examples, folder, cache_dir=heads_dir(self.cfg.cache_dir)
                            if cache else None)
        self.win = self._win_head(model)
        self.model = model
        return model

    def _win_head(self, model: GateModel) -> WinHead | None:
        """The configured win head (``win_store.fit_router``), or None: none configured, or
        (one warning) a bad outcome file or a head that cannot serve these pools."""
        router = self.cfg.router
        if router is None:
            return None
        from llmroute.gate.win_store import fit_router
        try:
            head, _ = fit_router(model, Path(router.data), router.pools,
                                 heads_dir(self.cfg.cache_dir))
        except LLMRouteError as err:
            _log.warning("gate win head unavailable; routing without it", error=err.message)
            return None
        why = head.usable_with(self._pools or head.pools, model.classes, None)
        if why is not None:
            _log.warning("gate win head ignored", reason=why)
            return None
        return head

    async def start(self) -> None:
        """Fit and load in the gate's worker thread."""
        model = await asyncio.get_running_loop().run_in_executor(self._executor, self.load)
        if model.encoder is not None:
            self._batcher = MicroBatcher(model.encoder.encode, max_wait_ms=self.cfg.max_wait_ms,
                                         max_batch=self.cfg.max_batch, executor=self._executor)

    def replace_rules(self, rules: Mapping[str, Sequence[str]]) -> None:
        """Swap in new override rules (``RuleOverrides.replace``: a bad set raises
        ConfigError and keeps the old one); cached answers get the new rules too."""
        self.overrides.replace(rules)

    async def close(self) -> None:
        """Release the worker thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def classify(self, request: ChatRequest) -> Intent:
        """The request's ``Intent``: ``label`` one of the model's classes, ``confidence`` and
        ``conflict`` in [0, 1], ``runners_up`` sorted by probability, ``complexity`` in
        [0.1, 5.0]. The encoder, when asked, runs micro-batched in the worker thread. Never
        raises (tolerated failures: module docstring)."""
        try:
            c, first = self._prepare(request)
            intent = first if isinstance(first, Intent) else self._finish(
                c, self._second(c, first, await self._embed(c)))
        except Exception as err:  # noqa: BLE001 - counted, logged when the state changes
            self._model_health.failed(err)
            return self._fallback(request)
        self._model_health.ok()
        return intent

    def _prepare(self, request: ChatRequest
                 ) -> tuple[Compressed, Intent | tuple[_Scored, ChatRequest]]:
        """Compression and the first stage: the final Intent, or what the encoder must
        settle (the second opinion)."""
        c = compress(request)
        if c.empty or self.model is None:
            return c, self._early(c, request)
        scored = self._cache.get(c.key)
        if scored is None:
            self.health.cache_misses += 1
            scored = self._first(c, request)
        else:
            self.health.cache_hits += 1
        if isinstance(scored, _Scored):
            return c, self._finish(c, scored)
        return c, scored

    def _early(self, c: Compressed, request: ChatRequest) -> Intent:
        """Nothing to classify → the documented default; not started yet → the rules' label
        with the complexity the started gate gives."""
        if c.empty:
            return nothing_intent("semantic")
        level = self._level(c, request, self._rules.scores(request, c.text))
        return replace(self._rules.intent(request), complexity=level)

    def _level(self, c: Compressed, request: ChatRequest, scores: Mapping[str, float]) -> float:
        """Complexity over the compressed text (``scores``: the rules' over ``c.text``)."""
        return self._complexity.score(c.text, request.prompt_tokens, scores, c.turns)

    def _first(self, c: Compressed, request: ChatRequest) -> _Scored | tuple[_Scored, ChatRequest]:
        """First stage; returns the final answer, or ``(first, request)`` to ask the encoder."""
        assert self.model is not None
        scores = self._rules.scores(request, c.text, c.document)
        if self.win is None:
            fast, halves = self.model.fast_proba(c.text), None
        else:  # the head reads the same hashed n-grams: hashed once
            fast, halves = self.model.fast_scores(c.text)
        p = first_stage(fast, scores, self.model.classes, c)
        parts = clauses(c.latest)
        level = self._level(c, request, scores)
        wins = () if self.win is None else self.win.predict(
            dense_features(None, p, level, c), halves)
        scored = _Scored(p, level, "fast",
                         self.model.clause_labels(parts, CLAUSE_MIN) if parts else (),
                         wins=wins)
        if (p.max() >= self.cfg.second_opinion_below or self.model.encoder is None
                or c.pasted):
            self._cache[c.key] = scored
            return scored
        return scored, request

    def _second(self, c: Compressed, first: tuple[_Scored, ChatRequest],
                embedding: np.ndarray | None) -> _Scored:
        scored = first[0]
        if embedding is None or self.model is None or self.model.embed is None:
            return scored
        p_enc = self.model.encoder_proba(embedding)
        structure = structure_vector(c, self.model.classes)
        final = _Scored(combine(scored.probs, p_enc, structure), scored.complexity,
                        "fast+encoder", scored.clauses, embedding, scored.wins)
        self._cache[c.key] = final
        return final

    async def embed(self, request: ChatRequest) -> np.ndarray | None:
        """The encoder's vector of ``request``'s latest turn (what the second opinion reads:
        ``(d,)`` float32, unit length), for a caller whose verdict carried none (the first
        stage was sure enough); None with nothing to embed, before ``start`` or when the
        encoder fails (counted)."""
        c = compress(request)
        return None if c.empty else await self._embed(c)

    async def _embed(self, c: Compressed) -> np.ndarray | None:
        """The encoder's embedding of ``c.latest`` ``(384,)``, micro-batched in the worker thread;
        None before ``start`` or when the encoder fails (counted, logged by state)."""
        if self._batcher is None:
            return None
        try:
            row = await self._batcher.submit(c.latest)
        except Exception as err:  # noqa: BLE001 - tolerated: the first stage answers alone
            self._encoder_health.failed(err)
            return None
        self._encoder_health.ok()
        return row

    def _finish(self, c: Compressed, scored: _Scored) -> Intent:
        assert self.model is not None
        p, source = scored.probs, scored.source
        rule = self.overrides.match(c.text)
        if rule is not None and rule in self.model.classes:
            p, source = override(p, self.model.classes, rule), source + "+rule"
        intent = make_intent(p, self.model.classes, scored.complexity, source,
                             self.cfg.composite_margin)
        if scored.embedding is not None:
            intent = replace(intent, embedding=scored.embedding)
        if scored.wins:
            intent = replace(intent, wins=scored.wins)
        if intent.composite or not scored.clauses:
            return intent
        return replace(intent, composite=composite_of(intent.label, scored.clauses))

    def _fallback(self, request: ChatRequest) -> Intent:
        """The rules' verdict after a model-path failure (already counted)."""
        try:
            return self._rules.intent(request)
        except Exception as again:  # noqa: BLE001 - logged; last resort: the documented default
            _log.error("gate rules failed", error=repr(again))
            return nothing_intent("rules")

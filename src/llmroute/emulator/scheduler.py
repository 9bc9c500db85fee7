"""The continuous-batching scheduler: a pure, synchronous state machine over model time.

It follows vLLM's V1 scheduler (``vllm/v1/core/sched/scheduler.py``) in the parts that
shape latency and load:

- one token budget per step (``max_batched_tokens``) shared by every scheduled sequence;
  running sequences come first (each decoding sequence needs one token), prompts are
  prefilled in chunks of what is left of the budget (chunked prefill), then waiting
  sequences are admitted first-come first-served while the budget, ``max_num_seqs`` and free
  KV blocks allow (a waiting head that does not fit blocks the queue);
- a paged KV cache of ``total_blocks`` blocks of ``block_size`` tokens; a sequence holds
  ⌈tokens computed / block_size⌉ blocks;
- preemption by recompute: when a running sequence needs a block and none is free, the most
  recently admitted running sequence loses its blocks and goes back to the head of the
  waiting queue; its prompt and the tokens generated so far are prefilled again later. No
  new sequence is admitted in a step that preempted;
- automatic prefix caching (``prefix_caching``, on by default as in vLLM V1): a sequence
  that carries its prompt's block ``hashes`` starts from the longest cached run of them
  (those tokens count as computed, so its prefill pays only for the rest) and caches its
  full prompt blocks as they are computed; blocks no sequence holds stay cached until a
  new block needs their room, least recently freed first (``emulator/prefix.py``).

Requests that can never run are refused on arrival with a ``Rejection``: prompt + max tokens
over ``max_model_len`` (400, as vLLM), or a full waiting queue when ``max_waiting`` is set
(503, an admission limit like SGLang's ``--max-queued-requests``). The emulator has no
EOS: every sequence generates exactly ``max_tokens`` tokens (as vLLM with ``ignore_eos``).

Invariant (tested): blocks in use never exceed ``total_blocks``. Times are model seconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from llmroute.emulator.perf import PerfModel
from llmroute.emulator.prefix import Match, PrefixCache

NO_MATCH = Match(0, 0)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Limits: ``max_num_seqs`` running sequences, ``max_batched_tokens`` tokens per step,
    ``total_blocks`` KV blocks of ``block_size`` tokens, ``max_model_len`` tokens per
    sequence (prompt + output), ``max_waiting`` queued sequences (None: unbounded);
    ``prefix_caching`` keeps and reuses prompt blocks by hash."""

    total_blocks: int
    max_model_len: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_batched_tokens: int = 4096
    max_waiting: int | None = None
    prefix_caching: bool = True


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a request was refused: HTTP ``status``, OpenAI error ``code`` and ``message``."""

    status: int
    code: str
    message: str


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine (mutable, owned by the scheduler). ``computed`` tokens
    have KV in cache; ``generated`` output tokens were sampled; ``arrival`` model seconds;
    ``hashes`` the chained hashes of its prompt's full blocks (``blocks.py``; empty: nothing
    to share), ``held`` those of its blocks the prefix cache holds for it. Compared by
    identity."""

    id: str
    prompt_tokens: int
    max_tokens: int
    arrival: float
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    first_token_at: float | None = None
    aborted: bool = False
    hashes: tuple[int, ...] = ()
    held: list[int] = field(default_factory=list)

    @property
    def pending(self) -> int:
        """Tokens to compute before the next token can be sampled (prompt, or 1 to decode)."""
        return self.prompt_tokens + self.generated - self.computed


@dataclass(frozen=True, slots=True)
class Batch:
    """One planned step: ``(sequence, tokens)`` pairs, starting at ``start`` and lasting
    ``duration`` model seconds."""

    entries: tuple[tuple[Sequence, int], ...]
    start: float
    duration: float

    @property
    def end(self) -> float:
        """Model time at which the step's tokens exist."""
        return self.start + self.duration


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A sequence sampled a token at ``at`` (model s): ``generated`` so far, ``first`` for
    its first token (TTFT = at − arrival), ``finished`` when it reached ``max_tokens``."""

    seq_id: str
    generated: int
    at: float
    arrival: float
    prompt_tokens: int
    first: bool
    finished: bool


class Scheduler:
    """Continuous batching over a paged KV cache (see the module docstring)."""

    def __init__(self, config: SchedulerConfig, perf: PerfModel):
        self.config = config
        self.perf = perf
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.used_blocks = 0
        self.preemptions = 0
        self.cache = PrefixCache(config.block_size) if config.prefix_caching else None

    @property
    def kv_usage(self) -> float:
        """Fraction 0–1 of KV blocks in use."""
        return self.used_blocks / self.config.total_blocks

    def idle(self) -> bool:
        """True when nothing is running or waiting."""
        return not self.running and not self.waiting

    def add(self, seq: Sequence) -> Rejection | None:
        """Queue ``seq``; returns a Rejection (and queues nothing) when it cannot be served."""
        total = seq.prompt_tokens + seq.max_tokens
        if total > self.config.max_model_len:
            return Rejection(400, "context_length_exceeded",
                             f"This model's maximum context length is "
                             f"{self.config.max_model_len} tokens. However, you requested "
                             f"{total} tokens ({seq.prompt_tokens} in the messages, "
                             f"{seq.max_tokens} in the completion).")
        limit = self.config.max_waiting
        if limit is not None and len(self.waiting) >= limit:
            return Rejection(503, "engine_overloaded",
                             f"the engine's waiting queue is full ({limit} requests)")
        self.waiting.append(seq)
        return None

    def abort(self, seq_id: str) -> bool:
        """Drop a sequence (client gone); frees its blocks. True if it was known."""
        for queue in (self.running, self.waiting):
            for seq in queue:
                if seq.id == seq_id:
                    queue.remove(seq)
                    self._free(seq)
                    seq.aborted = True
                    return True
        return False

    def schedule(self, now: float) -> Batch | None:
        """Plan the next step starting at ``now`` and reserve its KV blocks; None if idle."""
        budget = self.config.max_batched_tokens
        entries: list[tuple[Sequence, int]] = []
        budget, preempted = self._schedule_running(entries, budget)
        if not preempted:
            self._admit_waiting(entries, budget)
        if not entries:
            return None
        return Batch(tuple(entries), now, self._duration(entries))

    def complete(self, batch: Batch) -> list[TokenEvent]:
        """Apply a planned step: tokens computed, tokens sampled, finished sequences freed.
        Sequences aborted while the step ran are skipped."""
        events = []
        for seq, n in batch.entries:
            if seq.aborted:
                continue
            seq.computed += n
            if self.cache is not None and seq.hashes:
                self._cache_blocks(seq, seq.computed - n)
            if seq.pending == 0:
                events.append(self._sample(seq, batch.end))
        return events

    def _schedule_running(self, entries: list[tuple[Sequence, int]], budget: int
                          ) -> tuple[int, bool]:
        preempted = False
        for i, seq in enumerate(list(self.running)):
            if budget == 0 or i >= len(self.running):
                break  # out of budget, or this one and the rest were preempted (from the tail)
            n = min(seq.pending, budget)
            fits, victims = self._make_room(seq, n)
            preempted = preempted or victims > 0
            if fits:
                self._reserve(seq, n)
                entries.append((seq, n))
                budget -= n
        return budget, preempted

    def _make_room(self, seq: Sequence, n: int) -> tuple[bool, int]:
        """Preempt the latest-admitted running sequences until ``seq`` can grow by ``n``."""
        victims = 0
        while not self._can_grow(seq, n):
            victim = self.running.pop()
            self._preempt(victim)
            victims += 1
            if victim is seq:
                return False, victims
        return True, victims

    def _admit_waiting(self, entries: list[tuple[Sequence, int]], budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            hit = self._lookup(seq)
            n = min(seq.pending - hit.blocks * self.config.block_size, budget)
            extra = self._blocks_for(hit.blocks * self.config.block_size + n) - hit.blocks
            if extra + hit.revived > self.config.total_blocks - self.used_blocks:
                return
            self.waiting.popleft()
            self.running.append(seq)
            self._attach(seq, hit)
            self._reserve(seq, n)
            entries.append((seq, n))
            budget -= n

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _can_grow(self, seq: Sequence, n: int) -> bool:
        extra = self._blocks_for(seq.computed + n) - seq.blocks
        return extra <= self.config.total_blocks - self.used_blocks

    def _reserve(self, seq: Sequence, n: int) -> None:
        blocks = self._blocks_for(seq.computed + n)
        new = blocks - seq.blocks
        if self.cache is not None:  # take empty blocks first, then evict cached free ones
            empty = self.config.total_blocks - self.used_blocks - self.cache.free_cached
            if new > empty:
                self.cache.evict(new - empty)
        self.used_blocks += new
        seq.blocks = blocks

    def _free(self, seq: Sequence) -> None:
        private = seq.blocks - len(seq.held)
        unheld = self.cache.release(seq.held) if self.cache is not None else 0
        self.used_blocks -= private + unheld
        seq.blocks = 0

    def _lookup(self, seq: Sequence) -> Match:
        """The cached leading blocks a waiting sequence would start from (none without a
        prefix cache, or for a sequence that has computed tokens already)."""
        if self.cache is None or seq.computed or not seq.hashes:
            return NO_MATCH
        return self.cache.match(seq.hashes, seq.prompt_tokens)

    def _attach(self, seq: Sequence, hit: Match) -> None:
        """Admit ``seq`` onto its cached prefix ``hit``: its blocks held, its tokens
        computed; the query and the hit counted."""
        if self.cache is None or seq.computed:
            return
        seq.held = self.cache.acquire(seq.hashes, seq.prompt_tokens)
        self.used_blocks += hit.revived
        seq.blocks = len(seq.held)
        seq.computed = seq.blocks * self.config.block_size

    def _cache_blocks(self, seq: Sequence, before: int) -> None:
        """Cache the prompt blocks ``seq`` filled since it had ``before`` tokens computed."""
        size, total = self.config.block_size, len(seq.hashes)
        start, end = min(before // size, total), min(seq.computed // size, total)
        if end > start:
            self.cache.store(seq.hashes, start, end, seq.held)  # type: ignore[union-attr]

    def _preempt(self, seq: Sequence) -> None:
        self._free(seq)
        seq.computed = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def _duration(self, entries: list[tuple[Sequence, int]]) -> float:
        flops = sum(self.perf.chunk_flops(seq.computed, n) for seq, n in entries)
        kv_read = sum(seq.computed + n for seq, n in entries)
        return self.perf.step_time(flops, kv_read)

    def _sample(self, seq: Sequence, at: float) -> TokenEvent:
        seq.generated += 1
        first = seq.first_token_at is None
        if first:
            seq.first_token_at = at
        finished = seq.generated >= seq.max_tokens
        if finished:
            self.running.remove(seq)
            self._free(seq)
        return TokenEvent(seq.id, seq.generated, at, seq.arrival, seq.prompt_tokens,
                          first, finished)

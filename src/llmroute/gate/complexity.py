"""Complexity score 0.1–5.0: how hard the request is, from counted evidence. One formula
for every gate: the rules gate feeds it its inspected window (``rules.inspected_text``), the
semantic gate the compressed text (``compress``), each with the rules' scores over that text.

Formula::

    0.1
    + 0.35 · log2(1 + tokens / 50)          prompt length in tokens
    + 0.15 · tasks + 0.3 · max(tasks − 1, 0)  distinct task verbs (≤ 5); several tasks in one
                                              request compound
    + 0.25 · min(constraints, 8)            constraint words (must, at least, 不超过, …)
    + 1.2  · min(advanced, 3)               distinct advanced-topic terms (Transformer,
                                              gradients, distributed, 定理, …)
    + 0.15 · min(code + math evidence, 8)   the rules classifier's code and maths scores
    + 0.2  · min(reasoning evidence, 5)     its reasoning score
    + 0.1  · min(turns − 1, 10)             earlier user turns

clamped to [0.1, 5.0] and rounded to 3 places (negative token or turn counts read as 0 and
1). Source: the seed design's complexity score as documented in docs/gate.md §Complexity;
the weights were set by hand to meet its anchors, "write a bubble sort" ≈ 0.3 and "implement
a Transformer in PyTorch and explain vanishing gradients" ≈ 4.7
(tests/unit/gate/test_parts.py::test_complexity_anchors). It replaced the rules classifier's
own, undocumented formula (length, constraints, code/maths/reasoning and turns only, no task
or advanced-topic terms), so a prompt's complexity no longer depends on which stage
answered. Every term is a non-decreasing function of a count, so adding a constraint, a task
or a turn to a prompt whose text fits the inspected window never lowers the score (two
caveats: past the window the tail shifts, and a long-span keyword pattern such as
``if … then`` may merge two matches).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from llmroute.gate.constants import MAX_COMPLEXITY, MIN_COMPLEXITY
from llmroute.gate.matching import FLAGS, count_distinct, count_matches

MAX_TASKS = 5
MAX_ADVANCED = 3
MAX_CONSTRAINTS = 8

CONSTRAINTS = (
    r"\b(?:must|should|shall|have to|has to|needs? to|at least|at most|no more than|"
    r"no less than|no fewer than|exactly|without|do not|don't|never|always|avoid|ensure|"
    r"make sure|required?|requirements?|limit(?:ed)? to|within|strictly|only use)\b"
    r"|必须|应该|应当|需要|至少|至多|最多|不超过|不少于|不要|不能|不得|不可|禁止|避免|务必|"
    r"确保|只能|仅限|限制|以内|严格"
)

TASKS = (
    r"\b(?:write|implement|explain|describe|compare|contrast|analy[sz]e|prove|derive|design|"
    r"build|create|optimi[sz]e|test|debug|refactor|summari[sz]e|translate|list|evaluate|"
    r"discuss|calculate|compute|solve|justify|benchmark|plot|visuali[sz]e|deploy)\b"
    r"|写|实现|解释|说明|比较|分析|证明|推导|设计|构建|优化|测试|调试|总结|翻译|列出|评估|讨论|"
    r"计算|求解|部署"
)
ADVANCED = (
    r"\b(?:transformers?|attention mechanism|self-attention|pytorch|tensorflow|jax|cuda|"
    r"gradients?|backprop(?:agation)?|neural networks?|deep learning|reinforcement learning|"
    r"distributed|consensus|raft|paxos|compilers?|interpreter|kernel|concurren(?:cy|t)|"
    r"lock-free|multi-?thread(?:ed|ing)?|theorem|eigen\w*|fourier|differential equations?|"
    r"stochastic|bayesian|cryptograph\w*|quantum|relativity|topology|dynamic programming|"
    r"red-black tree|b-tree|transaction isolation|garbage collect\w*|memory model|"
    r"operating system|scheduler|simd|gpu|asymptotic|np-hard|lagrangian|hamiltonian|"
    r"fine-tun\w+|llm|diffusion model)\b"
    r"|神经网络|梯度|反向传播|分布式|并发|多线程|编译器|操作系统|定理|微分方程|贝叶斯|加密算法|量子|"
    r"相对论|拓扑|动态规划|注意力机制|微服务|一致性协议|死锁|内存模型|红黑树|深度学习|强化学习|大模型|"
    r"傅里叶|特征值"
)


@dataclass(frozen=True, slots=True)
class Evidence:
    """Counts the formula reads: ``tokens`` (prompt tokens), ``tasks``, ``constraints``,
    ``advanced`` terms, ``code_math`` and ``reasoning`` evidence (rules scores), ``turns``."""

    tokens: int
    tasks: int
    constraints: int
    advanced: int
    code_math: float
    reasoning: float
    turns: int


class ComplexityScorer:
    """Counts the evidence in a text and applies the formula (module docstring)."""

    def __init__(self) -> None:
        self._tasks = re.compile(TASKS, FLAGS)
        self._constraints = re.compile(CONSTRAINTS, FLAGS)
        self._advanced = re.compile(ADVANCED, FLAGS)

    def evidence(self, text: str, tokens: int, scores: Mapping[str, float],
                 turns: int) -> Evidence:
        """The formula's inputs for inspected ``text`` (``scores``: rules scores by intent)."""
        return Evidence(
            tokens=max(tokens, 0),
            tasks=count_distinct(self._tasks, text, MAX_TASKS),
            constraints=count_matches(self._constraints, text, MAX_CONSTRAINTS),
            advanced=count_distinct(self._advanced, text, MAX_ADVANCED),
            code_math=scores.get("code", 0.0) + scores.get("math", 0.0),
            reasoning=scores.get("reasoning", 0.0),
            turns=max(turns, 1),
        )

    def score(self, text: str, tokens: int, scores: Mapping[str, float], turns: int) -> float:
        """Complexity in [0.1, 5.0] for ``text`` (see ``evidence``)."""
        return formula(self.evidence(text, tokens, scores, turns))


def formula(e: Evidence) -> float:
    """The module docstring's formula over ``e``, clamped to [0.1, 5.0], 3 places; total
    over any counts (negative tokens read as 0, turns below 1 as 1)."""
    value = (
        MIN_COMPLEXITY
        + 0.35 * math.log2(1 + max(e.tokens, 0) / 50)
        + 0.15 * e.tasks + 0.3 * max(e.tasks - 1, 0)
        + 0.25 * min(e.constraints, MAX_CONSTRAINTS)
        + 1.2 * min(e.advanced, MAX_ADVANCED)
        + 0.15 * min(e.code_math, 8.0)
        + 0.2 * min(e.reasoning, 5.0)
        + 0.1 * min(max(e.turns - 1, 0), 10)
    )
    return round(min(max(value, MIN_COMPLEXITY), MAX_COMPLEXITY), 3)

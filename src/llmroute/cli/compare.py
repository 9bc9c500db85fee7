"""``llmroute strategy compare --url URL``: each split or shadow strategy's arms side by
side (requests, error rate, P95 latency, quality) from ``GET /debug/strategies``, and
whether the rollout rule holds for its candidate arm against its baseline: P95 latency up
by less than 15 %, an error rate not higher and — only where both arms' answers say whether
they were verified — a quality (verified share) drop under 3 points; otherwise "no quality
signal". ``LLMROUTE_ADMIN_KEY`` is sent as the bearer key when set. Exit 0 when the rule
holds for every trial, 1 when it fails (or an arm has no latency yet), 2 when the router
cannot be reached.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

P95_RISE = 0.15
"""The largest P95 latency increase (fraction) the rollout rule allows."""
QUALITY_DROP = 0.03
"""The largest quality (verified share) drop the rollout rule allows."""


def compare(url: str) -> int:
    """Fetch ``{url}/debug/strategies``, print the comparison; the exit code (module
    docstring)."""
    target = url.rstrip("/") + "/debug/strategies"
    key = os.environ.get("LLMROUTE_ADMIN_KEY")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(target, headers=headers),  # noqa: S310
                                    timeout=10) as resp:
            trials = json.loads(resp.read()).get("trials") or {}
    except (OSError, ValueError) as err:  # URLError/HTTPError are OSErrors
        print(f"llmroute strategy compare: GET {target}: {err}", file=sys.stderr)
        return 2
    if not trials:
        print("no split or shadow strategy is loaded")
        return 0
    verdicts = [render(sid, trial) for sid, trial in trials.items()]
    print("\n\n".join(text for text, _ in verdicts))
    return 0 if all(ok for _, ok in verdicts) else 1


def render(strategy_id: str, trial: dict[str, Any]) -> tuple[str, bool]:
    """The table of one trial's arms and its verdict line; whether the rule holds."""
    arms = trial["arms"]
    lines = [f"{strategy_id} ({trial['kind']})",
             f"  {'arm':<24} {'role':<10} {'requests':>8} {'errors':>7} {'err rate':>9} "
             f"{'p95 ms':>10} {'quality':>8}"]
    for name, a in arms.items():
        lines.append(f"  {name:<24} {a['role']:<10} {a['requests']:>8} {a['errors']:>7} "
                     f"{a['error_rate']:>9.2%} {_num(a['p95_ms'], '.1f'):>10} "
                     f"{_num(a['quality'], '.1%'):>8}")
    base = next(a for a in arms.values() if a["role"] == "baseline")
    cand = next(a for a in arms.values() if a["role"] == "candidate")
    ok, reasons = rollout(base, cand)
    lines.append(f"  rollout rule {'holds' if ok else 'FAILS'}: {'; '.join(reasons)}")
    return "\n".join(lines), ok


def rollout(base: dict[str, Any], cand: dict[str, Any]) -> tuple[bool, list[str]]:
    """Whether the candidate arm ``cand`` may replace ``base`` (module docstring), and one
    reason per condition."""
    if base["p95_ms"] is None or cand["p95_ms"] is None:
        return False, ["no latency measured yet for both arms"]
    rise = cand["p95_ms"] / base["p95_ms"] - 1 if base["p95_ms"] > 0 else 0.0
    checks = [(rise < P95_RISE, f"P95 {rise:+.1%} (limit +{P95_RISE:.0%})"),
              (cand["error_rate"] <= base["error_rate"],
               f"error rate {cand['error_rate']:.2%} vs {base['error_rate']:.2%}")]
    if base["quality"] is None or cand["quality"] is None:
        reasons = [text for _, text in checks] + ["no quality signal"]
    else:
        drop = base["quality"] - cand["quality"]
        checks.append((drop < QUALITY_DROP, f"quality {-drop:+.1%} (limit "
                       f"-{QUALITY_DROP:.0%})"))
        reasons = [text for _, text in checks]
    return all(ok for ok, _ in checks), reasons


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)

"""Text a fallback repeats at a seam: what to drop from the start of its answer.

After a handoff the next backend may repeat text the client already has, in two ways:

* an **echo** — an engine that repeats the assistant prefix it was given (llama.cpp) before
  its continuation: exactly that prefix (``echo``), always dropped;
* a **restart** — a backend continued in the generic form (a chat API asked, by instruction,
  to continue: ``fuse/handoff.py``) whose model ignores the instruction, either starting the
  answer over ("The capital of France is Paris" after "…France is" was streamed) or repeating
  the last words before going on ("France is Paris"). Only such backends are checked
  (``prior`` is then the text streamed so far): an engine that continues from the tokens
  themselves (``continue_final_message``, a prefill) cannot restart, and whatever it repeats
  is its own answer.

The rule, applied once per handoff to the fallback's first text (``held``):

1. ``held`` starts with the whole echo, or with the whole of ``prior`` (a restart) →
   that is dropped.
2. Otherwise (restarts only) the longest overlap — a tail of ``prior`` of at least
   ``MIN_OVERLAP`` characters that begins at a word boundary, looked for in the last
   ``TAIL`` characters, and that ``held`` starts with — is dropped.
3. Otherwise ``held`` goes out unchanged. A restart in other words ("The French capital is
   Paris") cannot be spliced and is not detected.

While ``held`` could still grow into a longer repeat (``pending``) the seam holds it back;
the answer's end decides with what was held (``final``: a fallback whose whole answer
repeats text the client has sends nothing).
"""

from __future__ import annotations

MIN_OVERLAP = 8
"""Characters a repeated tail must have to count (shorter ones are too likely to be a real
continuation that happens to repeat a word)."""
TAIL = 400
"""Characters at the end of the streamed text searched for a repeated tail."""


def pending(held: str, echo: str, prior: str) -> bool:
    """True while ``held`` (the fallback's text so far) could still grow into a longer
    repeat: it is a strict start of ``echo`` or of ``prior``, or it occurs in ``prior``'s
    tail at a word boundary with at least ``MIN_OVERLAP`` characters of ``prior`` after that
    point, and does not reach its end."""
    if any(len(held) < len(ref) and ref.startswith(held) for ref in (echo, prior) if ref):
        return True
    if not prior:
        return False
    j = prior.find(held, max(0, len(prior) - TAIL))
    while j != -1 and len(prior) - j >= MIN_OVERLAP:
        if j + len(held) < len(prior) and _boundary(prior, j):
            return True
        j = prior.find(held, j + 1)
    return False


def new_text(held: str, echo: str, prior: str, final: bool = False) -> str:
    """``held`` without what it repeats (the rule in the module docstring). With ``final``
    (the fallback's answer ended) a ``held`` that is wholly a start of ``echo`` or ``prior``
    is all repeat: ``""``."""
    for ref in sorted((r for r in (echo, prior) if r), key=len, reverse=True):
        if held.startswith(ref):
            return held[len(ref):]
        if final and ref.startswith(held):
            return ""
    return held[tail_overlap(prior, held):] if prior else held


def tail_overlap(prior: str, text: str) -> int:
    """The length of the longest tail of ``prior`` (at least ``MIN_OVERLAP`` characters,
    at most ``TAIL``, beginning at a word boundary) that ``text`` starts with; 0 when none."""
    for k in range(min(len(prior), len(text), TAIL), MIN_OVERLAP - 1, -1):
        j = len(prior) - k
        if prior.endswith(text[:k]) and _boundary(prior, j):
            return k
    return 0


def _boundary(text: str, j: int) -> bool:
    """True when position ``j`` of ``text`` does not fall inside a word."""
    return j == 0 or not (text[j - 1].isalnum() and text[j].isalnum())

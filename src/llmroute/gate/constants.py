"""The gate's shared numbers: how much text each reader inspects, when a request counts as
multi-turn, and the verdict's shape. One home, so two readers never share a name for
different values.

Text windows (characters). Two readers, two windows, on purpose:

- the **rules** classifier (``rules.inspected_text``) counts keyword evidence over the whole
  request text (every message) — its first ``RULES_HEAD_CHARS`` and last
  ``RULES_TAIL_CHARS``: evidence is counted, so a wide window sees more of it, and regex
  scanning stays bounded for a huge prompt;
- **compression** (``compress.compress``) builds what the n-gram head and the encoder read (both
  fitted on short utterances): the latest user turn cut to its first ``LATEST_HEAD_CHARS``
  and last ``LATEST_TAIL_CHARS`` (the seed design: a request around a pasted document states
  its task at the start or the end), each of the ``EARLIER_TURNS`` earlier user turns to
  ``EARLIER_CHARS``, and every turn first to ``SCAN_HEAD_CHARS`` + ``SCAN_TAIL_CHARS``, so a
  1 MB prompt costs what a 12 kB one does.

User turns. Also two values, on purpose:

- ``RULES_CHAT_MIN_TURNS`` (3): from this many turns the rules add ``chat`` keyword-scale
  evidence (``rules.MULTI_TURN_WEIGHT``);
- ``FOLLOW_UP_MIN_TURNS`` (2): a request with this many user turns is a follow-up, and the
  first stage's structure terms apply (``verdict.structure_terms``: chat +1, task intents
  −3 without a supplied document).

Both feed the semantic gate (the rules' scores are one of its inputs), so unifying them
would move its verdicts.
"""

from __future__ import annotations

RULES_HEAD_CHARS = 4000
RULES_TAIL_CHARS = 2000
LATEST_HEAD_CHARS = 512
LATEST_TAIL_CHARS = 256
EARLIER_CHARS = 128
EARLIER_TURNS = 2
SCAN_HEAD_CHARS = 8_000
SCAN_TAIL_CHARS = 4_000

RULES_CHAT_MIN_TURNS = 3
FOLLOW_UP_MIN_TURNS = 2

MIN_COMPLEXITY = 0.1
MAX_COMPLEXITY = 5.0
RUNNERS_UP = 3
DEFAULT_PRIOR = 0.5
"""The rules' raw score of ``intents.DEFAULT_INTENT`` before any evidence (every other
intent starts at 0), so no evidence means chat."""

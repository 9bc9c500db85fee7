"""Text helpers shared by the policy, the gate and the emulator: the CJK ranges and the
prompt-size estimate in tokens, without a tokenizer.

A deliberately conservative rule of thumb: English BPE tokenizers average ~4 characters per
token (OpenAI, "What are tokens and how to count them"); we count 1 token per 3 non-CJK
characters, 1.5 per CJK character (byte-level BPE vocabularies trained mostly on English split
a 3-byte CJK character into 1–2 tokens), and 4 tokens of chat-template overhead per message.
Over-estimating sends a borderline prompt to a larger context instead of into an engine error.
"""

from __future__ import annotations

import re

CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
"""Regex character-class ranges of CJK text: kana, CJK ideographs (extension A and the
unified block) and Hangul syllables."""
_CJK = re.compile(f"[{CJK_CHARS}\uf900-\ufaff]")  # plus the compatibility ideographs
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    """Estimated token count of ``text`` (≥ 0)."""
    cjk = 0 if text.isascii() else len(_CJK.findall(text))  # isascii: one C pass, no regex
    other = len(text) - cjk
    return int(cjk * 1.5 + (other + 2) // 3)


def estimate_chat_tokens(texts: list[str]) -> int:
    """Estimated prompt tokens of a chat whose message texts are ``texts``."""
    return sum(estimate_tokens(t) + MESSAGE_OVERHEAD_TOKENS for t in texts)

"""Normalisation and matching of the sensitive-word filter: whole texts, streams split at
any boundary, masks that keep the text's length."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.policy.normalize import Normalizer, fold
from llmroute.policy.scan import TextScan, scan_text
from llmroute.policy.wordlist import ListSpec, Matcher

BOTH = frozenset({"input", "output"})


def matcher(*lists: tuple[str, str, bool, list[str]]) -> Matcher:
    """Lists of (name, action, whole_word, words), words normalised as the loader does."""
    n, words, specs = Normalizer(), {}, []
    for i, (name, action, whole, entries) in enumerate(lists):
        specs.append(ListSpec(name, action, whole, BOTH))  # type: ignore[arg-type]
        for w in entries:
            words.setdefault(n.word(w), []).append(i)
    return Matcher(specs, words)


MASK = matcher(("m", "mask", False, ["bad"]))
BLOCK = matcher(("b", "block", False, ["bad", "量子武器"]))


@pytest.mark.parametrize("text", ["bad", "BAD", "Ｂａｄ", "b\u200bad", "B\u00adA\u200dD",
                                  "ｂＡd"], ids=["plain", "upper", "fullwidth", "zwsp",
                                                 "softhyphen-zwj", "mixed"])
def test_variants_match_and_mask_their_whole_span(text: str) -> None:
    found = scan_text(MASK, Normalizer(), f"a {text}!", "input")
    assert found.text == "a " + "*" * len(text) + "!"
    assert [h.spec.name for h in found.hits] == ["m"]


@pytest.mark.parametrize(("char", "form"), [("Ａ", "a"), ("ß", "ss"), ("ﬁ", "fi"),
                                            ("\u200b", ""), ("\ufeff", ""), ("１", "1"),
                                            ("量", "量")], ids=str)
def test_fold(char: str, form: str) -> None:
    assert fold(char) == form


def test_offsets_map_back_to_the_original() -> None:
    norm, offsets = Normalizer().normalize("Stra\u200bße")
    assert norm == "strasse" and offsets == [0, 1, 2, 3, 5, 5, 6]
    assert Normalizer().normalize("Plain ASCII") == ("plain ascii", None)


@settings(max_examples=300)
@given(st.text(max_size=80))
def test_the_text_alone_is_the_normalised_text_of_the_offsets_path(text: str) -> None:
    n = Normalizer()
    assert n.text(text) == n.normalize(text)[0]


def test_the_text_alone_agrees_on_every_code_point() -> None:
    chars = "".join(chr(c) for c in range(0x20, 0x30000) if not 0xD800 <= c <= 0xDFFF)
    assert Normalizer().text(chars) == "".join(map(fold, chars))


def test_a_phrase_does_not_fire_on_its_prefix() -> None:
    assert scan_text(BLOCK, Normalizer(), "量子计算很有趣, 量子", "input").blocked is None
    hit = scan_text(BLOCK, Normalizer(), "制造量子武器吧", "input")
    assert hit.blocked is not None and hit.text == "制造"


@pytest.mark.parametrize(("text", "masked"), [
    ("an ass.", "an ***."), ("class", "class"), ("ass", "***"), ("ASS_x", "ASS_x"),
    ("(ass)", "(***)"), ("assassin", "assassin")], ids=str)
def test_whole_word_mode(text: str, masked: str) -> None:
    m = matcher(("w", "mask", True, ["ass"]))
    assert scan_text(m, Normalizer(), text, "output").text == masked


def test_directions_are_kept_apart() -> None:
    specs = [ListSpec("in", "block", False, frozenset({"input"}))]
    m = Matcher(specs, {"bad": [0]})
    assert m.longest == {"input": 3, "output": 0}
    assert scan_text(m, Normalizer(), "bad", "output").blocked is None
    assert scan_text(m, Normalizer(), "bad", "input").blocked is not None


def test_flag_reports_once_and_changes_nothing() -> None:
    m = matcher(("f", "flag", False, ["bad"]))
    scan, out, hits = TextScan(m, Normalizer(), "output"), "", 0
    for piece in ["ba", "d b", "a", "d", ""]:
        step = scan.feed(piece, final=piece == "")
        out, hits = out + step.text, hits + len(step.hits)
    assert out == "bad bad" and hits == 2


NOISE = st.text(st.sampled_from("xyz 量子.\u200bＸ,\n"), max_size=40)
VARIANT = st.sampled_from(["bad", "BAD", "Ｂａｄ", "b\u200bad", "bA\u00add"])


def _pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _stream(m: Matcher, pieces: list[str]) -> tuple[str, TextScan, list[int]]:
    scan, out, held = TextScan(m, Normalizer(), "output"), "", []
    for p in pieces:
        step = scan.feed(p)
        out += step.text
        held.append(len(scan._norm))  # noqa: SLF001 (the hold-back bound)
        if scan.done:
            return out, scan, held
    return out + scan.feed("", final=True).text, scan, held


@settings(max_examples=300, deadline=None)
@given(NOISE, NOISE, VARIANT, st.lists(st.integers(0, 200), max_size=12))
def test_a_word_split_anywhere_is_masked(left: str, right: str, word: str,
                                         cuts: list[int]) -> None:
    text = left + word + right
    out, scan, held = _stream(MASK, _pieces(text, cuts))
    assert out == left + "*" * len(word) + right
    assert max(held, default=0) <= scan.hold == 3


@settings(max_examples=300, deadline=None)
@given(NOISE, NOISE, VARIANT, st.lists(st.integers(0, 200), max_size=12))
def test_a_word_split_anywhere_is_blocked(left: str, right: str, word: str,
                                          cuts: list[int]) -> None:
    out, scan, _ = _stream(BLOCK, _pieces(left + word + right, cuts))
    assert scan.done and out == left


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.lists(st.integers(0, 200), max_size=8))
def test_masking_keeps_length_and_other_text(text: str, cuts: list[int]) -> None:
    m = matcher(("m", "mask", False, ["ab", "ß", "量子", "x y"]))
    out, _, _ = _stream(m, _pieces(text, cuts))
    assert len(out) == len(text)
    assert all(o == t or o == "*" for o, t in zip(out, text, strict=True))
    assert out == scan_text(m, Normalizer(), text, "output").text


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("abxy ß量子武器.\u200bＡ_"), max_size=30))
def test_a_clean_text_is_one_no_list_finds_anything_in(text: str) -> None:
    """``Matcher.clean`` (the filter's shortcut) never passes a text a scan would change,
    in either direction, whatever the lists' modes."""
    m = matcher(("m", "mask", False, ["ab", "ß", "量子武器"]), ("w", "block", True, ["xy"]))
    norm = Normalizer().normalize(text)[0]
    if m.clean(norm):
        for direction in ("input", "output"):
            found = scan_text(m, Normalizer(), text, direction)
            assert found.text == text and not found.hits and found.blocked is None
    assert not m.clean("量子武器") and not m.clean("axyb")  # whole-word or not: found
    assert Matcher([], {}).clean(norm)


def test_blank_lines_comments_and_an_all_format_entry(tmp_path) -> None:
    from llmroute.config.filter import WordListConfig
    from llmroute.errors import ConfigError
    from llmroute.policy.wordlist import compile_lists

    good = tmp_path / "good.txt"
    good.write_text("\n# a comment\n  Bad  \n\n量子武器\n", encoding="utf-8")
    cfg = [WordListConfig(name="g", path=str(good))]
    m = compile_lists(cfg, [good], 64, Normalizer())
    assert m.size == 2 and m.longest == {"input": 4, "output": 4}
    bad = tmp_path / "bad.txt"
    bad.write_text("ok\n\u200b\u200d\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.txt:2: entry is empty after normalisation"):
        compile_lists([WordListConfig(name="b", path=str(bad))], [bad], 64, Normalizer())

"""Structural features of a request (pasted material, a supplied document, a label set,
several turns) and how the first stage weighs them; the shipped utterances and our test
prompts (shape, coverage, disjointness); templated and multi-turn prompts end to end."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from llmroute.gate.compress import compress, compress_text, prompt_request, tool_match
from llmroute.gate.examples import read_labelled, shipped_utterances
from llmroute.gate.intents import INTENTS
from llmroute.gate.rules import RulesClassifier
from llmroute.gate.semantic import SemanticGate
from llmroute.gate.verdict import (
    combine,
    first_stage,
    structure_terms,
    structure_vector,
)

DATA = Path(__file__).resolve().parents[2] / "data"
UTTERANCES = (Path(__file__).resolve().parents[3] / "src" / "llmroute" / "gate" / "data"
              / "utterances.jsonl")
TEST_FILES = ("gate_en_test.jsonl", "gate_zh_test.jsonl")
DIALOGUE = "Ann: are we still on for lunch?\nBo: yes, 12:30 at the deli\nAnn: great, see you"
PASSAGE = "The old mill by the river was rebuilt in 1910 after a fire. " * 8


@pytest.mark.parametrize(("text", "pasted", "document", "choices"), [
    ("hi, how are you?", False, False, False),
    (f"Summarize this chat:\n{DIALOGUE}", True, True, False),
    ("小李：在吗\n小王：在\n小李：晚上吃啥\n\n总结一下这段对话", True, True, False),
    ("x " * 1000, True, True, False),
    (f"{PASSAGE}\n\nWhen was the mill rebuilt?", False, True, False),
    (PASSAGE + " When was the mill rebuilt?", False, False, False),
    ("Is this headline about sport or business? Options: sport, business", False, False, True),
    ("类别：体育、财经\n\n这条新闻属于哪一类？", False, False, True),
    ("What are my options for a cheap holiday?", False, False, False),
], ids=["chat", "transcript", "zh-transcript", "long", "passage-and-question",
        "one-paragraph", "options", "zh-categories", "options-word-only"])
def test_compression_notes_pasted_material_documents_and_label_sets(
        text: str, pasted: bool, document: bool, choices: bool) -> None:
    c = compress_text(text)
    assert (c.pasted, c.document, c.choices) == (pasted, document, choices)


def stage(text: str = "", messages: list[dict[str, str]] | None = None) -> dict[str, float]:
    """First-stage probabilities for a uniform n-gram opinion, by intent."""
    request = prompt_request(text, messages)
    c = compress(request)
    scores = RulesClassifier().scores(request, c.text)
    p = first_stage(np.full(len(INTENTS), 1 / len(INTENTS)), scores, INTENTS, c)
    return dict(zip(INTENTS, p, strict=True))


def test_more_turns_favour_chat() -> None:
    one = stage("And the second one?")
    two = stage(messages=[{"role": "user", "content": "Tell me about comets."},
                          {"role": "assistant", "content": "…"},
                          {"role": "user", "content": "And the second one?"}])
    assert two["chat"] > one["chat"]


def test_greetings_inside_a_pasted_transcript_are_not_chat() -> None:
    pasted = stage(f"Hi! Thanks!\n{DIALOGUE}\nBo: bye, thanks\n\nSum it up in one line.")
    own = stage("Hi! Thanks! Bye, thanks")
    assert pasted["chat"] < 0.5 < own["chat"]
    assert pasted["summarization"] > pasted["chat"]


def test_the_whys_of_a_pasted_transcript_are_not_a_puzzle() -> None:
    lines = ["Ana: why did the launch slip?", "Raj: because QA found two bugs",
             "Ana: therefore we move it a week", "What did they say about the launch?"]
    pasted, inline = stage("\n".join(lines)), stage(" ".join(lines))
    assert pasted["reasoning"] < inline["reasoning"]


def test_a_pasted_meeting_full_of_greetings_and_whys_is_neither_chat_nor_a_puzzle() -> None:
    """A transcript is material for a task: its hellos and whys are the speakers' (chat −3,
    reasoning −2), so with no other evidence neither conversation nor a puzzle wins."""
    lines = ["Ana: hi all, good morning!", "Raj: morning! how are you?",
             "Ana: why did the launch slip?", "Raj: because QA found two bugs, why else",
             "Li: thanks, see you tomorrow", "What did they decide about the launch?"]
    p = stage("\n".join(lines))
    assert max(p, key=p.get) not in ("chat", "reasoning")
    assert p["chat"] < 0.05 and p["reasoning"] < 0.15


def test_the_whys_of_a_supplied_review_are_not_reasoning_keywords() -> None:
    """In a supplied text the rules' reasoning keywords (why, because, prove, 为什么) are the
    author's: their evidence is held at the prior, so a review to label that argues "why"
    is not pulled towards reasoning, while the same words as the request itself still are."""
    review = ("I wanted to prove the critics wrong, but I cannot explain why anyone liked this "
              "film: the plot makes no sense because the writers gave up halfway. " * 4)
    supplied = stage(f"{review}\n\nIs this review positive or negative?")
    own = stage("Why does the plot of this film make no sense? Prove it, because I disagree.")
    assert supplied["reasoning"] < 0.1 < own["reasoning"]
    assert RulesClassifier().scores(prompt_request(review))["reasoning"] > 0
    zh = ("我本来想证明影评人错了，可我解释不了为什么有人喜欢这部片子，因为编剧写到一半就放弃了，"
          "所以剧情完全说不通。" * 8)
    assert stage(f"{zh}\n\n这条影评是好评还是差评？")["reasoning"] < 0.1


def test_the_figures_of_a_supplied_article_are_not_maths_keywords() -> None:
    """A supplied article's numbers and percentages are its author's: the rules' maths
    evidence is held at the prior, while the same figures as the request still count."""
    article = ("Sales rose 12 percent to $4 million, and the firm hired 30 more staff; how many "
               "stores it will open next year, and the average price, are still open. " * 4)
    supplied = stage(f"{article}\n\nWhat did the firm say about hiring?")
    own = stage("Sales rose 12 percent to $4 million. How many dollars is the rise?")
    assert supplied["math"] < 0.1 < own["math"]


def test_a_supplied_passage_makes_a_question_less_open_qa() -> None:
    question = "Who rebuilt the mill, and when?"
    separate = stage(f"{PASSAGE}\n\n{question}")
    assert separate["open_qa"] < stage(f"{PASSAGE} {question}")["open_qa"]


def test_a_question_on_a_supplied_passage_is_extraction_even_if_worded_like_open_qa() -> None:
    request = prompt_request(f"{PASSAGE}\n\nAnswer the question: when was the mill rebuilt?")
    c = compress(request)
    p_fast = np.full(len(INTENTS), 0.01)
    p_fast[INTENTS.index("open_qa")], p_fast[INTENTS.index("extraction")] = 0.5, 0.1
    p = dict(zip(INTENTS, first_stage(p_fast / p_fast.sum(), {}, INTENTS, c), strict=True))
    assert c.document and p["extraction"] > p["open_qa"]


def test_a_follow_up_without_a_document_favours_chat_over_task_intents() -> None:
    turns = [{"role": "user", "content": "How do heat pumps work?"},
             {"role": "assistant", "content": "They move heat instead of making it."},
             {"role": "user", "content": "Summarize that in two bullet points."}]
    follow_up, alone = stage(messages=turns), stage(turns[-1]["content"])
    assert follow_up["summarization"] < alone["summarization"]
    assert follow_up["chat"] > alone["chat"]
    pasted = [*turns[:2], {"role": "user", "content": f"Summarize this:\n{DIALOGUE}"}]
    penalised = {label for label, value in structure_terms(compress(prompt_request("", pasted)))
                 if value < 0}
    assert "summarization" not in penalised


def test_the_encoder_opinion_is_taken_under_the_same_structure_terms() -> None:
    """MiniLM reads only the latest turn: a factual follow-up looks like a stand-alone
    open_qa question to it. Under the follow-up's structure terms its opinion no longer
    undoes the first stage's chat verdict; without them it does."""
    turns = [{"role": "user", "content": "Which planet has the most moons?"},
             {"role": "assistant", "content": "Saturn, at last count."},
             {"role": "user", "content": "What is the largest of Saturn's moons?"}]
    c = compress(prompt_request("", turns))
    s = structure_vector(c, INTENTS)
    assert s[INTENTS.index("open_qa")] < 0 < s[INTENTS.index("chat")]
    p_first = np.full(len(INTENTS), 0.02)
    p_first[INTENTS.index("chat")], p_first[INTENTS.index("open_qa")] = 0.45, 0.2
    p_enc = np.full(len(INTENTS), 0.01)
    p_enc[INTENTS.index("open_qa")], p_enc[INTENTS.index("chat")] = 0.9, 0.01
    p_first, p_enc = p_first / p_first.sum(), p_enc / p_enc.sum()
    blind = combine(p_first, p_enc)
    seen = combine(p_first, p_enc, s)
    assert INTENTS[int(np.argmax(blind))] == "open_qa"
    assert INTENTS[int(np.argmax(seen))] == "chat"
    assert np.isclose(seen.sum(), 1.0)
    single = compress_text("What is the largest of Saturn's moons?")
    assert not structure_vector(single, INTENTS).any()


@pytest.mark.parametrize(("names", "text", "match"), [
    (("calculate_integral",), "Find the integral of x^2 from 0 to 1", True),
    (("integrate",), "Use integration to get the area", True),
    (("getWeatherForecast",), "Will it rain in Oslo tomorrow? I need the forecast", True),
    (("CalculateTax",), "Find the integral of x^2", False),
    (("send_email",), "How are you?", False),
    ((), "Find the integral of x^2", False),
], ids=["snake", "stem", "camel", "other-tool", "unrelated", "no-tools"])
def test_tool_names_that_appear_in_the_request_are_noted(
        names: tuple[str, ...], text: str, match: bool) -> None:
    assert tool_match(names, text) is match


def test_a_matching_tool_favours_tool_call_more_than_tools_alone() -> None:
    def p_tool(name: str) -> float:
        tools = [{"type": "function", "function": {"name": name, "parameters": {}}}]
        request = prompt_request("Find the integral of x^2 from 0 to 1", None, tools)
        c = compress(request)
        scores = RulesClassifier().scores(request, c.text)
        p = first_stage(np.full(len(INTENTS), 1 / len(INTENTS)), scores, INTENTS, c)
        return float(p[INTENTS.index("tool_call")])
    assert p_tool("calculate_integral") > p_tool("send_email")


def test_a_label_set_favours_classification() -> None:
    headline = "Headline: 'Club buys new striker'"
    listed = stage(f"{headline}\nOptions: sport, business")
    assert listed["classification"] > stage(f"{headline}\nOptions sport, business")[
        "classification"]


def rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_utterances_cover_every_intent_in_both_languages() -> None:
    counts = Counter((r["intent"], r["lang"]) for r in rows(UTTERANCES))
    assert all(counts[(i, lang)] >= 40 for i in INTENTS for lang in ("en", "zh")), counts
    texts = [text for text, _ in shipped_utterances()]
    assert len(texts) == len(rows(UTTERANCES)) and all(t.strip() for t in texts)


def test_multi_turn_utterances_read_like_a_compressed_chat() -> None:
    chats = [r for r in rows(UTTERANCES) if "messages" in r]
    assert chats
    first = chats[0]
    users = [m["content"] for m in first["messages"] if m["role"] == "user"]
    text = {t for t, _ in shipped_utterances()}
    expected = compress(prompt_request("", first["messages"])).text
    assert expected in text and expected.startswith(users[-1][:40])


@pytest.mark.parametrize("name", TEST_FILES, ids=["en", "zh"])
def test_our_test_prompts_cover_every_intent_and_stay_out_of_the_fitted_set(name: str) -> None:
    examples = read_labelled(DATA / name)
    assert Counter(e.intent for e in examples) == dict.fromkeys(INTENTS, 10)
    fitted = {compress_text(text).text for text, _ in shipped_utterances()}
    assert not [e for e in examples if compress(e.request).text in fitted]


@pytest.mark.parametrize("name", ["gate_en_dev.jsonl", "gate_zh_dev.jsonl"], ids=["en", "zh"])
def test_development_sets_cover_every_intent_apart_from_fitted_and_test_prompts(
        name: str) -> None:
    examples = read_labelled(DATA / name)
    counts = Counter(e.intent for e in examples)
    assert set(counts) == set(INTENTS) and min(counts.values()) >= 8, counts
    texts = [compress(e.request).text for e in examples]
    tests = {compress(e.request).text for f in TEST_FILES for e in read_labelled(DATA / f)}
    fitted = {compress_text(text).text for text, _ in shipped_utterances()}
    assert len(set(texts)) == len(texts)
    assert not (set(texts) & fitted) and not (set(texts) & tests)


@pytest.mark.parametrize(("text", "messages", "label"), [
    (f"Give me a two-line summary of this chat.\n{DIALOGUE}\nBo: ok, bye!", None,
     "summarization"),
    (f"{PASSAGE}\n\nAccording to the text, in which year was the mill rebuilt?", None,
     "extraction"),
    ("Keywords: kite, beach, wind, child\nWrite one sentence that uses every keyword.", None,
     "creative_writing"),
    ("", [{"role": "user", "content": "How do tides work?"},
          {"role": "assistant", "content": "The moon's gravity pulls the oceans."},
          {"role": "user", "content": "Oh nice. And what did you mean by spring tides?"}],
     "chat"),
], ids=["dialogue-summary", "passage-question", "concept-sentence", "follow-up"])
async def test_templated_and_multi_turn_prompts(gate: SemanticGate, text: str,
                                                messages: list[dict[str, str]] | None,
                                                label: str) -> None:
    assert (await gate.classify(prompt_request(text, messages))).label == label


@pytest.mark.parametrize(("text", "label"), [
    ("Since salt lowers the freezing point of water, what do road crews spread on icy streets "
     "in winter?", "open_qa"),
    ("因为盐能降低水的冰点，冬天道路结冰时环卫工人会撒什么？", "open_qa"),
    ('Sort this headline into politics, sport or science: "Why the mayor wants a second bridge"',
     "classification"),
    ("这个标题属于政治、体育还是科学？“为什么市长想再建一座桥”", "classification"),
    ("Noor buys 4 packs of stickers with 25 in each. She gives 18 to her sister and trades a "
     "third of the rest for badges. How many stickers does she keep?", "math"),
    ("小诺买了4包贴纸，每包25张，送给妹妹18张，剩下的三分之一换了徽章。她还剩多少张贴纸？", "math"),
    ("Kai is taller than Ivo, and Ivo is taller than Bea. Is Bea taller than Kai?", "reasoning"),
    ("小凯比小伊高，小伊比小贝高。小贝比小凯高吗？", "reasoning"),
], ids=["en-because-fact", "zh-because-fact", "en-why-headline", "zh-why-headline",
        "en-story-problem", "zh-story-problem", "en-deduction", "zh-deduction"])
async def test_because_and_why_wording_alone_does_not_make_reasoning(gate: SemanticGate,
                                                                      text: str,
                                                                      label: str) -> None:
    """A stated cause in a factual question, a why-headline to label and a narrative word
    problem keep their intents; premises plus a question about what follows is reasoning."""
    assert (await gate.classify(prompt_request(text))).label == label


def test_the_ideas_of_a_supplied_chat_log_are_not_brainstorming_keywords() -> None:
    """A chat log or transcript to summarise that talks about "ideas" and "brainstorming" is
    the speakers' talk: the rules' brainstorming evidence is held at the prior, while the
    same words as the request itself still count."""
    log = "\n".join(["Leo: any ideas for the weekend?", "Jess: let's brainstorm some ideas",
                     "Leo: suggestions welcome, tips for hiking?", "Jess: good idea"] * 3)
    supplied = stage(f"Summarise this dialogue:\n{log}")
    own = stage("Brainstorm some ideas for a weekend trip, any suggestions?")
    assert supplied["brainstorming"] < 0.1 < own["brainstorming"]

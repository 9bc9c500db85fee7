"""RulesClassifier: labels for English and Chinese prompts, structure evidence, complexity,
config overrides, and invariants over arbitrary text."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.errors import ConfigError
from llmroute.gate.complexity import Evidence, formula
from llmroute.gate.constants import RULES_HEAD_CHARS, RULES_TAIL_CHARS
from llmroute.gate.intents import DEFAULT_INTENT, INTENTS
from llmroute.gate.probs import softmax
from llmroute.gate.protocol import Gate
from llmroute.gate.rules import RulesClassifier, RulesGate, inspected_text
from llmroute.gate.verdict import make_intent
from llmroute.types import ChatRequest, Intent


def make_request(
    text: str, *, has_tools: bool = False, turns: int = 1, prompt_tokens: int | None = None
) -> ChatRequest:
    """A chat request as the api layer would build it; tokens ≈ chars / 4 unless given."""
    return ChatRequest(
        endpoint="chat",
        body={},
        model="auto",
        stream=False,
        text=text,
        prompt_tokens=len(text) // 4 if prompt_tokens is None else prompt_tokens,
        max_tokens=None,
        request_id="t",
        has_tools=has_tools,
        turns=turns,
    )


@pytest.fixture(scope="module")
def classifier() -> RulesClassifier:
    return RulesClassifier()


def assert_valid(intent: Intent) -> None:
    """The bounds every Gate's verdict keeps (see gate.protocol)."""
    assert intent.label in INTENTS
    assert 0.0 <= intent.confidence <= 1.0
    assert 0.0 <= intent.conflict <= 1.0
    assert 0.1 <= intent.complexity <= 5.0
    assert intent.source == "rules"
    probs = [p for _, p in intent.runners_up]
    assert probs == sorted(probs, reverse=True)
    assert all(0.0 <= p <= intent.confidence for p in probs)
    assert intent.label not in {label for label, _ in intent.runners_up}


# (id, expected label, has_tools, text)
LABEL_CASES = [
    ("code-en-python-function", "code", False,
     "Write a Python function that reverses a linked list"),
    ("code-zh-quicksort", "code", False, "用Python写一个快速排序"),
    ("code-en-traceback", "code", False,
     "Fix this bug: TypeError: 'NoneType' object is not subscriptable in my script"),
    ("code-en-fence", "code", False,
     'What does this do?\n```js\nconst x = [1,2,3].map(n => n * 2);\n```'),
    ("code-en-sql", "code", False, "Write a SQL query to find the top 5 customers by revenue"),
    ("code-zh-bug", "code", False, "这段代码报错了，帮我看看哪里有bug"),
    ("math-en-linear", "math", False, "Solve for x: 3x + 5 = 20"),
    ("math-en-product", "math", False, "What is 17 * 23?"),
    ("math-en-derivative", "math", False, "Calculate the derivative of x^2 * sin(x)"),
    ("math-en-word-problem", "math", False,
     "If a train travels 60 miles per hour for 2.5 hours, how far does it go?"),
    ("math-zh-multiply", "math", False, "计算 123 乘以 456 等于多少"),
    ("math-zh-equation", "math", False, "解方程：2x + 3 = 11"),
    ("translation-en-french", "translation", False, "Translate 'good morning' into French"),
    ("translation-zh-english", "translation", False, "把这句话翻译成英文：我爱你"),
    ("translation-en-how-say", "translation", False, "How do you say 'thank you' in Japanese?"),
    ("translation-zh-how-say", "translation", False, "“谢谢”用日语怎么说？"),
    ("translation-mixed", "translation", False, "Please 翻译 this sentence into English: 今天天气很好"),
    ("summarization-en", "summarization", False,
     "Summarize the following article: The city council met on Tuesday to discuss the"
     " new budget, which includes funding for parks and roads."),
    ("summarization-zh", "summarization", False, "请总结下面这段文字：今天公司召开了年度大会，会上宣布了新的战略方向。"),
    ("summarization-en-tldr", "summarization", False,
     "TL;DR of this thread please: people argued about tabs versus spaces."),
    ("summarization-zh-one-line", "summarization", False, "用一句话概括这篇文章的主要内容"),
    ("extraction-en-emails", "extraction", False,
     "Extract all the email addresses from this text: contact bob@example.com or"
     " alice@example.org"),
    ("extraction-zh-resume", "extraction", False, "从下面的简历中提取姓名、电话和邮箱：张三，电话13800000000"),
    ("extraction-en-list-all", "extraction", False,
     "List all the names of people mentioned in the following paragraph: Alice met Bob"
     " in Paris."),
    ("classification-en-sentiment", "classification", False,
     "Classify the sentiment of this review as positive or negative: The food was"
     " cold."),
    ("classification-zh-sentiment", "classification", False, "判断这条评论的情感是正面还是负面：服务太差了"),
    ("open-qa-zh-kinds", "open_qa", False, "请分类介绍一下常见的岩石有哪几种"),
    ("open-qa-en-what-noun-did", "open_qa", False,
     "Which river did the Romans cross when the civil war began?"),
    ("chat-zh-afternoon", "chat", False, "中午好呀，吃了没"),
    ("open-qa-zh-how-classified", "open_qa", False, "植物学上如何对蕨类植物进行分类？"),
    ("open-qa-en-compare", "open_qa", False, "Compare and contrast lichens and mosses."),
    ("classification-en-spam", "classification", False,
     "Is this email spam or not? 'You won a free cruise, click here'"),
    ("creative-en-poem", "creative_writing", False, "Write a poem about autumn"),
    ("creative-zh-poem", "creative_writing", False, "写一首关于秋天的诗"),
    ("creative-en-story", "creative_writing", False,
     "Write a short story about a robot who learns to paint"),
    ("creative-zh-novel", "creative_writing", False, "帮我写一篇科幻小说的开头"),
    ("creative-zh-notice", "creative_writing", False,
     "根据以下信息写一封招聘启事：职位：后端工程师；要求：熟悉Java和MySQL；地点：苏州"),
    ("brainstorming-en-party", "brainstorming", False, "Give me 10 ideas for a birthday party"),
    ("brainstorming-zh-names", "brainstorming", False, "帮我头脑风暴一下新产品的名字"),
    ("brainstorming-zh-weekend", "brainstorming", False, "给我几个周末活动的点子"),
    ("brainstorming-en-ways", "brainstorming", False,
     "What are some ways to reduce my electricity bill?"),
    ("reasoning-en-step-by-step", "reasoning", False,
     "Explain step by step why the sky appears blue"),
    ("reasoning-en-syllogism", "reasoning", False,
     "All bloops are razzies and all razzies are lazzies. Are all bloops definitely"
     " lazzies? Think it through logically."),
    ("reasoning-zh-why", "reasoning", False, "为什么冬天比夏天冷？请一步一步推理。"),
    ("reasoning-en-pros-cons", "reasoning", False, "What are the pros and cons of nuclear power?"),
    ("open-qa-en-capital", "open_qa", False, "What is the capital of Australia?"),
    ("open-qa-en-author", "open_qa", False, "Who wrote Pride and Prejudice?"),
    ("open-qa-zh-definition", "open_qa", False, "什么是量子纠缠？"),
    ("open-qa-zh-capital", "open_qa", False, "澳大利亚的首都是哪里？"),
    ("chat-en-greeting", "chat", False, "Hi! How are you today?"),
    ("chat-zh-greeting", "chat", False, "你好，今天过得怎么样？"),
    ("chat-en-roleplay", "chat", False, "Pretend you are a pirate and talk to me like one"),
    ("chat-zh-roleplay", "chat", False, "请扮演一只猫和我聊天"),
    ("tool-call-en-weather", "tool_call", True, "What's the weather in Paris right now?"),
    ("tool-call-zh-weather", "tool_call", True, "帮我查一下北京明天的天气"),
    ("tool-call-en-code-words", "tool_call", True,
     "Write a Python function that reverses a linked list"),
]


@pytest.mark.parametrize(
    ("text", "has_tools", "expected"),
    [(text, has_tools, expected) for _, expected, has_tools, text in LABEL_CASES],
    ids=[case[0] for case in LABEL_CASES],
)
def test_label(classifier: RulesClassifier, text: str, has_tools: bool, expected: str) -> None:
    intent = classifier.intent(make_request(text, has_tools=has_tools))
    assert intent.label == expected, intent
    assert_valid(intent)
    assert len(intent.runners_up) == 3


@pytest.mark.parametrize(
    "text",
    ["", " ", "\n\t  \r\n", "\u3000"],
    ids=["empty", "space", "mixed-ws", "ideographic-space"],
)
def test_nothing_to_classify(classifier: RulesClassifier, text: str) -> None:
    intent = classifier.intent(make_request(text))
    assert intent == Intent(label=DEFAULT_INTENT, confidence=0.0, complexity=0.1, source="rules")


BAD_INPUTS = {
    "lone-surrogate": "\ud800",
    "surrogates-mixed": "abc\udfff\ud800def 你好",
    "emoji": "🔥🚀😀" * 500,
    "one-char-1mb": "a" * 1_000_000,
    "digits-1mb": "1" * 1_000_000,
    "dots-1mb": "1." * 500_000,
    "cjk-1mb": "你好" * 500_000,
    "mixed-scripts": "Привет 你好 مرحبا שלום 🔥 e\u0301 \u200f\u202e",
    "control-chars": "\x00\x01\x1b[31m\uffff\ufeff",
    "combining-only": "\u0301" * 5000,
    "full-width": "１２３＋４５６＝？",
    "backticks": "`" * 10_000,
}


@pytest.mark.parametrize("text", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_bad_inputs_give_valid_intents(classifier: RulesClassifier, text: str) -> None:
    assert_valid(classifier.intent(make_request(text)))


def test_inspected_text_is_capped() -> None:
    text = "a" * 1_000_000 + "TAIL"
    window = inspected_text(text)
    assert len(window) == RULES_HEAD_CHARS + 1 + RULES_TAIL_CHARS
    assert window.endswith("TAIL")


def test_full_width_text_is_normalised() -> None:
    assert inspected_text("１２３＋４") == "123+4"


def test_many_turns_add_chat_evidence(classifier: RulesClassifier) -> None:
    one = classifier.intent(make_request("ok, sounds good", turns=1))
    many = classifier.intent(make_request("ok, sounds good", turns=5))
    assert many.label == "chat"
    assert many.confidence > one.confidence


def test_long_input_points_to_summarization(classifier: RulesClassifier) -> None:
    text = "The quarterly report covers sales in the northern region. " * 200
    intent = classifier.intent(make_request(text, prompt_tokens=5000))
    assert intent.label == "summarization"


async def test_is_a_gate() -> None:
    chosen: Gate = RulesGate()
    assert (await chosen.classify(make_request("hello"))).source == "rules"


# -- config overrides ----------------------------------------------------------------------


def test_extra_rules_override(classifier: RulesClassifier) -> None:
    text = "Tell me about kubernetes"
    assert classifier.intent(make_request(text)).label == "open_qa"
    custom = RulesClassifier(rules={"code": [r"\bkubernetes\b", "k8s"]})
    assert custom.intent(make_request(text)).label == "code"
    assert custom.intent(make_request("TELL ME ABOUT KUBERNETES")).label == "code"


@pytest.mark.parametrize(
    "rules",
    [
        {"cooking": ["recipe"]},
        {"code": ["("]},
        {"code": "kubectl"},
        {"code": ["x*"]},
        {"code": [42]},
    ],
    ids=["unknown-intent", "bad-regex", "string-not-list", "matches-empty", "not-a-string"],
)
def test_bad_extra_rules_raise_config_error(rules: dict) -> None:
    with pytest.raises(ConfigError):
        RulesClassifier(rules=rules)


# -- complexity ----------------------------------------------------------------------------


def test_complexity_orders_easy_below_hard(classifier: RulesClassifier) -> None:
    easy = classifier.intent(make_request("Hi!"))
    hard = classifier.intent(make_request(
        "Write a Python function that parses a CSV file and computes the median of each column. "
        "It must run in O(n log n), must not use pandas, should handle missing values, and "
        "must include unit tests. Explain step by step why your approach is correct.",
        turns=4,
    ))
    assert easy.complexity < 0.5 < 2.0 < hard.complexity


@pytest.mark.parametrize(
    ("tokens", "constraints", "code", "turns", "expected"),
    [(0, 0, 0.0, 1, 0.1), (10**9, 100, 100.0, 100, 5.0), (-5, 0, 0.0, 0, 0.1)],
    ids=["floor", "ceiling", "negative-inputs"],
)
def test_complexity_is_clamped(
    tokens: int, constraints: int, code: float, turns: int, expected: float
) -> None:
    evidence = Evidence(tokens=tokens, tasks=0, constraints=constraints, advanced=0,
                        code_math=code, reasoning=code, turns=turns)
    assert formula(evidence) == expected


CONSTRAINT_SENTENCES = [
    "You must answer in under 100 words.",
    "Do not use any external libraries.",
    "It should handle at least 10 edge cases.",
    "Make sure to avoid recursion.",
    "回答必须少于100字。",
    "不要使用第三方库。",
    "Always cite sources, and never guess.",
]

BASE_PROMPTS = {
    "empty-ish": "x",
    "code": "Write a function that sorts a list",
    "zh": "写一个排序函数",
    "chat": "Hello there",
}


@pytest.mark.parametrize("base", list(BASE_PROMPTS.values()), ids=list(BASE_PROMPTS))
def test_appending_constraints_raises_complexity(classifier: RulesClassifier, base: str) -> None:
    text, previous = base, classifier.intent(make_request(base)).complexity
    for sentence in CONSTRAINT_SENTENCES:
        text = f"{text} {sentence}"
        current = classifier.intent(make_request(text)).complexity
        assert current >= previous
        previous = current
    assert previous > classifier.intent(make_request(base)).complexity


# -- invariants ----------------------------------------------------------------------------

ODD_PIECES = [
    "\ud800", "\udfff", "你", "好", "a", " ", "1", "+", "=", "🔥", "`", "\n", "\u0301", "吗", "?",
]
any_text = st.text() | st.lists(st.sampled_from(ODD_PIECES), max_size=200).map("".join)


@settings(max_examples=200)
@given(
    text=any_text,
    has_tools=st.booleans(),
    turns=st.integers(0, 50),
    tokens=st.integers(-10, 10**6),
)
def test_any_text_gives_valid_intent(text: str, has_tools: bool, turns: int, tokens: int) -> None:
    request = make_request(text, has_tools=has_tools, turns=turns, prompt_tokens=tokens)
    assert_valid(RulesClassifier().intent(request))


@given(
    base=st.text(max_size=2000) | st.lists(st.sampled_from(ODD_PIECES), max_size=200).map("".join),
    added=st.lists(st.sampled_from(CONSTRAINT_SENTENCES), min_size=1, max_size=5),
)
def test_appending_constraints_never_lowers_complexity(base: str, added: list[str]) -> None:
    classifier = RulesClassifier()
    before = classifier.intent(make_request(base)).complexity
    after = classifier.intent(make_request(base + "".join(f" {s}" for s in added))).complexity
    assert after >= before


@given(st.dictionaries(st.sampled_from(INTENTS), st.floats(0, 1e6), min_size=1))
def test_softmax_is_a_distribution(scores: dict[str, float]) -> None:
    probs = softmax(np.array([list(scores.values())]))[0]
    assert math.isclose(sum(probs), 1.0)
    assert all(0.0 <= p <= 1.0 for p in probs)


def test_verdict_conflict_and_runners_up() -> None:
    probs = dict.fromkeys(INTENTS, 0.0) | {"code": 0.5, "math": 0.3, "chat": 0.15, "open_qa": 0.05}
    intent = make_intent(np.array([probs[k] for k in INTENTS]), INTENTS, 1.0, "rules")
    assert intent.label == "code"
    assert intent.confidence == 0.5
    assert intent.runners_up == (("math", 0.3), ("chat", 0.15), ("open_qa", 0.05))
    assert intent.conflict == pytest.approx(0.8)


def test_intents_are_unique_and_include_default() -> None:
    assert len(set(INTENTS)) == len(INTENTS) == 12
    assert DEFAULT_INTENT in INTENTS


def test_document_reads_weak_extraction_words_on_the_instruction_only() -> None:
    """In a supplied text the field and entity nouns of the passage (names, dates, 姓名, 日期)
    are the passage's, not the request's: with ``document`` they count only on the short
    instruction lines; without it, over the whole text, as before."""
    passage = ("该公司成立日期为1998年，创始人姓名为李明，地址在杭州，联系电话和邮箱见官网。" * 12)
    text = f"请用一句话写一段宣传语：\n{passage}"
    request = make_request(text)
    rules = RulesClassifier()
    assert rules.scores(request, text)["extraction"] > 0
    assert rules.scores(request, text, document=True)["extraction"] == 0
    asked = f"提取以下文本中的姓名和日期：\n{passage}"
    assert rules.scores(make_request(asked), asked, document=True)["extraction"] > 3

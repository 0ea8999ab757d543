"""The encoder-decoder of "Attention Is All You Need": an encoder reads the source, a decoder writes the target.

Generation keeps no state inside the modules: the decoder's keys and values travel in an explicit cache, one
:data:`LayerCache` per decoder layer (the layout of Hugging Face's ``past_key_values``). Masks are True at padding.
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import (
    check_bool,
    check_heads,
    check_length,
    check_padding_mask,
    check_positive_int,
    check_probability,
    check_same_device,
    check_sequence,
    check_token_id,
    check_token_ids,
    shape_str,
)
from .attention import MultiHeadAttention
from .encoder import Encoder, FeedForward, LayerNorm, PositionalEncoding

LayerCache = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""One decoder layer's cache: ``(self_keys, self_values, cross_keys, cross_values)``, each
``(batch, num_heads, num_keys, head_dim)``; ``num_keys`` is the number of target tokens so far for the first
two and ``src_len`` for the last two."""


def _check_decoder_inputs(module, tgt, memory, tgt_key_padding_mask, memory_key_padding_mask):
    """Check a decoder's inputs once for all its layers; return the two padding masks expanded to ``(batch,
    tgt_len)`` and ``(batch, src_len)`` (or None), ready for the layers' unchecked paths."""
    weight, name = module.norm1.gamma if isinstance(module, DecoderLayer) else module.decoder_norm.gamma, type(module)
    check_sequence("tgt", tgt, module.d_model, "(batch, tgt_len, d_model)", weight, name.__name__)
    check_sequence("memory", memory, module.d_model, "(batch, src_len, d_model)", weight, name.__name__)
    if tgt.shape[0] != memory.shape[0]:
        raise ValueError(
            f"src and tgt must hold the same number of sequences, got src batch={memory.shape[0]} and "
            f"tgt {shape_str(tgt.shape)}"
        )
    check_same_device("tgt", tgt, "src", memory)
    if tgt.shape[1] > module.context_length:
        raise ValueError(
            f"tgt has tgt_len={tgt.shape[1]} but the model was built with context_length={module.context_length}"
        )
    return (
        check_padding_mask("tgt_key_padding_mask", tgt_key_padding_mask, tgt, "tgt_len"),
        check_padding_mask("memory_key_padding_mask", memory_key_padding_mask, memory, "src_len"),
    )


def _attend(mha: MultiHeadAttention, x: torch.Tensor, keys, values, hidden, return_weights: bool = False):
    """``mha``'s attention for the queries of ``x`` ``(batch, num_tokens, d_model)`` over keys and values already
    projected, ``(batch, num_heads, num_keys, head_dim)``; ``hidden`` (True = hide) broadcasts to
    ``(batch, num_heads, num_tokens, num_keys)``. Returns ``(batch, num_tokens, d_model)`` and the weights (or None)."""
    queries = mha.split_heads(mha.W_query(x))  # (batch, num_heads, num_tokens, head_dim)
    context_vec, attn_weights = mha.attend_heads(queries, keys, values, hidden, return_weights=return_weights)
    return mha.merge_heads(context_vec, attn_weights, return_weights=True)


class DecoderLayer(nn.Module):
    """One decoder layer of the original transformer: three sublayers, each with a residual and a LayerNorm.

    Post-LN (default)::

        x = norm1(x + dropout1(self_attention(x)))            # causal: token i sees targets 0..i
        x = norm2(x + dropout2(cross_attention(x, memory)))   # queries from x, keys and values from memory
        x = norm3(x + dropout3(ffn(x)))

    Pre-LN (``norm_first=True``) normalises each sublayer's input instead: ``x = x + dropout1(self_attention(
    norm1(x)))`` and so on. ``memory`` is the encoder's output.

    Args:
        d_model, ffn_hidden, num_heads: width, feed-forward width, attention heads (must divide ``d_model``);
            the order of :class:`~attention_helpers.encoder.EncoderLayer`.
        dropout: on the attention weights, inside the feed-forward network and on the three residual branches.
        norm_first, activation, eps: pre-LN instead of post-LN, ``"relu"`` or ``"gelu"``, LayerNorm epsilon.
        context_length: the longest target the causal mask covers.

    Input ``(batch, tgt_len, d_model)`` and memory ``(batch, src_len, d_model)``; output ``(batch, tgt_len,
    d_model)``.
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
        check_positive_int("d_model", d_model)
        check_heads(d_model, num_heads, "d_model")
        check_positive_int("ffn_hidden", ffn_hidden)
        check_probability("dropout", dropout)
        check_positive_int("context_length", context_length)
        check_bool("norm_first", norm_first)
        self.d_model, self.norm_first, self.context_length = d_model, norm_first, context_length
        self.self_attention = MultiHeadAttention(d_model, d_model, context_length, dropout, num_heads, qkv_bias=True)
        self.cross_attention = MultiHeadAttention(
            d_model, d_model, None, dropout, num_heads, qkv_bias=True, causal=False
        )
        self.ffn = FeedForward(d_model, ffn_hidden, dropout, activation)
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model, eps=eps) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))

    def _sublayers(self, x, self_attn, cross_attn):
        """The residual/LayerNorm wiring around the two attention functions (each maps its input to an output)."""
        if self.norm_first:
            x = x + self.dropout1(self_attn(self.norm1(x)))
            x = x + self.dropout2(cross_attn(self.norm2(x)))
            return x + self.dropout3(self.ffn.forward_unchecked(self.norm3(x)))
        x = self.norm1(x + self.dropout1(self_attn(x)))
        x = self.norm2(x + self.dropout2(cross_attn(x)))
        return self.norm3(x + self.dropout3(self.ffn.forward_unchecked(x)))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
    ):
        """``x`` ``(batch, tgt_len, d_model)``, ``memory`` ``(batch, src_len, d_model)``; the masks are True at
        padding. Returns ``(batch, tgt_len, d_model)``, and with ``return_weights`` also the cross-attention
        weights ``(batch, num_heads, tgt_len, src_len)``."""
        masks = _check_decoder_inputs(self, x, memory, tgt_key_padding_mask, memory_key_padding_mask)
        x, attn_weights = self.forward_unchecked(x, memory, *masks, return_weights)
        return (x, attn_weights) if return_weights else x

    def forward_unchecked(self, x, memory, tgt_key_padding_mask, memory_key_padding_mask, return_weights=False):
        """:meth:`forward` without its input checks, the masks None or boolean ``(batch, tgt_len)`` and ``(batch,
        src_len)``. Returns ``(x, cross_attention_weights)``, the weights None unless ``return_weights``."""
        weights = [None]

        def cross_attn(h):
            out = self.cross_attention.forward_unchecked(h, memory_key_padding_mask, return_weights, context=memory)
            if not return_weights:
                return out
            weights[0] = out[1]
            return out[0]

        x = self._sublayers(x, lambda h: self.self_attention.forward_unchecked(h, tgt_key_padding_mask), cross_attn)
        return x, weights[0]

    def cross_keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cross-attention's keys and values of the encoder output, ``(batch, num_heads, src_len, head_dim)``
        each: they depend on the source only, so generation computes them once."""
        mha = self.cross_attention
        return mha.split_heads(mha.W_key(memory)), mha.split_heads(mha.W_value(memory))

    def step(
        self,
        x: torch.Tensor,
        cache: LayerCache,
        memory_key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
    ):
        """Run the tokens ``x`` ``(batch, num_new, d_model)`` that follow the ``num_cached`` target tokens whose
        self-attention keys and values are in ``cache``. Returns ``(output, new_cache)`` (and the cross-attention
        weights ``(batch, num_heads, num_new, src_len)`` with ``return_weights``); ``cache`` is not modified."""
        past_keys, past_values, cross_keys, cross_values = cache
        num_cached, num_new = past_keys.shape[2], x.shape[1]
        new_keys, new_values = past_keys, past_values
        weights = []

        def self_attn(h):
            nonlocal new_keys, new_values
            mha = self.self_attention
            new_keys = torch.cat([past_keys, mha.split_heads(mha.W_key(h))], dim=2)
            new_values = torch.cat([past_values, mha.split_heads(mha.W_value(h))], dim=2)
            # new token i sits at position num_cached + i and may see keys 0..num_cached + i
            positions = torch.arange(num_cached, num_cached + num_new, device=h.device)[:, None]
            hidden = torch.arange(num_cached + num_new, device=h.device)[None, :] > positions
            return _attend(mha, h, new_keys, new_values, hidden if num_new > 1 else None)[0]

        def cross_attn(h):
            hidden = None if memory_key_padding_mask is None else memory_key_padding_mask[:, None, None, :]
            out, attn_weights = _attend(self.cross_attention, h, cross_keys, cross_values, hidden, return_weights)
            weights.append(attn_weights)
            return out

        x = self._sublayers(x, self_attn, cross_attn)
        new_cache = (new_keys, new_values, cross_keys, cross_values)
        return (x, new_cache, weights[0]) if return_weights else (x, new_cache)

    @classmethod
    def from_torch(cls, torch_layer: nn.TransformerDecoderLayer, context_length: int = 512) -> DecoderLayer:
        """Copy the weights and settings of a batch-first ``torch.nn.TransformerDecoderLayer``."""
        from . import interop  # interop imports this module

        return interop.from_torch(torch_layer, into=cls, context_length=context_length)


def _check_step(model: EncoderDecoder, tgt, past_key_values, memory_key_padding_mask) -> torch.Tensor | None:
    """Check :meth:`EncoderDecoder.decode_step`'s inputs against the cache; return the mask expanded to
    ``(batch, src_len)``."""
    if not isinstance(past_key_values, tuple) or len(past_key_values) != len(model.decoder_layers):
        raise ValueError(
            f"past_key_values must be the tuple decode_step returned, one entry per decoder layer "
            f"({len(model.decoder_layers)}), got {type(past_key_values).__name__}"
        )
    cross_keys = past_key_values[0][2]  # (batch, num_heads, src_len, head_dim)
    model._check_sequence("tgt", tgt, "num_new")
    if tgt.shape[0] != cross_keys.shape[0]:
        raise ValueError(f"tgt has batch={tgt.shape[0]} but the cache holds batch={cross_keys.shape[0]}")
    num_cached = past_key_values[0][0].shape[2]
    if num_cached + tgt.shape[1] > model.context_length:
        raise ValueError(
            f"the cache holds {num_cached} target tokens and tgt adds {tgt.shape[1]}, "
            f"more than context_length={model.context_length}"
        )
    return check_padding_mask("memory_key_padding_mask", memory_key_padding_mask, tgt, "src_len", cross_keys.shape[2])


class EncoderDecoder(nn.Module):
    """The core of the original transformer, on sequences that are already embedded.

    The series' :class:`~attention_helpers.encoder.Encoder` reads ``src``; ``num_decoder_layers``
    :class:`DecoderLayer` s read ``tgt`` under a causal mask and attend to the encoder's output. Like
    ``nn.Transformer``, each stack ends with a LayerNorm of its own, whether post-LN or pre-LN. Each public
    method checks its inputs once; the layers run unchecked.

    Args:
        d_model, num_heads: width and attention heads (``num_heads`` must divide ``d_model``).
        num_encoder_layers, num_decoder_layers, ffn_hidden: depths and feed-forward width.
        dropout: dropout everywhere ``nn.Transformer`` has it.
        norm_first: pre-LN layers instead of post-LN.
        activation, eps, context_length: ``"relu"`` or ``"gelu"``, LayerNorm epsilon, longest target.

    ``forward(src, tgt)``: ``src`` ``(batch, src_len, d_model)``, ``tgt`` ``(batch, tgt_len, d_model)``;
    returns ``(batch, tgt_len, d_model)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_encoder_layers: int,
        num_decoder_layers: int,
        ffn_hidden: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        *,
        activation: str = "relu",
        eps: float = 1e-5,
        context_length: int = 512,
    ):
        super().__init__()
        check_positive_int("num_decoder_layers", num_decoder_layers)
        check_heads(d_model, num_heads, "d_model")
        self.d_model, self.num_heads, self.context_length = d_model, num_heads, context_length
        sizes, settings = (d_model, ffn_hidden, num_heads, dropout), dict(norm_first=norm_first, activation=activation)
        self.encoder = Encoder(*sizes, num_encoder_layers, final_norm=True, eps=eps, **settings)
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(*sizes, eps=eps, context_length=context_length, **settings) for _ in range(num_decoder_layers)
        )
        self.decoder_norm = LayerNorm(d_model, eps=eps)

    def _check_sequence(self, name: str, x, what: str) -> None:
        check_sequence(name, x, self.d_model, f"(batch, {what}, d_model)", self.decoder_norm.gamma, "EncoderDecoder")

    def _check_source(self, src, src_key_padding_mask):
        self._check_sequence("src", src, "src_len")
        return check_padding_mask("src_key_padding_mask", src_key_padding_mask, src, "src_len")

    def encode(self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's output ("memory"), ``(batch, src_len, d_model)``."""
        return self.encoder.forward_unchecked(src, self._check_source(src, src_key_padding_mask))

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
    ):
        """The decoder stack on ``tgt`` ``(batch, tgt_len, d_model)`` given ``memory`` ``(batch, src_len,
        d_model)``. With ``return_weights``, also every layer's cross-attention weights, stacked as
        ``(num_decoder_layers, batch, num_heads, tgt_len, src_len)``."""
        masks = _check_decoder_inputs(self, tgt, memory, tgt_key_padding_mask, memory_key_padding_mask)
        return self._decode(tgt, memory, *masks, return_weights)

    def _decode(self, x, memory, tgt_key_padding_mask, memory_key_padding_mask, return_weights):
        all_weights = []
        for layer in self.decoder_layers:
            x, attn_weights = layer.forward_unchecked(
                x, memory, tgt_key_padding_mask, memory_key_padding_mask, return_weights
            )
            all_weights.append(attn_weights)
        x = self.decoder_norm(x)
        return (x, torch.stack(all_weights)) if return_weights else x

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
    ):
        """``src`` ``(batch, src_len, d_model)``, ``tgt`` ``(batch, tgt_len, d_model)``, optional boolean padding
        masks ``(batch, src_len)`` and ``(batch, tgt_len)`` (True at padding). The decoder's self-attention is
        always causal; its cross-attention skips the source's padding. Returns ``(batch, tgt_len, d_model)``
        (and the cross-attention weights, as :meth:`decode`)."""
        src_mask = self._check_source(src, src_key_padding_mask)
        tgt_mask, _ = _check_decoder_inputs(self, tgt, src, tgt_key_padding_mask, None)  # each mask checked once
        memory = self.encoder.forward_unchecked(src, src_mask)
        return self._decode(tgt, memory, tgt_mask, src_mask, return_weights)

    def start_cache(self, memory: torch.Tensor) -> tuple[LayerCache, ...]:
        """An empty self-attention cache and every layer's cross-attention keys and values of ``memory``."""
        cache = []
        for layer in self.decoder_layers:
            mha = layer.self_attention
            empty = memory.new_zeros(memory.shape[0], mha.num_heads, 0, mha.head_dim)
            cache.append((empty, empty, *layer.cross_keys_values(memory)))
        return tuple(cache)

    def decode_step(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor | None = None,
        past_key_values: tuple[LayerCache, ...] | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        return_weights: bool = False,
    ):
        """Decode the target tokens ``tgt`` ``(batch, num_new, d_model)`` that follow those in ``past_key_values``.

        The first call passes ``memory`` (the encoder's output) and ``past_key_values=None``: the cache starts with
        every layer's cross-attention keys and values. Later calls pass the returned cache (``memory`` may then be None)
        and only the new tokens. Returns ``(output, past_key_values)`` with output ``(batch, num_new, d_model)``, equal
        to the last ``num_new`` rows of :meth:`decode` on the whole target; with ``return_weights`` also the
        cross-attention weights ``(num_decoder_layers, batch, num_heads, num_new, src_len)``.
        """
        if past_key_values is None:
            if memory is None:
                raise ValueError("the first decode_step needs memory (the encoder's output) to start the cache")
            self._check_sequence("memory", memory, "src_len")
            past_key_values = self.start_cache(memory)
        memory_key_padding_mask = _check_step(self, tgt, past_key_values, memory_key_padding_mask)
        x, new_cache, all_weights = tgt, [], []
        for layer, cache in zip(self.decoder_layers, past_key_values, strict=True):
            x, cache, *weights = layer.step(x, cache, memory_key_padding_mask, return_weights)
            new_cache.append(cache)
            all_weights += weights
        x = self.decoder_norm(x)
        return (x, tuple(new_cache), torch.stack(all_weights)) if return_weights else (x, tuple(new_cache))

    @classmethod
    def from_torch(cls, torch_transformer: nn.Transformer, context_length: int = 512) -> EncoderDecoder:
        """Copy a ``torch.nn.Transformer`` (its layers and final LayerNorms; ours is batch-first)."""
        from . import interop  # interop imports this module

        return interop.from_torch(torch_transformer, into=cls, context_length=context_length)


class Seq2SeqTransformer(nn.Module):
    """A sequence-to-sequence model: token embeddings and sinusoidal positions on both sides, an
    :class:`EncoderDecoder`, and a linear head that scores every target token at every position.

    Args:
        src_vocab_size, tgt_vocab_size: number of source and target token ids.
        d_model, num_heads, num_encoder_layers, num_decoder_layers, ffn_hidden, dropout, norm_first: the
            :class:`EncoderDecoder`'s sizes.
        context_length: the longest source or target.
        pad_id: the source id that marks padding (hidden from attention).

    ``forward(src_ids, tgt_ids)``: ``src_ids`` ``(batch, src_len)``, ``tgt_ids`` ``(batch, tgt_len)`` int64 or int32 ->
    logits ``(batch, tgt_len, tgt_vocab_size)``; row ``i`` predicts target token ``i + 1`` from tokens ``0..i``.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int,
        num_heads: int,
        num_encoder_layers: int,
        num_decoder_layers: int,
        ffn_hidden: int,
        dropout: float = 0.0,
        *,
        norm_first: bool = False,
        context_length: int = 64,
        pad_id: int = 0,
    ):
        super().__init__()
        check_positive_int("src_vocab_size", src_vocab_size)
        check_positive_int("tgt_vocab_size", tgt_vocab_size)
        check_token_id("pad_id", pad_id, src_vocab_size, "src_vocab_size")
        self.src_vocab_size, self.tgt_vocab_size, self.pad_id = src_vocab_size, tgt_vocab_size, pad_id
        self.src_embedding = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, context_length)
        sizes = (d_model, num_heads, num_encoder_layers, num_decoder_layers, ffn_hidden, dropout, norm_first)
        self.transformer = EncoderDecoder(*sizes, context_length=context_length)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(d_model, tgt_vocab_size)

    def embed_target(self, tgt_ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """``(batch, num_tokens)`` ids at positions ``start, start + 1, ...`` -> ``(batch, num_tokens, d_model)``."""
        x = self.tgt_embedding(tgt_ids)
        pe = self.positional_encoding.pe[start : start + tgt_ids.shape[1]]
        return self.dropout(x + pe.to(x.dtype))

    def encode(self, src_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``src_ids`` ``(batch, src_len)`` -> (memory ``(batch, src_len, d_model)``, padding mask ``(batch,
        src_len)``, True where ``src_ids == pad_id``)."""
        check_token_ids("src_ids", src_ids, self.src_vocab_size, "(batch, src_len)")
        padding = src_ids == self.pad_id
        src = self.dropout(self.positional_encoding(self.src_embedding(src_ids)))
        return self.transformer.encoder.forward_unchecked(src, padding), padding  # padding: made here, boolean

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor, return_weights: bool = False):
        """Logits ``(batch, tgt_len, tgt_vocab_size)``; with ``return_weights`` also the cross-attention weights
        ``(num_decoder_layers, batch, num_heads, tgt_len, src_len)``."""
        check_token_ids("tgt_ids", tgt_ids, self.tgt_vocab_size, "(batch, tgt_len)")
        check_length("tgt_ids", tgt_ids.shape[1], self.transformer.context_length, "tgt_len")
        memory, padding = self.encode(src_ids)
        if tgt_ids.shape[0] != src_ids.shape[0]:
            raise ValueError(
                f"src_ids and tgt_ids must hold the same number of sequences, got {shape_str(src_ids.shape)} "
                f"and {shape_str(tgt_ids.shape)}"
            )
        out = self.transformer.decode(self.embed_target(tgt_ids), memory, None, padding, return_weights=return_weights)
        return (self.head(out[0]), out[1]) if return_weights else self.head(out)


@torch.no_grad()
def greedy_decode(
    model: Seq2SeqTransformer,
    src_ids: torch.Tensor,
    bos_id: int,
    num_tokens: int,
    use_cache: bool = True,
    return_weights: bool = False,
):
    """Write ``num_tokens`` target tokens for each source, always taking the most likely next token.

    Starts every target with ``bos_id``. Without the cache, each step runs the decoder on the whole target so
    far; with it, each step feeds only the newest token to :meth:`EncoderDecoder.decode_step`. Same tokens.

    ``src_ids`` ``(batch, src_len)``; returns ``(batch, num_tokens)`` int64 ids (without ``bos_id``), and with
    ``return_weights`` also the cross-attention weights ``(num_decoder_layers, batch, num_heads, num_tokens,
    src_len)``. The model runs in eval mode and is restored to its mode afterwards.
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"model must be an attention_helpers.Seq2SeqTransformer, got {type(model).__name__}")
    check_positive_int("num_tokens", num_tokens)
    check_token_id("bos_id", bos_id, model.tgt_vocab_size, "tgt_vocab_size")
    if num_tokens > model.transformer.context_length:
        raise ValueError(
            f"num_tokens={num_tokens} is more than the model's context_length={model.transformer.context_length} "
            "target positions"
        )
    if not 0 <= bos_id < model.tgt_vocab_size:
        raise ValueError(f"bos_id must be a target id from 0 to {model.tgt_vocab_size - 1}, got {bos_id}")
    was_training = model.training
    model.eval()
    try:
        memory, padding = model.encode(src_ids)
        tokens = torch.full((src_ids.shape[0], 1), bos_id, dtype=torch.long, device=src_ids.device)
        cache, step_weights = None, []
        for step in range(num_tokens):
            if use_cache:
                x = model.embed_target(tokens[:, -1:], start=step)  # only the newest token
                hidden, cache, *weights = model.transformer.decode_step(x, memory, cache, padding, return_weights)
                step_weights += weights
            else:
                out = model.transformer.decode(model.embed_target(tokens), memory, None, padding, return_weights)
                hidden = out[0] if return_weights else out
                if return_weights:
                    step_weights.append(out[1][..., -1:, :])
            next_id = model.head(hidden[:, -1]).argmax(dim=-1, keepdim=True)  # (batch, 1)
            tokens = torch.cat([tokens, next_id], dim=1)
    finally:
        model.train(was_training)
    return (tokens[:, 1:], torch.cat(step_weights, dim=3)) if return_weights else tokens[:, 1:]

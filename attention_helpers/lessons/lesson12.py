"""Lesson 12's checks: a cross-attention step from cached keys and values, and a pre-LN decoder layer written out
from its parts, on hidden modules with several heads, a batch of one and source padding."""

from __future__ import annotations

import torch

from ..attention import MultiHeadAttention
from ..encoder import FeedForward, LayerNorm
from ..encoder_decoder import DecoderLayer
from . import HEADS_MIXED, NO_OUT_PROJ, UNSCALED, Exercise, Mistake, attend, compare, hidden_generator

SEED = 1212


def _padding(generator: torch.Generator, batch: int, src_len: int, first: int = 1) -> torch.Tensor:
    """True at padding: from row ``first`` on, each source ends with some (and holds at least one real token)."""
    lengths = torch.randint(1, src_len, (batch - first,), generator=generator)
    return torch.arange(src_len) >= torch.cat([torch.full((first,), src_len), lengths])[:, None]


def _cross_cases():
    """(mha, x, keys, values, key_padding_mask, memory) for a few hidden shapes."""
    generator = hidden_generator(SEED)
    cases = []
    for batch, num_new, src_len, d_model, num_heads in ((3, 1, 7, 12, 3), (1, 3, 5, 10, 2), (2, 2, 9, 16, 4)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
            mha = MultiHeadAttention(d_model, d_model, None, 0.0, num_heads, qkv_bias=True, causal=False).eval()
        x = torch.randn(batch, num_new, d_model, generator=generator)
        memory = torch.randn(batch, src_len, d_model, generator=generator)
        with torch.no_grad():
            cases.append((mha, x, *mha.memory_keys_values(memory), _padding(generator, batch, src_len), memory))
    return cases


def _cross_mistakes(mha, x, keys, values, mask, memory):
    num_new, d_model = x.shape[1:]
    padded_rows = mask.any(dim=-1)  # rows where the reversed mask leaves some keys to attend to
    per_head = "divide each head's scores by the square root of its own width, head_dim = keys.shape[-1]"

    def cross(hide=mask, scale=None, merge_without_transpose=False, out_proj=True):
        """Cross-attention of ``x`` over the given keys and values; what a mistake changes: the keys ``hide`` hides
        ((batch, src_len) or (batch, num_new, src_len)), the ``scale`` (None: sqrt(head_dim)), the merge, out_proj."""
        hide = None if hide is None else hide[:, None, None, :] if hide.dim() == 2 else hide[:, None]
        context = attend(mha.split_heads(mha.W_query(x)), keys, values, scale=scale, hide=hide)  # (batch, h, new, d)
        context = (context if merge_without_transpose else context.transpose(1, 2)).reshape(x.shape)
        return mha.out_proj(context) if out_proj else context

    reversed_mask = cross(~mask)

    def padding_only(answer) -> bool:  # on the rows that hold padding: the others are nan, or what a finite fill gives
        rows = answer[padded_rows] if answer.shape == reversed_mask.shape else None
        return bool(padded_rows.any()) and compare(rows, reversed_mask[padded_rows], atol=1e-5) is None

    return [
        Mistake(
            "the padded source positions get attention",
            "hide the padded keys: minus infinity in their scores before the softmax, for every head and query",
            cross(None),
        ),
        Mistake(
            "the mask is reversed: your queries attend to the padding only",
            "key_padding_mask is True at padding, the positions to hide",
            matches=padding_only,
        ),
        Mistake(
            "a causal mask hides later source positions",
            "cross-attention may read the whole source, there before decoding starts: hide only the padding",
            cross(torch.ones(num_new, keys.shape[2], dtype=torch.bool).triu(diagonal=1) | mask[:, None, :]),
        ),
        Mistake(
            "the keys and values come from x, the decoder's own tokens: that is self-attention",
            "use the keys and values given, projected from the encoder's memory; only the queries come from x",
            mha(x),
        ),
        Mistake("the scores are divided by sqrt(d_model)", per_head, cross(scale=d_model**0.5)),
        Mistake(UNSCALED, per_head, cross(scale=1.0)),
        Mistake(*HEADS_MIXED, cross(merge_without_transpose=True)),
        Mistake(*NO_OUT_PROJ, cross(out_proj=False)),
    ]


exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda mha, x, keys, values, mask, memory: mha(x, mask, memory=memory),
    cases=_cross_cases,
    arguments=lambda mha, x, keys, values, mask, memory: (mha, x, keys, values, mask),
    hint="only the queries come from x, split into heads like the keys; scaled scores against the given keys with the "
    "padding hidden, a softmax over the source, the mix of the values, then the heads merged back and projected "
    "(reread '1. Two sequences, three attentions')",
    mistakes=_cross_mistakes,
    returned_none="return the cross-attention output",
    atol=1e-5,
    rule="the exercise asks you to write the step from mha's W_query and out_proj, not to run the module or its "
    "attention core",
    allowed=(MultiHeadAttention.split_heads, MultiHeadAttention.merge_heads),
).check


def _layer_cases():
    """(layer, x, memory, memory_key_padding_mask): pre-LN layers with norms that are not the identity."""
    generator = hidden_generator(SEED + 1)
    cases = []
    for batch, tgt_len, src_len, d_model, num_heads, ffn_hidden in ((2, 5, 7, 12, 3, 20), (1, 3, 6, 8, 2, 10)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
            layer = DecoderLayer(d_model, ffn_hidden, num_heads, norm_first=True).eval()
            for norm in (layer.norm1, layer.norm2, layer.norm3):
                torch.nn.init.uniform_(norm.gamma, 0.5, 1.5)
                torch.nn.init.normal_(norm.beta, 0.0, 0.3)
        x = torch.randn(batch, tgt_len, d_model, generator=generator)
        memory = torch.randn(batch, src_len, d_model, generator=generator)
        cases.append((layer, x, memory, _padding(generator, batch, src_len, first=0)))  # padding in every case
    return cases


def _layer_mistakes(layer, x, memory, mask):
    norms = (layer.norm1, layer.norm2, layer.norm3)

    def cross(h, hide=mask, source=memory):
        return layer.cross_attention(h, hide, memory=source)

    def layer_with(cross=cross, residual_normalised=False, post_ln=False):
        h = x
        for norm, sublayer in zip(norms, (layer.self_attention, cross, layer.ffn), strict=True):
            normalised = norm(h)
            h = norm(h + sublayer(h)) if post_ln else (normalised if residual_normalised else h) + sublayer(normalised)
        return h

    again = "the encoder's memory is normalised again"
    again_hint = "pass memory to cross_attention as it is: norm2 normalises only the cross-attention's input"
    pre_ln = "pre-LN normalises each sublayer's input and adds its output to the unnormalised x"
    return [
        Mistake("this is the post-LN layer of section 3", pre_ln, layer_with(post_ln=True)),
        Mistake("the residual adds the normalised copy", pre_ln, layer_with(residual_normalised=True)),
        Mistake(
            "the cross-attention attends to the source's padding",
            "pass memory_key_padding_mask",
            layer_with(lambda h: cross(h, hide=None)),
        ),
        Mistake(
            "the cross-attention reads the target instead",
            "its keys come from the encoder's memory",
            layer_with(lambda h: cross(h, hide=None, source=h)),
        ),
        *(Mistake(again, again_hint, layer_with(lambda h, n=n: cross(h, source=n(memory)))) for n in norms),
        Mistake(
            "the output is normalised once more at the end", "return the residual stream", layer.norm3(layer_with())
        ),
    ]


exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda layer, x, memory, mask: layer(x, memory, None, mask),
    cases=_layer_cases,
    hint="three sublayers in turn, each reading a normalised copy of x and adding its output to x itself: "
    "self-attention, cross-attention over the memory with the source's padding hidden, the feed-forward network "
    "(reread '3. The model')",
    mistakes=_layer_mistakes,
    returned_none="return the layer's output",
    rule="the exercise asks for the layer's forward written out from its parts (layer.norm1, layer.self_attention, "
    "layer.norm2, layer.cross_attention, layer.norm3, layer.ffn), not the layer itself or a converted copy",
    allowed=(MultiHeadAttention, LayerNorm, FeedForward),
    atol=1e-5,
).check

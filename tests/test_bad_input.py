"""Malformed calls fail at once with a TypeError or ValueError that names the argument and the shapes."""

import numpy as np
import pytest
import torch
from conftest import small_seq2seq_config
from torch import nn

import attention_helpers as ah
import attention_helpers.dates  # noqa: F401  (ah.dates)

X = torch.randn(2, 6, 3)  # (batch, num_tokens, d_in) with d_in = 3


def mha(**overrides):
    args = {"d_in": 3, "d_out": 4, "context_length": 6, "dropout": 0.0, "num_heads": 2, **overrides}
    return ah.MultiHeadAttention(**args)


CASES = {
    # wrong rank
    "V1 input of rank 1": (lambda: ah.SelfAttentionV1(3, 2)(torch.randn(3)), ValueError, ["x", "(3,)", "2 or 3"]),
    "causal input of rank 2": (
        lambda: ah.CausalAttention(3, 2, 6, 0.0)(torch.randn(6, 3)),
        ValueError,
        ["x", "(6, 3)", "(batch, num_tokens, d_in)"],
    ),
    "MHA input of rank 4": (lambda: mha()(torch.randn(1, 2, 6, 3)), ValueError, ["x", "(1, 2, 6, 3)"]),
    "scores loop with a matrix query": (
        lambda: ah.attention_scores_loop(torch.randn(6, 3), torch.randn(1, 3)),
        ValueError,
        ["query", "(1, 3)"],
    ),
    "sdpa with 1-d queries": (
        lambda: ah.attention_with_weights(torch.randn(4), torch.randn(4), torch.randn(4)),
        ValueError,
        ["queries", "(4,)"],
    ),
    # size mismatches
    "V2 d_in mismatch": (lambda: ah.SelfAttentionV2(4, 2)(X), ValueError, ["x", "d_in=4", "(2, 6, 3)"]),
    "MHA d_in mismatch": (lambda: mha(d_in=5)(X), ValueError, ["x", "d_in=5", "(2, 6, 3)"]),
    "scores loop d mismatch": (
        lambda: ah.attention_scores_loop(torch.randn(6, 3), torch.randn(4)),
        ValueError,
        ["query", "d=3", "(4,)"],
    ),
    "sdpa d_k mismatch": (
        lambda: ah.attention_with_weights(torch.randn(5, 4), torch.randn(7, 3), torch.randn(7, 2)),
        ValueError,
        ["keys", "(5, 4)", "(7, 3)"],
    ),
    "sdpa values rows != keys": (
        lambda: ah.attention_with_weights(torch.randn(5, 4), torch.randn(7, 4), torch.randn(6, 2)),
        ValueError,
        ["values", "(7, 4)", "(6, 2)"],
    ),
    "d_out not divisible by num_heads": (lambda: mha(d_out=5), ValueError, ["d_out=5", "num_heads=2"]),
    "d_model not divisible by num_heads": (
        lambda: ah.EncoderLayer(10, 20, 4, 0.1),
        ValueError,
        ["d_model=10", "num_heads=4"],
    ),
    "more tokens than context_length": (
        lambda: ah.CausalAttention(3, 2, 4, 0.0)(X),
        ValueError,
        ["num_tokens=6", "context_length=4"],
    ),
    "MHA more tokens than context_length": (
        lambda: mha(context_length=5)(X),
        ValueError,
        ["num_tokens=6", "context_length=5"],
    ),
    "positions longer than context_length": (
        lambda: ah.PositionalEncoding(3, context_length=4)(X),
        ValueError,
        ["num_tokens=6", "context_length=4"],
    ),
    # masks
    "padding mask of wrong shape": (
        lambda: mha()(X, torch.zeros(2, 5, dtype=torch.bool)),
        ValueError,
        ["key_padding_mask", "(2, 5)", "(2, 6)"],
    ),
    "padding mask transposed": (
        lambda: mha()(X, torch.zeros(6, 2, dtype=torch.bool)),
        ValueError,
        ["key_padding_mask", "(6, 2)"],
    ),
    "padding mask of wrong dtype": (
        lambda: mha()(X, torch.zeros(2, 6)),
        TypeError,
        ["key_padding_mask", "torch.float32", "(2, 6)"],
    ),
    "padding mask on another device": (
        lambda: mha()(X, torch.zeros(2, 6, dtype=torch.bool, device="meta")),
        ValueError,
        ["key_padding_mask", "meta", "cpu"],
    ),
    "sdpa mask of wrong shape": (
        lambda: ah.attention_with_weights(
            torch.randn(5, 4), torch.randn(7, 4), torch.randn(7, 2), mask=ah.causal_mask(5)
        ),
        ValueError,
        ["mask", "(5, 5)", "(5, 7)"],
    ),
    "sdpa integer mask": (
        lambda: ah.attention_with_weights(
            torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 2), mask=torch.ones(5, 5, dtype=torch.int64)
        ),
        TypeError,
        ["mask", "torch.int64", "(5, 5)"],
    ),
    "sdpa mask that is a list": (
        lambda: ah.attention_with_weights(torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 2), mask=[[True]]),
        TypeError,
        ["mask", "list"],
    ),
    # dtypes and types
    "integer input": (
        lambda: mha()(torch.ones(2, 6, 3, dtype=torch.int64)),
        TypeError,
        ["x", "torch.int64", "(2, 6, 3)"],
    ),
    "a list as input": (lambda: ah.SelfAttentionV1(3, 2)([[0.1, 0.2, 0.3]]), TypeError, ["x", "list"]),
    "keys of another dtype": (
        lambda: ah.attention_with_weights(torch.randn(5, 4), torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 2)),
        TypeError,
        ["keys", "torch.float64", "torch.float32"],
    ),
    "softmax of integers": (
        lambda: ah.softmax_stable(torch.tensor([1, 2, 3])),
        TypeError,
        ["x", "torch.int64", "(3,)"],
    ),
    "dropout that is not callable": (
        lambda: ah.attention_with_weights(torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 2), dropout=0.5),
        TypeError,
        ["dropout", "float"],
    ),
    # hyper-parameters
    "dropout of 1": (lambda: mha(dropout=1.0), ValueError, ["dropout", "[0, 1)", "1.0"]),
    "negative dropout": (lambda: ah.CausalAttention(3, 2, 6, -0.1), ValueError, ["dropout", "-0.1"]),
    "dropout given as a string": (lambda: mha(dropout="0.1"), TypeError, ["dropout", "str"]),
    "encoder dropout above 1": (
        lambda: ah.Encoder(ah.EncoderConfig(d_model=8, ffn_hidden=16, num_heads=2, dropout=1.5, num_layers=2)),
        ValueError,
        ["dropout", "1.5"],
    ),
    "num_layers of 0": (
        lambda: ah.Encoder(ah.EncoderConfig(d_model=8, ffn_hidden=16, num_heads=2, dropout=0.1, num_layers=0)),
        ValueError,
        ["num_layers", "0"],
    ),
    "num_heads of 0": (lambda: mha(num_heads=0), ValueError, ["num_heads", "0"]),
    "float num_heads": (lambda: ah.MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2.0), TypeError, ["num_heads", "float"]),
    "zero d_out": (lambda: ah.SelfAttentionV2(3, 0), ValueError, ["d_out", "0"]),
    "zero context_length": (lambda: ah.CausalAttention(3, 2, 0, 0.0), ValueError, ["context_length", "0"]),
    "causal without a context_length": (
        lambda: mha(context_length=None),
        ValueError,
        ["context_length=None", "causal"],
    ),
    "unknown activation": (lambda: ah.FeedForward(8, 16, activation="tanh"), ValueError, ["activation", "'tanh'"]),
    "causal_mask of a float size": (lambda: ah.causal_mask(4.0), TypeError, ["num_tokens", "float"]),
    "causal_mask of size 0": (lambda: ah.causal_mask(0), ValueError, ["num_tokens", "0"]),
    "layer norm of the wrong width": (lambda: ah.LayerNorm(4)(X), ValueError, ["inputs", "(2, 6, 3)", "(4,)"]),
    "encoder input of the wrong width": (
        lambda: ah.Encoder(ah.EncoderConfig(d_model=8, ffn_hidden=16, num_heads=2, dropout=0.1, num_layers=1))(X),
        ValueError,
        ["x", "d_model=8", "(2, 6, 3)"],
    ),
    # an input whose dtype differs from the module's weights (torch fails inside a matmul)
    **{
        f"float64 input to a float32 {name}": (
            lambda make=make, shape=shape: make()(torch.randn(*shape, dtype=torch.float64)),
            TypeError,
            ["x" if name != "LayerNorm" else "inputs", "torch.float64", "torch.float32", ".to("],
        )
        for name, make, shape in [
            ("SelfAttentionV1", lambda: ah.SelfAttentionV1(3, 2), (6, 3)),
            ("SelfAttentionV2", lambda: ah.SelfAttentionV2(3, 2), (6, 3)),
            ("CausalAttention", lambda: ah.CausalAttention(3, 2, 6, 0.0), (2, 6, 3)),
            ("MultiHeadAttentionWrapper", lambda: ah.MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2), (2, 6, 3)),
            ("MultiHeadAttention", lambda: mha(), (2, 6, 3)),
            ("LayerNorm", lambda: ah.LayerNorm(3), (2, 6, 3)),
            ("FeedForward", lambda: ah.FeedForward(3, 8), (2, 6, 3)),
            ("EncoderLayer", lambda: ah.EncoderLayer(4, 8, 2, 0.0), (2, 6, 4)),
            (
                "Encoder",
                lambda: ah.Encoder(ah.EncoderConfig(d_model=4, ffn_hidden=8, num_heads=2, num_layers=2)),
                (2, 6, 4),
            ),
        ]
    },
    # attention_with_weights and softmax
    "sdpa batch dimensions that do not broadcast": (
        lambda: ah.attention_with_weights(torch.randn(2, 5, 4), torch.randn(3, 7, 4), torch.randn(3, 7, 2)),
        ValueError,
        ["broadcast", "(2, 5, 4)", "(3, 7, 4)"],
    ),
    "sdpa with d_k = 0": (
        lambda: ah.attention_with_weights(torch.randn(5, 0), torch.randn(7, 0), torch.randn(7, 2)),
        ValueError,
        ["d_k", "(5, 0)"],
    ),
    "sdpa with no keys": (
        lambda: ah.attention_with_weights(torch.randn(5, 4), torch.randn(0, 4), torch.randn(0, 2)),
        ValueError,
        ["num_keys", "(0, 4)"],
    ),
    "softmax over an empty last dimension": (
        lambda: ah.softmax_stable(torch.randn(3, 0)),
        ValueError,
        ["dim=-1", "(3, 0)"],
    ),
    "softmax along a dim out of range": (
        lambda: ah.softmax_stable(torch.randn(3, 4), dim=2),
        ValueError,
        ["dim=2", "(3, 4)"],
    ),
    "softmax along a float dim": (lambda: ah.softmax_stable(torch.randn(3, 4), dim=1.0), TypeError, ["dim", "float"]),
    # LayerNorm's arguments
    "LayerNorm of a float width": (lambda: ah.LayerNorm(4.0), TypeError, ["parameters_shape", "float", "4.0"]),
    "LayerNorm of a string width": (lambda: ah.LayerNorm("4"), TypeError, ["parameters_shape", "str"]),
    "LayerNorm with a negative eps": (lambda: ah.LayerNorm(4, eps=-1e-5), ValueError, ["eps", "-1e-05"]),
    "LayerNorm with a string eps": (lambda: ah.LayerNorm(4, eps="1e-5"), TypeError, ["eps", "str"]),
    "Encoder with eps 0": (
        lambda: ah.Encoder(ah.EncoderConfig(d_model=4, ffn_hidden=8, num_heads=2, num_layers=1, eps=0.0)),
        ValueError,
        ["eps", "0.0"],
    ),
    # a Hugging Face attention_mask (1 = real token) where a key_padding_mask (True = hide) belongs
    "integer attention_mask as key_padding_mask": (
        lambda: mha()(X, key_padding_mask=torch.ones(2, 6, dtype=torch.long)),
        TypeError,
        ["key_padding_mask", "torch.int64", "attention_mask == 0"],
    ),
    # plotting and interop
    "3d plot of 2-d vectors": (
        lambda: ah.plot_embeddings_3d(torch.randn(6, 2), ah.WORDS),
        ValueError,
        ["vectors", "(6, 2)"],
    ),
    "heatmap with too few labels": (
        lambda: ah.plot_attention(torch.rand(6, 6), ah.WORDS[:5]),
        ValueError,
        ["row_labels", "5", "6"],
    ),
    "heatmap with no labels": (
        lambda: ah.plot_attention(torch.rand(6, 6), None),
        TypeError,
        ["row_labels", "NoneType"],
    ),
    "heads grid of zero heads": (
        lambda: ah.plot_attention_heads(torch.rand(0, 6, 6), ah.WORDS),
        ValueError,
        ["no heads", "(0, 6, 6)"],
    ),
    "heads grid with ncols of 0": (
        lambda: ah.plot_attention_heads(torch.rand(2, 6, 6), ah.WORDS, ncols=0),
        ValueError,
        ["ncols", "0"],
    ),
    "to_torch of a rectangular MHA": (lambda: ah.to_torch(mha(d_out=4)), ValueError, ["d_in=3", "d_out=4"]),
    "to_torch of an unsupported module": (lambda: ah.to_torch(nn.Linear(2, 2)), TypeError, ["Linear"]),
    "from_torch of the wrong class": (
        lambda: ah.MultiHeadAttention.from_torch(nn.Linear(2, 2)),
        TypeError,
        ["torch_mha", "Linear"],
    ),
    "from_torch of cross-attention sizes": (
        lambda: ah.MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, kdim=3, vdim=3)),
        ValueError,
        ["kdim=3", "embed_dim=4"],
    ),
    # issue 31: each of these was accepted, failed deep inside torch, or named an internal variable
    "EncoderLayer with norm_first='no'": (
        lambda: ah.EncoderLayer(4, 8, 2, 0.0, norm_first="no"),
        TypeError,
        ["norm_first", "True or False", "'no'"],
    ),
    "Encoder with final_norm=1": (
        lambda: ah.Encoder(ah.EncoderConfig(d_model=4, ffn_hidden=8, num_heads=2, num_layers=1, final_norm=1)),
        TypeError,
        ["final_norm", "int"],
    ),
    "MHA with causal='yes'": (lambda: mha(causal="yes"), TypeError, ["causal", "True or False", "'yes'"]),
    "DecoderLayer with norm_first='yes'": (
        lambda: ah.DecoderLayer(4, 8, 2, norm_first="yes"),
        TypeError,
        ["norm_first", "'yes'"],
    ),
    "TokenClassifier with positional='no'": (
        lambda: ah.TokenClassifier(11, 12, 2, 1, 20, positional="no"),
        TypeError,
        ["positional", "'no'"],
    ),
    "EncoderLayer with ffn_hidden=0": (lambda: ah.EncoderLayer(4, 0, 2, 0.0), ValueError, ["ffn_hidden", "0"]),
    "Encoder with ffn_hidden=0": (
        lambda: ah.Encoder(ah.EncoderConfig(d_model=4, ffn_hidden=0, num_heads=2, num_layers=1)),
        ValueError,
        ["ffn_hidden", "0"],
    ),
    "TokenClassifier with ffn_hidden=0": (
        lambda: ah.TokenClassifier(11, 12, 2, 1, 0),
        ValueError,
        ["ffn_hidden", "0"],
    ),
    "Seq2Seq with ffn_hidden=0": (
        lambda: ah.Seq2SeqTransformer(small_seq2seq_config(ffn_hidden=0)),
        ValueError,
        ["ffn_hidden", "0"],
    ),
    "greedy_decode with bos_id=1.5": (
        lambda: ah.greedy_decode(_seq2seq(), torch.tensor([[3, 4, 0]]), 1.5, 3),
        TypeError,
        ["bos_id", "float", "1.5"],
    ),
    "greedy_decode with bos_id=True": (
        lambda: ah.greedy_decode(_seq2seq(), torch.tensor([[3, 4, 0]]), True, 3),
        TypeError,
        ["bos_id", "bool", "True"],
    ),
    "greedy_decode with bos_id past the vocabulary": (
        lambda: ah.greedy_decode(_seq2seq(), torch.tensor([[3, 4, 0]]), 9, 3),
        ValueError,
        ["bos_id", "0 to 8", "tgt_vocab_size=9", "got 9"],
    ),
    "Seq2Seq with pad_id=99": (
        lambda: ah.Seq2SeqTransformer(small_seq2seq_config(pad_id=99)),
        ValueError,
        ["pad_id", "0 to 12", "src_vocab_size=13", "99"],
    ),
    "Seq2Seq with pad_id='x'": (
        lambda: ah.Seq2SeqTransformer(small_seq2seq_config(pad_id="x")),
        TypeError,
        ["pad_id", "str", "'x'"],
    ),
    "Seq2Seq target longer than context_length": (
        lambda: _seq2seq()(torch.tensor([[3, 4, 0]]), torch.ones(1, 17, dtype=torch.long)),
        ValueError,
        ["tgt_ids", "tgt_len=17", "context_length=16"],
    ),
    "Seq2Seq source longer than context_length": (
        lambda: _seq2seq()(torch.ones(1, 17, dtype=torch.long), torch.ones(1, 3, dtype=torch.long)),
        ValueError,
        ["17", "context_length=16"],
    ),
    "(batch, 1) padding mask for MHA": (
        lambda: mha()(X, torch.zeros(2, 1, dtype=torch.bool)),
        ValueError,
        ["key_padding_mask", "one entry per key", "(2, 1)", "(2, 6)"],
    ),
    "(batch, 1) padding mask for an encoder": (
        lambda: ah.Encoder(ah.EncoderConfig(d_model=4, ffn_hidden=8, num_heads=2, num_layers=1))(
            torch.randn(2, 5, 4), torch.ones(2, 1, dtype=torch.bool)
        ),
        ValueError,
        ["key_padding_mask", "one entry per key", "(2, 1)"],
    ),
    "MHA input of zero tokens": (
        lambda: mha()(torch.randn(2, 0, 3)),
        ValueError,
        ["x", "at least one token", "(2, 0, 3)"],
    ),
    "encoder input of zero tokens": (
        lambda: ah.Encoder(ah.EncoderConfig(d_model=4, ffn_hidden=8, num_heads=2, num_layers=1))(torch.randn(2, 0, 4)),
        ValueError,
        ["x", "at least one token", "(2, 0, 4)"],
    ),
    "from_torch into a class it cannot build": (
        lambda: ah.from_torch(nn.LayerNorm(4), into=nn.Linear),
        TypeError,
        ["into", "LayerNorm", "Linear"],
    ),
    "from_torch into an instance": (
        lambda: ah.from_torch(nn.LayerNorm(4), into=ah.LayerNorm(4)),
        TypeError,
        ["into", "LayerNorm"],
    ),
    "softmax_naive along a dim out of range": (
        lambda: ah.softmax_naive(torch.randn(3, 4), dim=5),
        ValueError,
        ["dim=5", "(3, 4)"],
    ),
    "DateTokenizer.decode of a negative id": (
        lambda: ah.dates.DateTokenizer().decode([-1]),
        ValueError,
        ["ids", "-1", "vocab_size="],
    ),
    "DateTokenizer.decode of an id past the vocabulary": (
        lambda: ah.dates.DateTokenizer().decode(torch.tensor([2, 500])),
        ValueError,
        ["ids", "500"],
    ),
    "DateTokenizer.decode of floats": (
        lambda: ah.dates.DateTokenizer().decode(torch.tensor([2.0, 3.0])),
        TypeError,
        ["ids", "torch.float32"],
    ),
    "DateTokenizer.decode of a batch": (
        lambda: ah.dates.DateTokenizer().decode(torch.ones(2, 3, dtype=torch.long)),
        TypeError,
        ["ids", "(2, 3)", "one row at a time"],
    ),
    "exact_match of 1-D ids": (
        lambda: ah.dates.exact_match(torch.tensor([1, 2]), torch.tensor([1, 2])),
        ValueError,
        ["predicted", "2 dimensions", "(2,)", "predicted[None]"],
    ),
    "exact_match of a list": (
        lambda: ah.dates.exact_match([[1, 2]], torch.tensor([[1, 2]])),
        TypeError,
        ["predicted", "list"],
    ),
    "token_accuracy of broadcasting shapes": (
        lambda: ah.token_accuracy(torch.randn(2, 3, 4), torch.zeros(2, 1, dtype=torch.long)),
        ValueError,
        ["targets", "(2, 3)", "(2, 1)"],
    ),
    "sampling from nan logits at temperature 0": (
        lambda: ah.sample_next_token(torch.tensor([[float("nan"), 1.0], [0.0, 1.0]]), 0),
        ValueError,
        ["logits", "nan", "rows [0]"],
    ),
    "sampling from nan logits": (
        lambda: ah.sample_next_token(torch.full((1, 3), float("nan")), 1.0),
        ValueError,
        ["logits", "nan"],
    ),
}

# --- flags must be True or False: a string such as "no" is truthy and would switch the option on -----------------
NOT_A_BOOL = ["must be True or False", "str ('no')"]
_IDS = torch.zeros(1, 3, dtype=torch.long)
FLAG_CASES = {
    "MHA causal='no'": lambda: mha(causal="no"),
    "MHA qkv_bias='no'": lambda: mha(qkv_bias="no"),
    "MHA proj_bias='no'": lambda: mha(proj_bias="no"),
    "MHA fused='no'": lambda: mha(fused="no"),
    "MHA rope='no'": lambda: mha(rope="no"),
    "MHA return_weights='no'": lambda: mha()(X, return_weights="no"),
    "V2 qkv_bias='no'": lambda: ah.SelfAttentionV2(3, 2, qkv_bias="no"),
    "V1 return_weights='no'": lambda: ah.SelfAttentionV1(3, 2)(X, return_weights="no"),
    "causal qkv_bias='no'": lambda: ah.CausalAttention(3, 2, 6, 0.0, qkv_bias="no"),
    "wrapper qkv_bias='no'": lambda: ah.MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2, qkv_bias="no"),
    "wrapper return_weights='no'": lambda: ah.MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2)(X, return_weights="no"),
    "encoder return_weights='no'": lambda: ah.Encoder(
        ah.EncoderConfig(d_model=4, ffn_hidden=8, num_heads=2, num_layers=1)
    )(torch.randn(2, 5, 4), return_weights="no"),
    "generate use_cache='no'": lambda: ah.generate(
        ah.GPT(ah.GPTConfig(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=1, dropout=0.0)),
        _IDS,
        2,
        use_cache="no",
    ),
    "greedy_decode use_cache='no'": lambda: ah.greedy_decode(_seq2seq(), _IDS + 1, 1, 2, use_cache="no"),
    "tiled_attention causal='no'": lambda: ah.tiled_attention(*torch.randn(3, 4, 2), causal="no"),
    "partial_attention causal='no'": lambda: ah.partial_attention(*torch.randn(3, 4, 2), causal="no"),
    "ring_schedule causal='no'": lambda: ah_distributed().ring_schedule(3, causal="no"),
    "run oversubscribe='no'": lambda: ah_distributed().run(print, 1, oversubscribe="no"),
}
CASES |= {name: (call, TypeError, NOT_A_BOOL) for name, call in FLAG_CASES.items()}


def ah_distributed():
    import attention_helpers.distributed

    return attention_helpers.distributed


def _continue_cache(model_kwargs, other_kwargs, cache_batch=1, ids_batch=1):
    """Fill a cache with one GPT's 2 tokens, then continue it with another (or the same) GPT."""
    torch.manual_seed(0)
    first = ah.GPT(
        ah.GPTConfig(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2, dropout=0.0, **model_kwargs)
    )
    cache = first.new_cache(cache_batch)
    first(torch.zeros(cache_batch, 2, dtype=torch.long), cache)
    second = (
        first
        if other_kwargs is None
        else ah.GPT(
            ah.GPTConfig(
                vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2, dropout=0.0, **other_kwargs
            )
        )
    )
    return second(torch.zeros(ids_batch, 1, dtype=torch.long), cache)


CASES |= {
    # NaN and inf where a number is needed
    "rope with a nan position": (
        lambda: ah.rope_rotate(torch.randn(3, 4), torch.tensor([0.0, float("nan"), 2.0])),
        ValueError,
        ["positions", "finite", "(3,)"],
    ),
    "rope with an inf position": (
        lambda: ah.rope_rotate(torch.randn(3, 4), torch.tensor([0.0, 1.0, float("inf")])),
        ValueError,
        ["positions", "finite"],
    ),
    "generate at temperature nan": (
        lambda: ah.generate(
            ah.GPT(ah.GPTConfig(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=1, dropout=0.0)),
            _IDS,
            2,
            temperature=float("nan"),
        ),
        ValueError,
        ["temperature", "finite", "nan"],
    ),
    "sampling at temperature inf": (
        lambda: ah.sample_next_token(torch.zeros(1, 3), temperature=float("inf")),
        ValueError,
        ["temperature", "finite", "inf"],
    ),
    "run with timeout=True": (lambda: ah_distributed().run(print, 1, timeout=True), TypeError, ["timeout", "bool"]),
    "run with timeout=nan": (
        lambda: ah_distributed().run(print, 1, timeout=float("nan")),
        ValueError,
        ["timeout", "finite", "nan"],
    ),
    "layer norm eps nan": (lambda: ah.LayerNorm(4, eps=float("nan")), ValueError, ["eps", "finite", "nan"]),
    "encoder eps inf": (
        lambda: ah.EncoderConfig(d_model=4, ffn_hidden=8, num_heads=2, num_layers=1, eps=float("inf")),
        ValueError,
        ["eps", "finite", "inf"],
    ),
    # sizes
    "shard_lengths over 0 ranks": (
        lambda: ah_distributed().shard_lengths(5, 0),
        ValueError,
        ["world_size", "at least 1", "0"],
    ),
    "shard_lengths of -1 tokens": (
        lambda: ah_distributed().shard_lengths(-1, 2),
        ValueError,
        ["num_tokens", "at least 0", "-1"],
    ),
    "shard_lengths over 2.0 ranks": (lambda: ah_distributed().shard_lengths(5, 2.0), TypeError, ["world_size", "int"]),
    "partial_attention offset 1.5": (
        lambda: ah.partial_attention(*torch.randn(3, 4, 2), query_offset=1.5),
        TypeError,
        ["query_offset", "int", "1.5"],
    ),
    # what sampling picks from
    "sampling from a row of -inf": (
        lambda: ah.sample_next_token(torch.tensor([[0.0, 1.0], [float("-inf"), float("-inf")]])),
        ValueError,
        ["logits", "rows [1]", "finite", "(2, 2)"],
    ),
    "greedy pick from a row of -inf": (
        lambda: ah.sample_next_token(torch.full((1, 3), float("-inf")), 0),
        ValueError,
        ["logits", "rows [0]", "finite"],
    ),
    "top-k of logits with nan": (
        lambda: ah.top_k_filter(torch.tensor([[0.0, float("nan"), 1.0]]), 2),
        ValueError,
        ["logits", "nan", "(1, 3)"],
    ),
    # a cache continued by a model it does not fit
    "cache from a learned-positions GPT": (
        lambda: _continue_cache({}, {"positions": "rope"}),
        ValueError,
        ["cache", "positions='learned'", "positions='rope'"],
    ),
    "cache from another GPT of the same shape": (
        lambda: _continue_cache({}, {}),
        ValueError,
        ["cache", "another GPT", "new_cache"],
    ),
    "cache from a GPT with other num_kv_heads": (
        lambda: _continue_cache({}, {"num_kv_heads": 1}),
        ValueError,
        ["cache", "num_kv_heads=2", "num_kv_heads=1"],
    ),
    "cache of another head_dim": (
        lambda: ah.GPT(
            ah.GPTConfig(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2, dropout=0.0)
        )(_IDS, ah.KVCache(2, 1, 2, 8, 3)),
        ValueError,
        ["cache", "head_dim=3", "head_dim=4"],
    ),
    "cache of other layers": (
        lambda: ah.GPT(
            ah.GPTConfig(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2, dropout=0.0)
        )(_IDS, ah.KVCache(3, 1, 2, 8, 4)),
        ValueError,
        ["cache", "num_layers=3", "num_layers=2"],
    ),
    "cache of another batch": (
        lambda: _continue_cache({}, None, cache_batch=1, ids_batch=2),
        ValueError,
        ["cache", "batch=1", "batch=2"],
    ),
    "seq2seq cache of another num_kv_heads": (
        lambda: _seq2seq().decode(_IDS, *_seq2seq().encode(_IDS + 1), cache=ah.KVCache(1, 1, 1, 16, 4)),
        ValueError,
        ["cache", "num_kv_heads=1", "num_kv_heads=3"],
    ),
    # nothing to attend to
    "cross-attention to an empty memory": (
        lambda: mha(causal=False, context_length=None)(X, memory=torch.randn(2, 0, 3)),
        ValueError,
        ["memory", "at least one token", "(2, 0, 3)"],
    ),
    "encoder-decoder with an empty source": (
        lambda: ah.EncoderDecoder(
            ah.EncoderDecoderConfig(
                d_model=4,
                num_heads=2,
                num_encoder_layers=1,
                num_decoder_layers=1,
                ffn_hidden=8,
                dropout=0.0,
                context_length=8,
            )
        )(torch.randn(2, 0, 4), torch.randn(2, 3, 4)),
        ValueError,
        ["src", "at least one token", "(2, 0, 4)"],
    ),
    "decoding against an empty memory": (
        lambda: ah.EncoderDecoder(
            ah.EncoderDecoderConfig(
                d_model=4,
                num_heads=2,
                num_encoder_layers=1,
                num_decoder_layers=1,
                ffn_hidden=8,
                dropout=0.0,
                context_length=8,
            )
        ).decode(torch.randn(2, 3, 4), torch.randn(2, 0, 4)),
        ValueError,
        ["memory", "at least one token", "(2, 0, 4)"],
    ),
    "seq2seq with empty source ids": (
        lambda: _seq2seq()(torch.zeros(2, 0, dtype=torch.long), _IDS.expand(2, 3)),
        ValueError,
        ["src_ids", "at least one token", "(2, 0)"],
    ),
}


def _seq2seq():
    torch.manual_seed(0)
    return ah.Seq2SeqTransformer(small_seq2seq_config(context_length=16)).eval()


@pytest.mark.parametrize(("call", "error", "fragments"), list(CASES.values()), ids=list(CASES))
def test_bad_input_raises_a_clear_error(call, error, fragments):
    with pytest.raises(error) as info:
        call()
    assert type(info.value) in (TypeError, ValueError)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"


def test_a_numpy_integer_is_a_valid_layer_norm_width():
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(ah.LayerNorm(np.int64(4))(x), ah.LayerNorm(4)(x))


def test_the_integer_mask_hint_does_not_suggest_bool():
    """`.bool()` of a Hugging Face attention_mask hides the real tokens: the hint must not offer it as the fix."""
    with pytest.raises(TypeError) as info:
        mha()(X, key_padding_mask=torch.ones(2, 6, dtype=torch.long))
    assert "key_padding_mask = attention_mask == 0" in str(info.value)
    assert "convert a 0/1 mask with key_padding_mask.bool()" not in str(info.value)


def test_a_one_dimensional_padding_mask_still_broadcasts_over_the_batch():
    """(num_keys,) is one entry per key, shared by every sequence: allowed, and equal to the expanded mask."""
    torch.manual_seed(0)
    layer = mha(causal=False, context_length=None).eval()
    shared = torch.tensor([False, False, False, False, True, True])
    torch.testing.assert_close(layer(X, shared), layer(X, shared.expand(2, 6)))


BATCH_OF_NONE = {
    "MultiHeadAttention": lambda: mha()(torch.randn(0, 6, 3)),
    "grouped-query attention": lambda: mha(d_out=8, num_heads=4, num_kv_heads=2)(torch.randn(0, 6, 3)),
    "cross-attention": lambda: mha(causal=False, context_length=None)(
        torch.randn(0, 6, 3), memory=torch.randn(0, 2, 3)
    ),
    "Encoder": lambda: ah.Encoder(ah.EncoderConfig(d_model=4, ffn_hidden=8, num_heads=2, num_layers=2))(
        torch.randn(0, 5, 4)
    ),
    "GPT": lambda: ah.GPT(
        ah.GPTConfig(
            vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2, dropout=0.0, positions="rope"
        )
    )(torch.zeros(0, 3, dtype=torch.long)),
    "generate": lambda: ah.generate(
        ah.GPT(ah.GPTConfig(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2, dropout=0.0)),
        torch.zeros(0, 3, dtype=torch.long),
        2,
    ),
    "greedy_decode": lambda: ah.greedy_decode(_seq2seq(), torch.ones(0, 4, dtype=torch.long), 1, 3),
}
BATCH_OF_NONE_SHAPES = {
    "MultiHeadAttention": (0, 6, 4),
    "grouped-query attention": (0, 6, 8),
    "cross-attention": (0, 6, 4),
    "Encoder": (0, 5, 4),
    "GPT": (0, 3, 11),
    "generate": (0, 5),
    "greedy_decode": (0, 3),
}


@pytest.mark.parametrize("name", list(BATCH_OF_NONE))
def test_a_batch_of_no_sequence_gives_an_empty_result(name):
    """As PyTorch's modules do (nn.MultiheadAttention, nn.TransformerEncoder): batch 0 in, batch 0 out."""
    with torch.no_grad():
        assert tuple(BATCH_OF_NONE[name]().shape) == BATCH_OF_NONE_SHAPES[name]


def test_torch_agrees_that_a_batch_of_none_is_valid():
    torch_mha = nn.MultiheadAttention(4, 2, batch_first=True)
    x = torch.randn(0, 6, 4)
    assert torch_mha(x, x, x)[0].shape == (0, 6, 4)


def test_a_cache_still_continues_its_own_model():
    """The refusals above must not refuse the right call: the model that made the cache continues it."""
    torch.manual_seed(0)
    model = ah.GPT(
        ah.GPTConfig(
            vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2, dropout=0.0, positions="rope"
        )
    ).eval()
    ids = torch.randint(0, 11, (2, 5))
    cache = model.new_cache(2)
    with torch.no_grad():
        stepwise = torch.cat([model(ids[:, :3], cache), model(ids[:, 3:], cache)], dim=1)
        torch.testing.assert_close(stepwise, model(ids), atol=1e-5, rtol=1e-4)

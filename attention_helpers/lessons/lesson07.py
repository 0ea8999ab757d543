"""Lesson 07's checks: a padding mask without a loop, LayerNorm with ``torch.var``, and a pre-LN encoder layer from
the package's parts, compared with ``nn.TransformerEncoderLayer(norm_first=True)`` holding the same weights."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention
from ..encoder import EncoderLayer, FeedForward, LayerNorm
from . import ATTENTION_KERNELS, NORM_KERNELS, Exercise, Mistake, WrongFormError, hidden_generator

SEED = 707


def _padding_mask_loop(lengths: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """True where position t of sequence b is padding (t >= lengths[b]), the slow, obvious way."""
    return torch.tensor([[t >= length for t in range(num_tokens)] for length in lengths.tolist()], dtype=torch.bool)


# (lengths, num_tokens): a full row, an all-padding row, a batch of 1, odd lengths; never the lesson's [6, 4, 2]
_PADDING_CASES = (([7, 3, 5, 1], 7), ([1, 5, 0, 3, 5], 5), ([3], 7), ([9, 2], 9))


def _padding_mistakes(lengths: torch.Tensor, num_tokens: int) -> list[Mistake]:
    positions, lengths = torch.arange(num_tokens), lengths[:, None]
    return [
        Mistake("your mask is True at the real tokens", "it is True at padding, to hide it", positions < lengths),
        *(
            Mistake("your mask is one position off", "position t is padding when t >= length", wrong)
            for wrong in (positions > lengths, positions >= lengths - 1)
        ),
        Mistake("your mask is (num_tokens, batch)", "put the sequences on the rows", (positions >= lengths).T),
    ]


# ``padding_mask(lengths, num_tokens)`` against a loop, on hidden lengths.
exercise_1 = Exercise(
    "Exercise 1",
    reference=_padding_mask_loop,
    cases=lambda: [(torch.tensor(lengths), num_tokens) for lengths, num_tokens in _PADDING_CASES],
    hint="position t of a sequence is padding when t is at least its length: compare a row of all positions with a "
    "column of the lengths, and broadcasting does every pair at once (reread '7. Padding')",
    describe=lambda n, total, lengths, tokens: f"on case {n} of {total} (lengths {lengths.tolist()}, {tokens} tokens)",
    mistakes=_padding_mistakes,
    rule="the exercise asks for the mask without a Python loop: one comparison, broadcast over the batch and the "
    "positions, builds it at once (reread '7. Padding')",
    loop_free=lambda: [(torch.tensor(lengths), n) for lengths, n in (([2, 1], 3), ([30, 7, 19, 1, 25, 12], 31))],
).check


def _layer_norm_cases() -> list[tuple]:
    """(x, gamma, beta, eps): odd widths, a batch of 1, tokens whose variance is below eps (where eps goes matters)
    and a single token ``(d,)``."""
    generator, cases = hidden_generator(SEED), []
    shapes = (((4, 3), 1e-5, 1), ((1, 5, 7), 1e-5, 3), ((3, 2, 2, 6), 1e-3, 1), ((2, 9), 1e-2, 0.02), ((5,), 1e-5, 2))
    for shape, eps, spread in shapes:
        gamma, beta = torch.randn(2, shape[-1], generator=generator)
        x = spread * torch.randn(shape, generator=generator) + torch.randn(shape[:-1] + (1,), generator=generator)
        cases.append((x, gamma, beta, eps))
    return cases


def _normalise(x, gamma, beta, eps, *, correction=0, where_eps="inside", spread="var", dim=-1, affine=True):
    """LayerNorm by hand, or with one plausible mistake (the keywords)."""
    var = x.var(dim=dim, keepdim=True, correction=correction)
    var = var.sqrt() if spread == "std" else var
    denominator = {"none": var.sqrt(), "inside": (var + eps).sqrt(), "outside": var.sqrt() + eps}[where_eps]
    normalized = (x - x.mean(dim=dim, keepdim=True)) / denominator
    return gamma * normalized + beta if affine else normalized


EPS_HINT = "add eps to the variance, inside the square root: it keeps a constant token from dividing by zero"
_LAYER_NORM_MISTAKES = (
    ({"correction": 1}, "the variance divides by d - 1", "divide by d: see the correction argument of x.var"),
    ({"where_eps": "outside"}, "eps is added after the square root", EPS_HINT),
    ({"where_eps": "none"}, "eps is missing: tokens whose variance is below eps come out far too large", EPS_HINT),
    ({"spread": "std"}, "you divided by the square root of the standard deviation", "divide by the standard deviation"),
    ({"affine": False}, "gamma and beta are not applied", "after normalising, scale by gamma and shift by beta"),
    ({"dim": 0}, "the statistics run over the first axis", "each token is normalised on its own, over dim=-1"),
)


# ``my_layer_norm(x, gamma, beta, eps)`` with ``x.var``, against ``F.layer_norm`` on hidden inputs.
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda x, gamma, beta, eps: F.layer_norm(x, x.shape[-1:], gamma, beta, eps),
    cases=_layer_norm_cases,
    hint="each token is normalised on its own: subtract its mean, divide by the square root of its biased variance "
    "plus eps, then scale by gamma and shift by beta (reread '1. Layer normalisation')",
    mistakes=lambda *case: [
        *(Mistake(meaning, hint, _normalise(*case, **keywords)) for keywords, meaning, hint in _LAYER_NORM_MISTAKES),
        Mistake(
            "your function goes wrong on a single token, x of shape (d,)",
            "x may have any number of axes, (..., d), one token alone too: normalise over the last axis",
            matches=lambda answer: case[0].dim() == 1,
        ),
    ],
    forbidden=NORM_KERNELS,
    rule="the exercise asks you to write LayerNorm from a mean, x.var and a square root, not to call a normalisation "
    "of PyTorch's (layer_norm, group_norm, batch_norm...) or the package's (reread '1. Layer normalisation')",
).check


def _pre_ln_block(torch_layer, x, *, residuals=(True, True), norms=(1, 2), post_ln=False, **wiring):
    """The pre-LN block from the package's parts with copies of ``torch_layer``'s weights, or one plausible
    miswiring (to name a mistake, never as the reference): ``norms`` are torch_layer's (1, 2) or fresh ones (0)."""
    layer = EncoderLayer.from_torch(torch_layer).eval()
    if wiring.get("causal"):
        layer.attention = MultiHeadAttention.from_torch(torch_layer.self_attn, causal=True, context_length=x.shape[1])
    layer_norms = (LayerNorm(x.shape[-1], eps=torch_layer.norm1.eps), layer.norm1, layer.norm2)  # 0: gamma 1, beta 0
    for sublayer, norm, residual in zip((layer.attention, layer.ffn), norms, residuals, strict=True):
        h = layer_norms[norm](x)
        if post_ln:
            x = layer_norms[norm](x + sublayer(x))
        else:
            x = ((h if wiring.get("residual_normalised") else x) + sublayer(h)) if residual else sublayer(h)
    return x


PRE_LN_HINT = (
    "pre-LN normalises each sublayer's input and adds the sublayer's output to the un-normalised x, attention first "
    "then the feed-forward network; each part holds copies of torch_layer's matching part (reread '4. One encoder "
    "layer: post-LN and pre-LN')"
)
# Plausible wrong blocks: (the wirings given to _pre_ln_block, what they compute, hint)
_BLOCK_MISTAKES = (
    ([{"post_ln": True}], "your block is post-LN: it normalises after adding the residual", PRE_LN_HINT),
    (
        [{"residuals": (False, True)}, {"residuals": (True, False)}, {"residuals": (False, False)}],
        "a sublayer has no residual connection",
        "add each sublayer's input back to its output",
    ),
    ([{"residual_normalised": True}], "the residual adds the normalised x, not x itself", PRE_LN_HINT),
    ([{"norms": (2, 1)}, {"norms": (1, 1)}], "norm1 and norm2 are not each before their own sublayer", PRE_LN_HINT),
    ([{"norms": (0, 0)}], "your LayerNorms do not hold torch_layer's weights: gamma still 1, beta 0", PRE_LN_HINT),
    ([{"causal": True}], "your attention uses a causal mask", "an encoder has no causal mask: causal=False"),
)


def _block_cases() -> list[tuple]:
    """(torch_layer, x): PyTorch's pre-LN layer with random weights everywhere (LayerNorms included, so that a
    mix-up shows) and its input; a batch of 1, odd lengths, one token, one head."""
    cases, shapes = [], ((1, 7, 12, 3, 20), (2, 5, 8, 2, 16), (3, 1, 6, 1, 10))
    for number, (batch, num_tokens, d_model, num_heads, ffn_hidden) in enumerate(shapes, start=1):
        generator = hidden_generator(SEED + number)
        with torch.random.fork_rng(devices=[]), torch.no_grad():  # the reader's random state left as it was
            torch.manual_seed(SEED + number)
            layer = nn.TransformerEncoderLayer(d_model, num_heads, ffn_hidden, 0.0, batch_first=True, norm_first=True)
            for parameter in layer.parameters():
                parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
        x = 3 * torch.randn(batch, num_tokens, d_model, generator=hidden_generator(SEED + 10 * number)) + 1
        cases.append((layer.eval(), x))
    return cases


def _build_and_run(block_class, torch_layer: nn.TransformerEncoderLayer, x: torch.Tensor):
    """Build the reader's block from ``torch_layer`` and run it on ``x`` in evaluation mode; an output that follows
    torch_layer's parameters (0.5 is added to them: a block holding copies does not change) is of the wrong form."""
    if isinstance(block_class, nn.Module):
        raise WrongFormError("expected a class, got a module", "pass the class: the check builds one from torch_layer")
    block = block_class(torch_layer)
    if isinstance(block, nn.Module):
        block.eval()  # compared in evaluation mode: no dropout
    answer = block(x.clone())
    for parameter in torch_layer.parameters():
        parameter.add_(0.5)
    again = block(x.clone())
    if isinstance(answer, torch.Tensor) and isinstance(again, torch.Tensor) and not torch.equal(answer, again):
        raise WrongFormError(
            "your block still uses torch_layer's own modules or parameters",
            "give the package's parts copies of the parameters: the from_torch constructors and load_state_dict copy",
        )
    return answer


# ``block_class(torch_layer)``: a module whose forward equals the pre-LN ``torch_layer`` (weights copied).
exercise_3 = Exercise(
    "Exercise 3",
    reference=lambda torch_layer, x: torch_layer(x),
    cases=_block_cases,
    run=_build_and_run,
    hint=PRE_LN_HINT,
    mistakes=lambda torch_layer, x: [
        Mistake(meaning, hint, _pre_ln_block(torch_layer, x, **wiring))
        for wirings, meaning, hint in _BLOCK_MISTAKES
        for wiring in wirings
    ],
    done=" on all {n} hidden cases, equal to nn.TransformerEncoderLayer(norm_first=True)",
    returned_none="return x from forward, after the two sublayers",
    forbidden=ATTENTION_KERNELS | NORM_KERNELS,
    rule="the exercise asks you to assemble the layer from the package's parts (ah.MultiHeadAttention, ah.LayerNorm, "
    "ah.FeedForward), not to run PyTorch's layer, its attention or its LayerNorm, nor the package's EncoderLayer",
    allowed=(MultiHeadAttention, LayerNorm, FeedForward),
).check

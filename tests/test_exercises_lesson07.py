"""Lesson 07's checks: nothing before an attempt, a named mistake for each plausible wrong answer, and the
right answers accepted."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attention_helpers as ah
from attention_helpers.lessons import lesson07 as checks


def test_unanswered(capsys):
    assert checks.exercise_1(None) is False
    assert checks.exercise_2(None) is False
    assert checks.exercise_3(None) is False
    assert capsys.readouterr().out == "".join(
        f"Exercise {n}: Not answered yet (the answer is still None).\n" for n in (1, 2, 3)
    )


# Exercise 1: padding mask


def test_exercise_1_accepts_a_broadcast_comparison(capsys):
    assert checks.exercise_1(lambda lengths, n: torch.arange(n)[None, :] >= lengths[:, None]) is True
    assert capsys.readouterr().out == "Exercise 1: correct on all 4 hidden cases.\n"


@pytest.mark.parametrize(
    ("answer", "problem", "hint"),
    [
        (lambda lengths, n: torch.arange(n)[None, :] < lengths[:, None], "True at the real tokens", "True at padding"),
        (lambda lengths, n: torch.arange(n)[None, :] > lengths[:, None], "one position off", "t >= length"),
        (
            lambda lengths, n: (torch.arange(n)[None, :] >= lengths[:, None]).T,
            "(num_tokens, batch)",
            "sequences on the rows",
        ),
        (
            lambda lengths, n: (torch.arange(n)[None, :] >= lengths[:, None]).float(),
            "dtype is torch.float32",
            "7. Padding",
        ),
    ],
)
def test_exercise_1_names_the_mistake(capsys, answer, problem, hint):
    assert checks.exercise_1(answer) is False
    before, after = capsys.readouterr().out.split(" Hint: ")
    assert before.startswith("Exercise 1: not yet, ") and problem in before and hint in after


# Exercise 2: LayerNorm with x.var


def layer_norm(x, gamma, beta, eps, correction=0, eps_inside=True):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, correction=correction)
    denominator = torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps
    return gamma * (x - mean) / denominator + beta


def test_exercise_2_accepts_the_biased_variance(capsys):
    assert checks.exercise_2(layer_norm) is True
    assert capsys.readouterr().out == "Exercise 2: correct on all 5 hidden cases.\n"


def layer_norm_by_moments(x, gamma, beta, eps):
    """Right: the variance as the mean square minus the squared mean, rsqrt instead of a division."""
    mean = x.mean(dim=-1, keepdim=True)
    var = (x * x).mean(dim=-1, keepdim=True) - mean**2
    return (x - mean) * torch.rsqrt(var + eps) * gamma + beta


def layer_norm_of_flat_tokens(x, gamma, beta, eps):
    """Right: every token a row of a 2-D view, normalised there, then the input's shape back."""
    rows = x.reshape(-1, x.shape[-1])
    centred = rows - rows.mean(dim=1, keepdim=True)
    normalized = centred / (centred.pow(2).mean(dim=1, keepdim=True) + eps).sqrt()
    return (normalized * gamma + beta).reshape(x.shape)


def test_exercise_2_tries_a_single_token(capsys):
    for right in (layer_norm, layer_norm_by_moments, layer_norm_of_flat_tokens):
        assert checks.exercise_2(right) is True, capsys.readouterr().out
    assert capsys.readouterr().out == "Exercise 2: correct on all 5 hidden cases.\n" * 3
    assert (
        checks.exercise_2(lambda x, gamma, beta, eps: x if x.dim() == 1 else layer_norm(x, gamma, beta, eps)) is False
    )
    before, after = capsys.readouterr().out.split(" Hint: ")
    assert "goes wrong on a single token, x of shape (d,)" in before and "(..., d)" in after


@pytest.mark.parametrize(
    "library_layer_norm",
    [
        lambda x, gamma, beta, eps: F.layer_norm(x, x.shape[-1:], gamma, beta, eps),
        lambda x, gamma, beta, eps: torch.layer_norm(x, x.shape[-1:], gamma, beta, eps),
        lambda x, gamma, beta, eps: gamma * nn.LayerNorm(x.shape[-1], eps=eps, elementwise_affine=False)(x) + beta,
        lambda x, gamma, beta, eps: gamma * ah.LayerNorm(x.shape[-1], eps=eps)(x) + beta,
        lambda x, gamma, beta, eps: torch.native_layer_norm(x, x.shape[-1:], gamma, beta, eps)[0],
        lambda x, gamma, beta, eps: (
            F.group_norm(x.reshape(-1, x.shape[-1]), 1, None, None, eps).view_as(x) * gamma + beta
        ),
        lambda x, gamma, beta, eps: F.instance_norm(x.reshape(1, -1, x.shape[-1]), eps=eps).view_as(x) * gamma + beta,
    ],
)
def test_exercise_2_rejects_the_library_layer_norm_it_asks_for(library_layer_norm, capsys):
    assert checks.exercise_2(library_layer_norm) is False
    out = capsys.readouterr().out
    assert "your code runs " in out and "norm" in out and "x.var" in out.split("Hint: ")[1]


def test_exercise_2_names_a_missing_eps(capsys):
    def no_eps(x, gamma, beta, eps):
        mean, var = x.mean(dim=-1, keepdim=True), x.var(dim=-1, keepdim=True, correction=0)
        return gamma * (x - mean) / torch.sqrt(var) + beta

    assert checks.exercise_2(no_eps) is False
    assert "eps is missing" in capsys.readouterr().out


def test_exercise_1_hidden_cases_never_use_the_lessons_example():
    assert all(lengths != [6, 4, 2] for lengths, _ in checks._PADDING_CASES), "the lesson prints lengths [6, 4, 2]"


@pytest.mark.parametrize(
    ("answer", "problem", "hint"),
    [
        (
            lambda x, g, b, eps: layer_norm(x, g, b, eps, correction=1),
            "divides by d - 1",
            "correction argument of x.var",
        ),
        (
            lambda x, g, b, eps: layer_norm(x, g, b, eps, eps_inside=False),
            "after the square root",
            "inside the square root",
        ),
        (lambda x, g, b, eps: layer_norm(x, torch.ones_like(g), torch.zeros_like(b), eps), "gamma and beta", "gamma"),
        (lambda x, g, b: x, "raised TypeError", "biased variance"),
    ],
)
def test_exercise_2_names_the_mistake(capsys, answer, problem, hint):
    assert checks.exercise_2(answer) is False
    before, after = capsys.readouterr().out.split(" Hint: ")
    assert before.startswith("Exercise 2: not yet, ") and problem in before and hint in after


# Exercise 3: a pre-LN layer from the package's parts


class PreLN(nn.Module):
    def __init__(self, torch_layer):
        super().__init__()
        self.attention = ah.MultiHeadAttention.from_torch(torch_layer.self_attn)
        self.norm1 = ah.LayerNorm.from_torch(torch_layer.norm1)
        self.norm2 = ah.LayerNorm.from_torch(torch_layer.norm2)
        self.ffn = ah.FeedForward(torch_layer.linear1.in_features, torch_layer.linear1.out_features)  # p = 0.1
        self.ffn.linear1.load_state_dict(torch_layer.linear1.state_dict())
        self.ffn.linear2.load_state_dict(torch_layer.linear2.state_dict())

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class PostLN(PreLN):
    def forward(self, x):
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ffn(x))


class NoAttentionResidual(PreLN):
    def forward(self, x):
        x = self.attention(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class NoFeedForwardResidual(PreLN):
    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return self.ffn(self.norm2(x))


class ResidualFromNormalised(PreLN):
    def forward(self, x):
        h = self.norm1(x)
        x = h + self.attention(h)
        h = self.norm2(x)
        return h + self.ffn(h)


class CallsTorchsLayer(nn.Module):
    def __init__(self, torch_layer):
        super().__init__()
        self.layer = torch_layer

    def forward(self, x):
        return self.layer(x)


class SharesTorchsNorm(PreLN):
    def __init__(self, torch_layer):
        super().__init__(torch_layer)
        self.norm1 = torch_layer.norm1  # PyTorch's module itself, not a copy


class DeepCopiesTorchsLayer(CallsTorchsLayer):
    def __init__(self, torch_layer):
        super().__init__(copy.deepcopy(torch_layer))


class SharesTorchsLinear(PreLN):
    def __init__(self, torch_layer):
        super().__init__(torch_layer)
        self.ffn.linear1 = torch_layer.linear1  # PyTorch's module itself, not a copy


class ConvertsToTorch(CallsTorchsLayer):
    def __init__(self, torch_layer):
        super().__init__(ah.to_torch(ah.EncoderLayer.from_torch(torch_layer)))


class WrapsEncoderLayer(nn.Module):
    def __init__(self, torch_layer):
        super().__init__()
        self.layer = ah.EncoderLayer.from_torch(torch_layer)

    def forward(self, x):
        return self.layer(x)


def test_exercise_3_accepts_the_pre_ln_block_and_sets_it_to_eval_mode(capsys):
    assert checks.exercise_3(PreLN) is True  # its FeedForward has dropout 0.1: the check compares in eval mode
    assert capsys.readouterr().out == (
        "Exercise 3: correct on all 3 hidden cases, equal to nn.TransformerEncoderLayer(norm_first=True).\n"
    )


@pytest.mark.parametrize(
    ("answer", "problem", "hint"),
    [
        (PostLN, "your block is post-LN", "pre-LN normalises each sublayer's input"),
        (NoAttentionResidual, "a sublayer has no residual connection", "add each sublayer's input back"),
        (NoFeedForwardResidual, "a sublayer has no residual connection", "add each sublayer's input back"),
        (ResidualFromNormalised, "the residual adds the normalised x", "to the un-normalised x"),
        (CallsTorchsLayer, "your code runs PyTorch's", "assemble the layer from the package's parts"),
        (DeepCopiesTorchsLayer, "your code runs PyTorch's", "assemble the layer from the package's parts"),
        (SharesTorchsNorm, "your code runs PyTorch's layer_norm kernel", "assemble the layer from the package's parts"),
        (SharesTorchsLinear, "still uses torch_layer's own modules", "copies of the parameters"),
        (WrapsEncoderLayer, "runs the package's EncoderLayer", "assemble the layer from the package's parts"),
        (ConvertsToTorch, "runs the package's", "assemble the layer from the package's parts"),
        (lambda torch_layer: lambda x: None, "returned None", "return x from forward"),
    ],
)
def test_exercise_3_names_the_mistake(capsys, answer, problem, hint):
    assert checks.exercise_3(answer) is False
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    before, after = out.split(" Hint: ")
    assert before.startswith("Exercise 3: not yet, ") and problem in before and hint in after


def test_exercise_3_reference_is_pytorchs_pre_ln_layer():
    layer = checks._block_cases()[0][0]
    assert isinstance(layer, nn.TransformerEncoderLayer) and layer.norm_first and not layer.training
    assert not torch.allclose(layer.norm1.weight, torch.ones(12))  # random LayerNorms, so a swap shows


class ReusesNorm1(PreLN):
    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.ffn(self.norm1(x))


class FreshNorms(PreLN):
    def __init__(self, torch_layer):
        super().__init__(torch_layer)
        self.norm1 = ah.LayerNorm(torch_layer.linear1.in_features)
        self.norm2 = ah.LayerNorm(torch_layer.linear1.in_features)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (ReusesNorm1, "norm1 and norm2 are not each before their own sublayer"),
        (FreshNorms, "do not hold torch_layer's weights"),
    ],
)
def test_exercise_3_names_norms_reused_or_not_copied(capsys, answer, problem):
    assert checks.exercise_3(answer) is False
    assert problem in capsys.readouterr().out

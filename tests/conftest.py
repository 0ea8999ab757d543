import sys

import matplotlib
import pytest
import torch

import attention_helpers as ah

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def perturb_(module: torch.nn.Module, std: float = 0.3) -> torch.nn.Module:
    """Give every parameter random values, so that no test passes thanks to ones/zeros initialisation
    (LayerNorm's gamma=1, beta=0, zero biases)."""
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, std)
    return module


def small_gpt_config(**changes) -> ah.GPTConfig:
    """A GPT small enough for a unit test: vocab_size != d_model != context_length, so a mixed-up axis shows as a
    shape error; ``changes`` overrides any field."""
    sizes = dict(vocab_size=11, context_length=12, d_model=16, num_heads=4, num_layers=2, dropout=0.0)
    return ah.GPTConfig(**{**sizes, **changes})


def small_seq2seq_config(**changes) -> ah.Seq2SeqConfig:
    """A sequence-to-sequence model small enough for a unit test, with ``d_model != ffn_hidden`` and three heads;
    ``changes`` overrides any field."""
    sizes = dict(
        src_vocab_size=13,
        tgt_vocab_size=9,
        d_model=12,
        num_heads=3,
        num_encoder_layers=1,
        num_decoder_layers=1,
        ffn_hidden=20,
    )
    return ah.Seq2SeqConfig(**{**sizes, **changes})


def small_gpt(dropout=0.0, context_length=12, vocab_size=11):
    """:func:`small_gpt_config`'s GPT with its weights perturbed."""
    torch.manual_seed(0)
    model = ah.GPT(small_gpt_config(dropout=dropout, context_length=context_length, vocab_size=vocab_size))
    with torch.no_grad():  # larger than GPT-2's 0.02 initialisation, so that logits differ clearly between tokens
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.3)
    return model.eval()


def check_calls(function) -> list[str]:
    """The argument checks (functions of ``attention_helpers._checks``, nested ones too) that ``function()`` runs,
    in order, seen by a profiler rather than by patching the names the modules imported."""
    import attention_helpers._checks as checks

    calls = []

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename == checks.__file__ and not code.co_name.startswith("<"):
            calls.append(code.co_name)  # a function, not a comprehension inside one

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return calls

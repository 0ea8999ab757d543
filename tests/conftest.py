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


def small_gpt(dropout=0.0, context_length=12, vocab_size=11):
    """vocab_size != d_model != context_length, so a mixed-up axis shows as a shape error."""
    torch.manual_seed(0)
    model = ah.GPT(
        ah.GPTConfig(
            vocab_size=vocab_size, context_length=context_length, d_model=16, num_heads=4, num_layers=2, dropout=dropout
        )
    )
    with torch.no_grad():  # larger than GPT-2's 0.02 initialisation, so that logits differ clearly between tokens
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.3)
    return model.eval()

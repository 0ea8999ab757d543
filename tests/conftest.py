import matplotlib
import pytest
import torch

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

"""The running example: six 3-dimensional word vectors for "Your journey starts with one step".

The numbers are the hand-picked toy embeddings of chapter 3 of Sebastian Raschka's *Build a Large Language
Model (From Scratch)*, small enough to follow by hand and to draw in 3D. Real models learn embeddings with
hundreds of dimensions.
"""

import torch

WORDS = ("Your", "journey", "starts", "with", "one", "step")

_TOY_EMBEDDINGS = (
    (0.43, 0.15, 0.89),  # Your
    (0.55, 0.87, 0.66),  # journey
    (0.57, 0.85, 0.64),  # starts
    (0.22, 0.58, 0.33),  # with
    (0.77, 0.25, 0.10),  # one
    (0.05, 0.80, 0.55),  # step
)


def toy_embeddings(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Return a fresh ``(6, 3)`` tensor, one row per word of :data:`WORDS`.

    A new tensor each call, so a notebook that edits it in place cannot change the next caller's copy.
    """
    return torch.tensor(_TOY_EMBEDDINGS, dtype=dtype)

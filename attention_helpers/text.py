"""The text lesson 10 trains on, and a character-level tokenizer for it.

``shakespeare_text()`` returns seven public-domain plays shipped inside the package (``texts/shakespeare.txt``;
``texts/SOURCE.md`` says where they come from and what was removed), so nothing is downloaded at run time.
"""

from __future__ import annotations

from importlib import resources

import torch


def shakespeare_text() -> str:
    """About 0.94 million characters of Shakespeare's plays (plain ASCII, one string)."""
    return resources.files(__package__).joinpath("texts", "shakespeare.txt").read_text(encoding="ascii")


class CharTokenizer:
    """Map each distinct character of a text to an integer id, and back.

    The vocabulary is the sorted set of characters in the text the tokenizer is built from, so the same
    text always gives the same ids. ``encode`` refuses characters it has never seen, naming them.

    Example::

        tokenizer = CharTokenizer("hello")   # vocab: e h l o
        tokenizer.encode("hole")             # tensor([1, 3, 2, 0])
        tokenizer.decode([1, 3, 2, 0])       # "hole"
    """

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text:
            raise ValueError("text must hold at least one character to build a vocabulary from")
        self.chars = sorted(set(text))
        self.char_to_id = {char: i for i, char in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """Return the ids of ``text``'s characters, a ``(len(text),)`` int64 tensor."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        unknown = sorted(set(text) - self.char_to_id.keys())
        if unknown:
            raise ValueError(
                f"text holds {len(unknown)} character(s) that are not in the vocabulary: {''.join(unknown)!r}; "
                f"the vocabulary has {self.vocab_size} characters: {''.join(self.chars)!r}"
            )
        return torch.tensor([self.char_to_id[char] for char in text], dtype=torch.long)

    def decode(self, token_ids) -> str:
        """Return the text of ``token_ids``, a 1-D tensor or a sequence of ints."""
        if isinstance(token_ids, torch.Tensor):
            if token_ids.is_floating_point() or token_ids.is_complex() or token_ids.dim() != 1:
                raise TypeError(
                    f"token_ids must be a 1-D integer tensor, got dtype {token_ids.dtype} "
                    f"with {token_ids.dim()} dimension(s)"
                )
            token_ids = token_ids.tolist()
        bad = [i for i in token_ids if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token ids must be ints in [0, {self.vocab_size}), got {bad[:5]}")
        return "".join(self.chars[i] for i in token_ids)

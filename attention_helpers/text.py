"""The text lesson 10 trains on, a character-level tokenizer for it, and how a language model is scored on it.

``shakespeare_text()`` returns seven public-domain plays shipped inside the package (``texts/shakespeare.txt``;
``texts/SOURCE.md`` says where they come from and what was removed), so nothing is downloaded at run time.
"""

from __future__ import annotations

from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_instance, check_positive_int, check_tensor, check_token_ids, shape_str
from .decoding import eval_mode


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
        check_instance("text", text, str, "a str")
        if not text:
            raise ValueError("text must hold at least one character to build a vocabulary from")
        self.chars = sorted(set(text))
        self.char_to_id = {char: i for i, char in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """Return the ids of ``text``'s characters, a ``(len(text),)`` int64 tensor."""
        check_instance("text", text, str, "a str")
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


class BigramLanguageModel(nn.Module):
    """The baseline: predict the next token from the current one alone, with a ``(vocab_size, vocab_size)`` table.

    ``BigramLanguageModel.from_counts(ids, vocab_size)`` fills the table with the log of how often each pair
    follows in ``ids`` (plus one, so that no pair has probability zero): the best a model can do that sees
    one token only. Input ``(batch, num_tokens)`` int64 ids; output ``(batch, num_tokens, vocab_size)`` logits.
    """

    def __init__(self, vocab_size: int):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        self.vocab_size = vocab_size
        self.logits = nn.Parameter(torch.zeros(vocab_size, vocab_size))  # row = current token, column = next

    @classmethod
    def from_counts(cls, token_ids: torch.Tensor, vocab_size: int) -> BigramLanguageModel:
        """Fit the table to a ``(num_tokens,)`` id sequence by counting which token follows which."""
        check_positive_int("vocab_size", vocab_size)
        check_token_ids("token_ids", token_ids, vocab_size, "(num_tokens,)", ndim=1)
        if len(token_ids) < 2:
            raise ValueError(
                f"token_ids must hold at least 2 tokens to count which follows which, got shape "
                f"{shape_str(token_ids.shape)} (is the text empty?)"
            )
        model = cls(vocab_size)
        counts = torch.ones(vocab_size, vocab_size)  # add-one smoothing
        counts.index_put_((token_ids[:-1], token_ids[1:]), torch.ones(len(token_ids) - 1), accumulate=True)
        with torch.no_grad():
            model.logits.copy_(torch.log(counts / counts.sum(dim=1, keepdim=True)))
        return model

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        check_token_ids("token_ids", token_ids, self.vocab_size)
        return self.logits[token_ids]


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per token) of ``logits`` ``(batch, num_tokens, vocab_size)`` against the next
    tokens ``targets`` ``(batch, num_tokens)``, int64 or int32 ids in ``[0, vocab_size)``."""
    check_tensor("logits", logits, (3,), "(batch, num_tokens, vocab_size)", "num_tokens")
    check_token_ids("targets", targets, logits.shape[-1])
    if targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits (batch, num_tokens, vocab_size) and targets (batch, num_tokens) must match, got logits "
            f"{shape_str(logits.shape)} and targets {shape_str(targets.shape)}"
        )
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten().long())  # cross_entropy takes int64 only


def next_token_batch(
    data: torch.Tensor, batch_size: int, num_tokens: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut ``batch_size`` random windows from the ``(len,)`` id sequence ``data``.

    Returns ``inputs`` and ``targets``, each ``(batch_size, num_tokens)``: the targets are the inputs shifted
    one token to the left, so ``targets[b, i]`` is the token that follows ``inputs[b, :i + 1]``.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("num_tokens", num_tokens)
    if data.dim() != 1 or len(data) <= num_tokens:
        raise ValueError(f"data must be 1-D and longer than num_tokens={num_tokens}, got shape {shape_str(data.shape)}")
    starts = torch.randint(len(data) - num_tokens, (batch_size,), generator=generator)
    inputs = torch.stack([data[s : s + num_tokens] for s in starts.tolist()])
    targets = torch.stack([data[s + 1 : s + num_tokens + 1] for s in starts.tolist()])
    return inputs, targets


@torch.no_grad()
def evaluate_loss(model: nn.Module, data: torch.Tensor, num_tokens: int, batch_size: int = 64) -> float:
    """Mean next-token loss (nats per token) over consecutive, non-overlapping windows of ``data``.

    Every window of ``num_tokens`` tokens (and its shifted targets) is scored once, so the result does not
    depend on a random draw. The model is put in eval mode for the measurement and restored afterwards.
    """
    check_positive_int("num_tokens", num_tokens)
    num_windows = (len(data) - 1) // num_tokens
    if num_windows < 1:
        raise ValueError(f"data of length {len(data)} is too short for one window of num_tokens={num_tokens}")
    inputs = data[: num_windows * num_tokens].view(num_windows, num_tokens)
    targets = data[1 : num_windows * num_tokens + 1].view(num_windows, num_tokens)
    total = 0.0
    with eval_mode(model):
        for first in range(0, num_windows, batch_size):
            logits = model(inputs[first : first + batch_size])
            total += language_model_loss(logits, targets[first : first + batch_size]).item() * len(logits)
    return total / num_windows

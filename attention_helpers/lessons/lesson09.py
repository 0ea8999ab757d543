"""Lesson 09's checks: mean pooling over the real tokens (all-MiniLM-L6-v2's token vectors for hidden padded
batches), and which sentence is nearest in meaning to a new one."""

from __future__ import annotations

import functools
import numbers

import torch
import torch.nn.functional as F

from ..pretrained import SentenceEncoder, mean_pool
from . import Exercise, Mistake, WrongFormError, as_number, hidden_generator

_SEED = 9_01
CLS, SEP, PAD = 101, 102, 0  # all-MiniLM-L6-v2's special token ids
QUESTION = "The cat is sleeping on the carpet."


@functools.lru_cache(maxsize=1)
def _model() -> SentenceEncoder:
    return SentenceEncoder.from_pretrained()


@functools.lru_cache(maxsize=1)
@torch.no_grad()
def _hidden_cases() -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """For hidden padded batches of ``[CLS]``, random word pieces and ``[SEP]`` (one of a single sentence, no padding):
    the model's ``(batch, num_tokens, 384)`` token vectors and the tokenizer's mask."""
    generator, model, cases = hidden_generator(_SEED), _model(), []
    for lengths in ((7, 13, 4), (9,), (3, 11)):  # tokens per sentence, [CLS] and [SEP] included
        token_ids = torch.full((len(lengths), max(lengths)), PAD)
        for row, length in enumerate(lengths):
            words = torch.randint(1996, 29_000, (length - 2,), generator=generator)  # ordinary word pieces
            token_ids[row, :length] = torch.cat([torch.tensor([CLS]), words, torch.tensor([SEP])])
        attention_mask = (torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]).long()  # 1 = real token
        cases.append((model(token_ids, attention_mask=attention_mask), attention_mask))
    return tuple(cases)


def _mean_pool_mistakes(token_embeddings, attention_mask) -> list[Mistake]:
    expected, full_rows = mean_pool(token_embeddings, attention_mask == 0), (attention_mask == 1).all(dim=1)
    inverted = mean_pool(token_embeddings, attention_mask == 1)  # the mean over the padding only, 0 on a full row
    all_tokens = token_embeddings.mean(dim=1)
    by_padded_length = (token_embeddings * attention_mask[..., None]).sum(dim=1) / attention_mask.shape[1]
    return [
        Mistake("your mean includes the padding tokens too", "leave out where attention_mask is 0", all_tokens),
        Mistake("you divided by the padded length", "divide by the number of real tokens", by_padded_length),
        Mistake("your vectors have length 1", "return the mean itself, not normalised", F.normalize(expected, dim=-1)),
        *(
            Mistake(
                "your mean is over the padding, not the real tokens: the mask is inverted",
                "attention_mask is 1 for a real token and 0 for padding (the opposite of key_padding_mask): "
                "keep the tokens where it is 1",
                wrong,
            )
            for wrong in (inverted, inverted.masked_fill(full_rows[:, None], torch.nan))  # a full row: 0, or 0 / 0
        ),
    ]


# ``my_mean_pool(token_embeddings, attention_mask)``: ``(batch, num_tokens, d)`` vectors and the tokenizer's ``(batch,
# num_tokens)`` mask (1 = real token) -> ``(batch, d)``, the mean over the real tokens.
exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda token_embeddings, attention_mask: mean_pool(token_embeddings, attention_mask == 0),
    cases=_hidden_cases,
    hint="a sentence's mean runs over its real tokens only: leave the padding out of the sum, and divide by the "
    "number of real tokens (reread '7. The padding mask in practice')",
    mistakes=_mean_pool_mistakes,
    done=" on all {n} hidden batches, equal to each sentence encoded alone",
    returned_none="return the mean vectors, (batch, 384)",
    rule="the exercise asks you to write the mean pooling yourself, not to call the package's",
).check


def _index(answer) -> int:
    """An index into the sentences: an int, or a one-element integer tensor such as ``sims.argmax()``."""
    answer = as_number(answer)
    if isinstance(answer, bool) or not isinstance(answer, numbers.Integral):
        raise WrongFormError(f"expected an index (an int), got {type(answer).__name__}", "give the sentence's position")
    if not 0 <= answer < len(SENTENCES):
        raise WrongFormError(f"{answer} is not an index of the list", f"indices run from 0 to {len(SENTENCES) - 1}")
    return int(answer)


def _shares_a_word(sentence: str) -> list[str]:
    """The words, other than the commonest, that ``sentence`` shares with :data:`QUESTION`."""
    question_words = set(QUESTION.lower().strip(".").split())
    return sorted(question_words & set(sentence.lower().strip(".?!").split()) - {"the", "a", "is", "on"})


# The lesson's sentences: the check judges the index in its own copy, never in a list it is given.
SENTENCES = (
    "A cat sits on the mat.",
    "A kitten is lying on a rug.",
    "The stock market fell sharply today.",
    "Investors lost money as shares dropped.",
    "How do I bake bread at home?",
    "A simple recipe for homemade bread.",
)


def _nearest(sentences) -> list[tuple]:
    """The one case: (the lesson's sentences, the index nearest to QUESTION, its cosine similarity)."""
    if not isinstance(sentences, (list, tuple)) or tuple(sentences) != SENTENCES:
        raise TypeError("sentences must be the lesson's list of sentences, as its cell defines them")
    vectors = _model().encode([*SENTENCES, QUESTION])  # length 1 each: dot product = cosine similarity
    similarities = vectors[:-1] @ vectors[-1]
    nearest = int(similarities.argmax())
    return [(SENTENCES, nearest, float(similarities[nearest]))]


# ``answer``: the index in ``sentences`` of the sentence nearest in meaning to :data:`QUESTION`.
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda sentences, nearest, similarity: nearest,
    cases=_nearest,
    hint="encode the sentences and the question; the largest cosine similarity is the nearest (reread '5. What a "
    "sentence encoder is for')",
    mistakes=lambda sentences, nearest, similarity: [
        Mistake(
            lambda index: (
                f"sentence {index} shares the word {_shares_a_word(sentences[index])[0]!r}, but it is not the nearest"
            ),
            "the vectors follow meaning more than shared words: compute the cosine similarities with model.encode",
            matches=lambda index: _shares_a_word(sentences[index]),
        )
    ],
    done=lambda sentences, nearest, similarity: f": {sentences[nearest]!r}, cosine similarity {similarity:.2f}",
    convert=_index,
    differ=lambda index, nearest: None if index == nearest else f"sentence {index} is not the nearest",
    value=True,
).check

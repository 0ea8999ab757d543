"""Lesson 08's checks: the targets of the *rotate* task, and the held-out accuracy of the reverse model with a
causal mask in every layer, which the check trains itself (a band around its result)."""

from __future__ import annotations

import torch

from ..attention import MultiHeadAttention
from ..training import TokenClassifier, evaluate, make_task, train
from . import Exercise, Mistake, WrongFormError, as_number, hidden_generator, is_number

_SEED = 8_01


def _digits(seed: int, *shapes) -> list[tuple[torch.Tensor]]:
    generator = hidden_generator(seed)
    return [(torch.randint(0, 10, shape, generator=generator),) for shape in shapes]


# (what is wrong, what that answer computes)
_ROTATE_MISTAKES = (
    ("the digits moved one place to the left instead of the right", lambda x: torch.roll(x, -1, dims=-1)),
    ("the digits are reversed, the task of the lesson, not rotated", lambda x: x.flip(-1)),
    ("the rows (the batch) were rotated instead of the positions in each row", lambda x: torch.roll(x, 1, dims=0)),
    ("the inputs came back unchanged", lambda x: x),
)
ROTATE_HINT = (
    "output position i holds input position i - 1, and position 0 the last digit: every row rotates one place to the "
    "right along its positions (the last dimension)"
)

# ``rotate_targets(inputs)``: every digit moves one place to the right, the last wraps to the front.
exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda inputs: torch.roll(inputs, 1, dims=-1),
    cases=lambda: _digits(_SEED, (1, 7), (5, 3), (3, 10), (4, 1), (2, 9)),
    hint="the answer has the inputs' shape, and one tensor operation can move every digit of every row at once "
    "(reread '1. The task: reverse the digits')",
    mistakes=lambda inputs: [Mistake(problem, ROTATE_HINT, wrong(inputs)) for problem, wrong in _ROTATE_MISTAKES],
    done=" on all {n} hidden batches",
    returned_none="return the targets, a tensor of the inputs' shape",
    rule="the exercise asks for the targets without a Python loop: one tensor operation moves every digit at once",
    loop_free=lambda: _digits(_SEED + 9, (2, 3), (30, 40)),
).check


def _causal_reverse_accuracy(
    seed, num_tokens, num_train, num_heldout, d_model, num_heads, num_layers, ffn_hidden, num_steps, batch_size, lr
) -> float:
    """Held-out accuracy of the lesson's reverse model with causal attention in every layer, trained with the
    package's ``train`` as the reader trains it (the band covers another thread count or CPU)."""
    with torch.random.fork_rng(devices=[]), torch.enable_grad():  # the checks run under no_grad
        data = make_task("reverse", num_train, num_heldout, num_tokens, vocab_size=10, seed=seed)
        torch.manual_seed(seed)
        model = TokenClassifier(10, d_model, num_heads, num_layers, ffn_hidden)
        for layer in model.encoder.layers:
            layer.attention = MultiHeadAttention(
                d_model, d_model, num_tokens, 0.0, num_heads, qkv_bias=True, causal=True
            )
        train(model, data, num_steps=num_steps, batch_size=batch_size, lr=lr, seed=seed)
        return evaluate(model, data.heldout_inputs, data.heldout_targets)


# The lesson's configuration, where the accuracies below were measured: the keywords of exercise_2 after seed.
LESSON_CONFIGURATION = dict(num_tokens=10, num_train=10_000, num_heldout=1_000, d_model=32, num_heads=2, num_layers=2)
LESSON_CONFIGURATION |= dict(ffn_hidden=64, num_steps=200, batch_size=64, lr=3e-3)

# Accuracies the check can explain with the lesson's configuration (a fraction, between 0 and 1), tried in this order
_ACCURACY_MISTAKES = (
    Mistake(
        "that is what the model without a causal mask scores, which sees every position",
        "give every attention layer of the model a causal mask before training (lesson 04), then train and evaluate",
        matches=lambda accuracy: accuracy >= 0.9,
    ),
    Mistake(
        "that is about a random guess, what an untrained model scores",
        "train the causal model before measuring it on the held-out set (reread '3. One training step, cell by cell')",
        matches=lambda accuracy: accuracy <= 0.15,
    ),
    Mistake(
        "that is about what the model without positions scores, not the causal one",
        "keep the positional encoding and add a causal mask to every attention layer instead",
        matches=lambda accuracy: 0.2 <= accuracy <= 0.35,
    ),
)


def _accuracy(answer) -> float:
    """The answer as a fraction; :class:`WrongFormError` for no number, a percentage or no accuracy at all."""
    answer = as_number(answer)
    if not is_number(answer):
        raise WrongFormError(f"expected a number, got {type(answer).__name__}", "ah.evaluate returns it as a float")
    if not 0 <= answer <= 1:
        raise WrongFormError(f"{answer:g} is not a fraction", "give the accuracy between 0 and 1, not in percent")
    return float(answer)


def _configuration(*, seed: int, **given) -> list[tuple]:
    """The one case: (seed, the lesson's configuration, the band around the check's accuracy). The check trains its
    own configuration: one passed with fewer steps or a smaller model would make the accuracy easy to guess."""
    for name, value in sorted(given.items()):
        if name not in LESSON_CONFIGURATION or value != LESSON_CONFIGURATION[name]:
            raise TypeError(
                f"the check trains the lesson's own configuration, not {name}={value!r}: put the parameters cell back "
                "as it was (only seed may change)"
            )
    return [(seed, LESSON_CONFIGURATION, 0.04)]


# ``answer``: the held-out accuracy (a fraction) of the reverse model trained with a causal mask, judged against the
# check's own training of the lesson's configuration at the seed the check cell passes, within ``band``: wide enough
# for a model built in another order or on another CPU, narrow enough to tell it from the model without a mask (about
# 1.0) and without positions (about 0.3).
exercise_2 = Exercise(
    "Exercise 2",
    reference=lambda seed, configuration, band: (_causal_reverse_accuracy(seed, *configuration.values()), band),
    cases=_configuration,
    hint="build and train the model with the values of the parameters cell (seed, sizes, steps, lr), the same that the "
    "check cell passes, and measure on the held-out set with ah.evaluate",
    mistakes=lambda *case: _ACCURACY_MISTAKES,
    done=": the model gets right the positions whose digit it can see (the second half) and guesses the others",
    convert=_accuracy,
    differ=lambda accuracy, expected: (
        None
        if abs(accuracy - expected[0]) <= expected[1]
        else "that is outside the range the check measured for this configuration"
    ),
    value=True,
).check

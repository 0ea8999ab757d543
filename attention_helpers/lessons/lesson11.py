"""Lesson 11's checks: the online-softmax update, streamed over hidden rows block by block (``-inf`` blocks, scores
that overflow ``exp``), and a conversion to grouped-query attention with the held-out losses before and after."""

from __future__ import annotations

import copy
import functools

import torch

from ..attention import GroupedQueryAttention
from ..distributed.data_parallel import CONTEXT_LENGTH, LEARNING_RATE, new_model, training_ids
from ..gpt import GPT
from ..text import evaluate_loss, language_model_loss, next_token_batch
from . import Exercise, Mistake, WrongFormError, call_answer, compare, hidden_generator, plain, two_numbers

_SEED = 11_01


def _rows() -> list[tuple[torch.Tensor, int]]:
    """Hidden (row of scores, block size): ``-inf`` entries and blocks, scores near 1000, one score."""
    randn = functools.partial(torch.randn, generator=hidden_generator(_SEED))
    # The largest scores come first: a block's own maximum, used in place of the running one, overflows exp later.
    plain = torch.cat([torch.tensor([100.0, 90.0, 0.0, -5.0]), 4 * randn(9)])
    holes = 3 * randn(11)
    holes[[1, 4, 5, 9]] = -torch.inf
    first_empty = torch.cat([torch.full((3,), -torch.inf), 2 * randn(7) + 5])
    middle_empty = torch.cat([randn(4), torch.full((4,), -torch.inf), randn(3)])
    huge = 1000 + 10 * randn(9)
    return [(plain, 2), (holes, 3), (first_empty, 3), (middle_empty, 4), (huge, 2), (torch.tensor([0.7]), 5)]


def _stream(update, row: torch.Tensor, block_size: int):
    """``row`` fed to ``update`` block by block from ``(-inf, 0)``, each block followed by one of another row (an
    update keeps no state between calls): the final (max, sum) and the running max after every block."""
    states = [(-torch.inf, 0.0), (-torch.inf, 0.0)]
    other, maxima = 2 * row.flip(0) - 1, []
    for step, start in enumerate(range(0, len(row), block_size), start=1):
        for which, scores in enumerate((row, other)):
            block = scores[start : start + block_size].clone()
            states[which] = two_numbers(
                plain(call_answer(update, *map(torch.tensor, states[which]), block)),
                f"at block {step}, update's result is not a pair (running_max, running_sum) of two numbers",
                "return the new running maximum and the new running sum, in that order",
            )
        maxima.append(states[0][0])
    return *map(torch.tensor, states[0]), torch.tensor(maxima)


def _update(running_max, running_sum, block, rescale: str = "right"):
    """The online-softmax step, right, or with the old sum's rescaling left out (``rescale="none"``) or inverted."""
    new_max = torch.maximum(running_max, block.max())
    shift = new_max if bool(torch.isfinite(new_max)) else torch.tensor(0.0)  # only -inf so far: every term is 0
    factors = {"right": torch.exp(running_max - shift), "none": 1.0, "inverted": torch.exp(shift - running_max)}
    factor = factors[rescale] if bool(torch.isfinite(running_max)) else 0.0  # the old sum is 0 then
    return new_max, running_sum * factor + torch.exp(block - shift).sum()


UPDATE_HINT = (
    "the new maximum is the larger of the running one and the block's; the old sum was computed against the old "
    "maximum, so rescale it to the new one before adding the block's exponentials, shifted by the new maximum too "
    "(reread '3. Online softmax')"
)


def _softmax_differs(answer, expected) -> str | None:
    """None when the streamed ``answer`` (max, sum, running max after each block) keeps the largest score seen so far
    after every block and gives the row's softmax; ``expected`` is (row, the reference's stream)."""
    (running_max, running_sum, maxima), (row, (_, _, right_maxima)) = answer, expected
    for step, (seen, right) in enumerate(zip(maxima.tolist(), right_maxima.tolist(), strict=True), start=1):
        if seen != right:
            return f"after block {step}, running_max is {seen:g}, not the largest score seen so far, {right:g}"
    weights = torch.exp(row - running_max) / running_sum
    problem = compare(weights, torch.softmax(row, dim=-1), atol=1e-5)
    return None if problem is None else f"exp(row - running_max) / running_sum is not the softmax: {problem}"


def _stream_mistakes(row: torch.Tensor, block_size: int) -> list[Mistake]:
    blocks = [row[start : start + block_size] for start in range(0, len(row), block_size)]
    block_maxima = [float(block.max()) for block in blocks]
    seen_maxima = [float(row[: start + block_size].max()) for start in range(0, len(row), block_size)]

    def follows_blocks(answer) -> bool:  # some step kept its block's own maximum instead of the largest so far
        return any(m == own != seen for m, own, seen in zip(answer[2].tolist(), block_maxima, seen_maxima, strict=True))

    def streams(rescale="right", swapped=False):  # the stream of an update with a mistake
        wrong = _stream(lambda *state: _update(*state, rescale)[:: -1 if swapped else 1], row, block_size)
        return lambda answer: compare(answer, wrong, atol=1e-5) is None

    return [
        Mistake(
            "running_max follows each block's own maximum, not the largest score seen so far",
            "the running maximum is the largest score seen so far, in every block before this one too",
            matches=follows_blocks,
        ),
        Mistake(
            "the running sum became nan on a row with a block of only -inf scores",
            "while the maximum is still -inf, exp(-inf - (-inf)) is nan: subtract 0 instead of the maximum "
            "then (every term exp(-inf) is 0 anyway)",
            matches=lambda answer: bool(answer[1].isnan()) and any(bool((b == -torch.inf).all()) for b in blocks),
        ),
        Mistake(
            lambda answer: f"the running maximum or sum is not finite ({answer[0].item()}, {answer[1].item()})",
            "subtract the running maximum inside exp, so that no exponent is positive",
            matches=lambda answer: not all(bool(item.isfinite()) for item in answer),
        ),
        Mistake("your pair is the other way round", "return (running_max, running_sum)", matches=streams(swapped=True)),
        Mistake("the old sum was not rescaled when the maximum grew", UPDATE_HINT, matches=streams(rescale="none")),
        Mistake("the old sum was rescaled the wrong way round", UPDATE_HINT, matches=streams(rescale="inverted")),
    ]


# ``update(running_max, running_sum, block) -> (running_max, running_sum)``: 0-dimensional tensors and a 1-D block of
# scores; streamed over a row, ``exp(row - running_max) / running_sum`` is its softmax.
exercise_1 = Exercise(
    "Exercise 1",
    reference=lambda row, block_size: (row, _stream(_update, row, block_size)),
    cases=_rows,
    run=_stream,
    hint=UPDATE_HINT,
    describe=lambda n, total, row, size: f"on hidden row {n} of {total} ({len(row)} scores in blocks of {size})",
    mistakes=_stream_mistakes,
    done=" on all {n} hidden rows, equal to torch.softmax",
    returned_none="return the pair (running_max, running_sum)",
    differ=_softmax_differs,
    rule="the exercise asks you to write the update yourself, not to call the package's online softmax",
).check


def reference_to_grouped(attention: GroupedQueryAttention, num_kv_heads: int, how="mean") -> GroupedQueryAttention:
    """The check's conversion: key/value head ``g`` is the mean of those of query heads ``g * group`` to
    ``(g + 1) * group - 1`` (the grouping of ``GroupedQueryAttention``); ``how`` gives a mistake's heads instead: each
    group's "first", the "summed" heads, or the mean over "strided" groups (heads h, h + num_kv_heads, ...)."""
    group, bias = attention.num_heads // num_kv_heads, attention.W_query.bias is not None
    sizes = (attention.d_in, attention.d_out, attention.context_length, attention.dropout.p, attention.num_heads)
    grouped = GroupedQueryAttention(*sizes, qkv_bias=bias, num_kv_heads=num_kv_heads)
    state = {key: value.clone() for key, value in attention.state_dict().items()}
    for key in [key for key in state if key.startswith(("W_key.", "W_value."))]:
        original = state[key]  # (num_heads * head_dim, d_in) or (num_heads * head_dim,)
        by_group = original.view(num_kv_heads, group, -1)
        strided = original.view(group, num_kv_heads, -1).mean(dim=0)
        heads = {"mean": by_group.mean(dim=1), "first": by_group[:, 0], "summed": by_group.sum(dim=1)}.get(how, strided)
        state[key] = heads.reshape(-1, *original.shape[1:])
    grouped.load_state_dict(state)
    return grouped.train(attention.training)


def _cases(losses=None, model: GPT | None = None, held_out_ids=None, num_kv_heads: int = 2) -> list[tuple]:
    """Hidden (causal layer, kv-head count, input, the losses given): ``d_in != d_out``, biases on and off; then, with
    the lesson's model, ``(None, num_kv_heads, the check's (loss_before, loss_after), the losses given)``."""
    generator = hidden_generator(_SEED + 1)
    cases = []
    for d_in, d_out, num_heads, kv_heads, bias in ((7, 12, 6, 2, False), (5, 8, 4, 1, True), (6, 6, 2, 2, False)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
            layer = GroupedQueryAttention(d_in, d_out, 16, 0.0, num_heads, qkv_bias=bias).eval()
        cases.append((layer, kv_heads, torch.randn(2, 9, d_in, generator=generator), losses))
    if model is None and losses is None:  # the hidden layers alone
        return cases
    if any(block.attention.num_kv_heads != block.attention.num_heads for block in model.blocks):
        raise TypeError("the model given to the check is already grouped: the conversion changed it in place")
    grouped = copy.deepcopy(model)
    for block in grouped.blocks:
        block.attention = reference_to_grouped(block.attention, num_kv_heads)
    expected = tuple(evaluate_loss(m, held_out_ids, model.context_length) for m in (model, grouped))
    return [*cases, (None, num_kv_heads, expected, losses)]


GROUPED_HINT = (
    "a new grouped layer of the same sizes keeps the query heads and the output projection as they are; each "
    "key/value head, weights and biases, is the mean of the heads of its group, and a group is a run of consecutive "
    "heads, the grouping the module uses (reread '7. Grouped-query attention and the KV cache')"
)


def _reference(layer: GroupedQueryAttention | None, num_kv_heads: int, x, losses):
    """The check's conversion of ``layer``: its output on ``x``, ``x`` and its parameters; on the lesson's model
    (``layer`` None), ``x``: the check's two losses."""
    if layer is None:
        return x
    grouped = reference_to_grouped(layer, num_kv_heads)
    return grouped(x), x, grouped.state_dict()


def _converted(to_grouped, layer: GroupedQueryAttention | None, num_kv_heads: int, x, losses):
    """The answer's conversion of ``layer``, in evaluation mode (another module, a changed ``layer`` or parameters
    shared with it are of the wrong form); on the lesson's model (``layer`` None), the losses given."""
    if layer is None:
        problem = "losses must be a pair (loss_before, loss_after) of two numbers"
        hint = "losses = (loss_before, loss_after), the floats ah.evaluate_loss returns"
        return two_numbers(plain(losses), problem, hint)
    original = copy.deepcopy(layer.state_dict())
    converted = to_grouped(layer, num_kv_heads)
    if not isinstance(converted, GroupedQueryAttention) or converted.num_kv_heads != num_kv_heads:
        got = f"{type(converted).__name__} with num_kv_heads={getattr(converted, 'num_kv_heads', None)}"
        raise WrongFormError(
            f"to_grouped must return an ah.GroupedQueryAttention with num_kv_heads={num_kv_heads}, not a {got}",
            GROUPED_HINT,
        )
    if any(not torch.equal(original[key], value) for key, value in layer.state_dict().items()):
        raise WrongFormError("to_grouped changed the layer it was given", "build a new module instead")
    given = {parameter.data_ptr() for parameter in layer.parameters()}
    shared = [key for key, parameter in converted.named_parameters() if parameter.data_ptr() in given]
    if shared:
        raise WrongFormError(
            f"the layer returned shares {shared[0]} with the layer it was given: training one would change the other",
            "copy the weights into the new layer's own modules instead of assigning the old modules to it",
        )
    return converted.eval()


def _grouped_mistakes(layer: GroupedQueryAttention | None, num_kv_heads: int, x, losses) -> list[Mistake]:
    if layer is None:  # x: the check's (loss_before, loss_after)
        return [
            Mistake("the two losses are swapped", "losses = (loss_before, loss_after), in that order", x[::-1]),
            Mistake("loss_before is not the trained model's held-out loss", "measure it before any conversion", item=0),
            Mistake(
                "loss_after equals loss_before: the model you measured was not converted",
                "convert the attention of every block of a copy of the model, then measure the held-out loss of both",
                x[0],
                item=1,
            ),
        ]

    def computes(how):
        output = reference_to_grouped(layer, num_kv_heads, how)(x)
        return lambda converted: compare(converted(x), output) is None

    return [
        Mistake(problem, GROUPED_HINT, matches=computes(how))
        for how, problem in (
            ("first", "each kv head is the first head of its group, not the mean of the group"),
            ("strided", "the groups are heads h, h + num_kv_heads, ...; query head h uses kv head h // group"),
            ("summed", "each kv head is the sum of its group's heads, not the mean"),
        )
    ]


def tiny_language_model(seed: int, num_steps: int = 300) -> tuple[GPT, torch.Tensor]:
    """Lesson 10's GPT, small (lesson 13's data-parallel model), trained ``num_steps`` steps on the Shakespeare text on
    one thread: the model (in eval mode) and ``(20_000,)`` held-out ids, characters it never trained on."""
    data, vocab_size = training_ids()  # (num_characters,)
    split = int(0.9 * len(data))
    model = new_model(seed, vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    generator = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(num_steps):
            inputs, targets = next_token_batch(data[:split], 16, CONTEXT_LENGTH, generator)
            loss = language_model_loss(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval(), data[split : split + 20_000]


def _differs(answer, expected) -> str | None:
    """A converted layer against the check's (output, input, parameters), naming the first parameter that differs;
    the losses against the check's, to two decimals (as copied from a printout)."""
    if not isinstance(answer, GroupedQueryAttention):
        close = compare(answer, expected, atol=6e-3) is None
        return None if close else "loss_after is not the held-out loss with every block converted"
    output, x, reference = expected
    if compare(answer(x), output) is None:
        return None
    state = answer.state_dict()
    differing = next((key for key in reference if compare(state.get(key), reference[key], 1e-5) is not None), "output")
    return f"the converted layer's {differing} differs from the check's"


# ``to_grouped(attention, num_kv_heads)`` on hidden layers, then ``losses = (loss_before, loss_after)``: ``model``'s
# held-out loss on ``held_out_ids`` (``ah.evaluate_loss``), before and after converting every block.
exercise_2 = Exercise(
    "Exercise 2",
    reference=_reference,
    cases=_cases,
    run=_converted,
    hint=GROUPED_HINT,
    describe=lambda number, total, layer, kv_heads, *rest: (
        "" if layer is None else f"on hidden layer {number} ({layer.num_heads} heads to {kv_heads} kv heads)"
    ),
    mistakes=_grouped_mistakes,
    done=lambda layer, kv_heads, x, losses: (
        ": the grouped layers are right" + ("" if losses is None else ", and both losses match the check's")
    ),
    rule="the exercise asks you to write the conversion yourself: build the grouped layer and set its parameters",
    allowed=(GroupedQueryAttention,),
    differ=_differs,
).check

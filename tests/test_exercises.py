"""The exercise checks tell right from wrong, say why, and never raise on a wrong answer."""

import pytest
import torch

import attention_helpers as ah
from attention_helpers.lessons import Exercise


def check_answer(name, answer, expected, hint):
    """A value exercise whose reference is ``expected``."""
    return Exercise(name, lambda: expected, lambda: [()], hint, done="", value=True).check(answer)


def check_function(name, candidate, reference, cases, hint):
    """A function exercise on the given cases, named by their number."""
    cases = [tuple(case) for case in cases]
    describe = lambda number, total, *case: f"on case {number} of {total}"  # noqa: E731
    return Exercise(name, reference, lambda: cases, hint, describe=describe, done=" on all {n} cases").check(candidate)


def test_unanswered_exercise_gives_nothing_away(capsys):
    assert check_answer("Exercise 1", None, torch.ones(2), hint="use ones") is False
    assert capsys.readouterr().out == "Exercise 1: Not answered yet (the answer is still None).\n"
    assert check_function("Exercise 2", None, ah.softmax_stable, [], hint="h") is False
    assert capsys.readouterr().out == "Exercise 2: Not answered yet (the answer is still None).\n"


@pytest.mark.parametrize(
    ("answer", "expected", "verdict", "reason"),
    [
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.00001]), True, "correct"),
        (
            torch.tensor([1.0, 2.1]),
            torch.tensor([1.0, 2.0]),
            False,
            "some values differ (largest difference 0.1 at index (1,))",
        ),
        (torch.ones(2, 3), torch.ones(3, 2), False, "expected shape (3, 2), got (2, 3)"),  # a transposed answer
        ([1.0, 2.0], torch.ones(2), False, "expected a tensor, got list"),
        (torch.tensor([True, False]), torch.tensor([True, False]), True, "correct"),
        (torch.tensor([1, 0]), torch.tensor([True, False]), False, "the dtype is torch.int64, expected torch.bool"),
        # a 0/1 float mask for a boolean one: the values are right, only the dtype is not
        (
            torch.triu(torch.ones(4, 4), diagonal=1),
            torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1),
            False,
            "the values are right but the dtype is torch.float32, expected torch.bool (convert with .bool())",
        ),
        (torch.tensor([True, True]), torch.tensor([True, False]), False, "1 of 2 entries differ"),
        (0.25, 0.25, True, "correct"),
        (True, 1, False, "expected a number, got bool"),
        ("post-LN", "post-LN", True, "correct"),
        ("pre-LN", "post-LN", False, "that is not it"),
        ((2, 6, 4), (2, 6, 4), True, "correct"),
        (torch.Size([2, 6, 4]), (2, 6, 4), True, "correct"),
        ((2, 4, 6), (2, 6, 4), False, "item 2 of 3 is not right: that is not the right number"),
        ((2, 6), (2, 6, 4), False, "expected 3 items, got 2"),
        (
            (torch.ones(5, 5), torch.ones(5, 5)),
            (torch.ones(5, 5), torch.ones(5, 3)),
            False,
            "item 2 of 2 is not right: expected shape (5, 3), got (5, 5)",
        ),
        ((1, (2, 3)), (1, (2, 4)), False, "item 2 of 2, its item 2 of 2 is not right: that is not the right number"),
    ],
)
def test_answers_are_judged_with_a_reason(capsys, answer, expected, verdict, reason):
    assert check_answer("Q", answer, expected, hint="h") is verdict
    out = capsys.readouterr().out
    assert reason in out and out.startswith("Q: ")
    assert ("Hint: h" in out) is not verdict


def test_function_check_runs_every_case_and_reports_failures(capsys):
    cases = [(torch.randn(3, 5),), (torch.randn(2, 4) * 1000,)]
    assert check_function("softmax", lambda x: torch.softmax(x, -1), ah.softmax_stable, cases, hint="h")
    assert "correct on all 2 cases" in capsys.readouterr().out
    # the naive softmax passes small scores but overflows on the second case
    naive = lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)  # noqa: E731
    assert not check_function("softmax", naive, ah.softmax_stable, cases, hint="subtract the max")
    assert "case 2 of 2" in capsys.readouterr().out
    assert not check_function("softmax", lambda x: x.softmax(dim=0), ah.softmax_stable, cases, hint="h")
    assert "case 1 of 2" in capsys.readouterr().out


def test_function_check_reports_an_exception_instead_of_raising(capsys):
    def broken(x):
        return x @ x  # (3, 5) @ (3, 5) cannot be multiplied

    assert not check_function("f", broken, ah.softmax_stable, [(torch.randn(3, 5),)], hint="h")
    assert "raised RuntimeError" in capsys.readouterr().out
    assert not check_function("f", 3, ah.softmax_stable, [], hint="h")  # a check never raises
    assert "expected a function, got int" in capsys.readouterr().out


# --- every exercise rejects a wrong answer that matches none of its named mistakes ------------------------------


def _small_gpt_for_lesson_11():
    torch.manual_seed(0)
    model = ah.GPT(
        ah.GPTConfig(vocab_size=20, context_length=8, d_model=16, num_heads=4, num_layers=2, dropout=0.0)
    ).eval()
    held_out_ids = torch.randint(0, 20, (200,), generator=torch.Generator().manual_seed(0))
    return model, held_out_ids


def _zeros_module(torch_layer):
    class Zeros(torch.nn.Module):
        def forward(self, x):
            return torch.zeros_like(x)

    return Zeros()


def _lesson_11_exercise_2(to_grouped):
    from attention_helpers.lessons import lesson11

    model, held_out_ids = _small_gpt_for_lesson_11()
    return lesson11.exercise_2(to_grouped, (1.0, 2.0), model, held_out_ids, 2)


def _zeroed_grouped(attention, num_kv_heads):
    from attention_helpers.lessons import lesson11

    converted = lesson11.reference_to_grouped(attention, num_kv_heads)
    with torch.no_grad():
        converted.W_value.weight.zero_()
    return converted


def _lesson_08_exercise_2(answer):
    from unittest import mock

    with mock.patch.object(_lesson(8), "_causal_reverse_accuracy", lambda *args: 0.55):
        return _lesson(8).exercise_2(answer, seed=0)


def _lesson(number):
    import importlib

    return importlib.import_module(f"attention_helpers.lessons.lesson{number:02d}")


# (lesson, exercise) -> a call of the check with an answer that is wrong in no named way (zeros, mostly)
UNNAMED_WRONG_ANSWERS = {
    (1, 1): lambda: _lesson(1).exercise_1(lambda x: torch.zeros(len(x), len(x))),
    (1, 2): lambda: _lesson(1).exercise_2(lambda x: torch.zeros(len(x), dtype=torch.long)),
    (1, 3): lambda: _lesson(1).exercise_3(lambda c: (1.0, 1.0)),
    (2, 1): lambda: _lesson(2).exercise_1(lambda x, dim, t: torch.zeros_like(x)),
    (2, 2): lambda: _lesson(2).exercise_2(lambda x: torch.zeros_like(x)),
    (2, 3): lambda: _lesson(2).exercise_3(("same", "same", "same")),
    (3, 1): lambda: _lesson(3).exercise_1(lambda x, wq, wk, wv: torch.zeros(*x.shape[:-1], wv.shape[-1])),
    (3, 2): lambda: _lesson(3).exercise_2(lambda d_k, std: (1.0, 1.0)),
    (4, 1): lambda: _lesson(4).exercise_1(lambda n, w: torch.zeros(n, n, dtype=torch.bool)),
    (4, 2): lambda: _lesson(4).exercise_2(lambda q, k, v, w: torch.zeros_like(v)),
    (4, 3): lambda: _lesson(4).exercise_3(lambda n, i, j: [0]),
    (5, 1): lambda: _lesson(5).exercise_1(lambda x, p, training: torch.zeros_like(x)),
    (5, 2): lambda: _lesson(5).exercise_2(lambda n, p: 0.0),
    (6, 1): lambda: _lesson(6).exercise_1((1, (1,), (1,), (1,))),
    (6, 2): lambda: _lesson(6).exercise_2(lambda x, W_qkv, W_out, h, c: torch.zeros(*x.shape[:-1], W_out.shape[0])),
    (7, 1): lambda: _lesson(7).exercise_1(lambda lengths, n: torch.zeros(len(lengths), n, dtype=torch.bool)),
    (7, 2): lambda: _lesson(7).exercise_2(lambda x, gamma, beta, eps: torch.zeros_like(x)),
    (7, 3): lambda: _lesson(7).exercise_3(_zeros_module),
    (8, 1): lambda: _lesson(8).exercise_1(lambda inputs: torch.zeros_like(inputs)),
    (8, 2): lambda: _lesson_08_exercise_2(0.7),
    (9, 1): lambda: _lesson(9).exercise_1(lambda emb, mask: torch.zeros(emb.shape[0], emb.shape[-1])),
    (9, 2): lambda: _lesson(9).exercise_2(2, ["A dog runs in the park.", "Stocks fell today.", "It rained."]),
    (10, 1): lambda: _lesson(10).exercise_1(lambda layer, x, cache: (torch.zeros(*x.shape[:-1], layer.d_out), cache)),
    (10, 2): lambda: _lesson(10).exercise_2(lambda logits, k: torch.zeros_like(logits)),
    (11, 1): lambda: _lesson(11).exercise_1(lambda m, s, block: (torch.tensor(0.0), torch.tensor(1.0))),
    (11, 2): lambda: _lesson_11_exercise_2(_zeroed_grouped),
    (12, 1): lambda: _lesson(12).exercise_1(lambda mha, x, keys, values, mask: torch.zeros_like(x)),
    (12, 2): lambda: _lesson(12).exercise_2(lambda layer, x, memory, mask: torch.zeros_like(x)),
}


@pytest.mark.parametrize("key", list(UNNAMED_WRONG_ANSWERS), ids=lambda key: f"lesson{key[0]:02d}-exercise{key[1]}")
def test_every_exercise_rejects_an_answer_that_matches_no_named_mistake(key, capsys):
    """A check whose final comparison accepted anything would call these answers correct."""
    result = UNNAMED_WRONG_ANSWERS[key]()
    out = capsys.readouterr().out
    assert result is False, f"lesson {key[0]} exercise {key[1]} accepted a wrong answer: {out}"
    assert out.count("\n") == 1 and f"Exercise {key[1]}: not yet, " in out and "Hint: " in out, out
    assert ". Hint:" in out and ".. Hint:" not in out, out


def test_an_error_message_ending_with_a_full_stop_is_not_doubled(capsys):
    def raises(x):
        raise ValueError("something broke.")

    assert not check_function("f", raises, ah.softmax_stable, [(torch.randn(3, 5),)], hint="h")
    out = capsys.readouterr().out
    assert "something broke. Hint: h" in out and ".." not in out, out


def test_the_trace_sees_a_kernel_under_every_alias_and_the_packages_code():
    from torch import softmax as imported_softmax

    from attention_helpers.lessons import SOFTMAX_KERNELS, Trace

    x = torch.randn(3, 4)
    for call in (
        lambda: torch.softmax(x, -1),
        lambda: x.softmax(-1),
        lambda: torch.nn.functional.softmax(x, -1),
        lambda: imported_softmax(x, -1),
        lambda: torch.nn.Softmax(dim=-1)(x),
        lambda: torch.special.softmax(x, -1),
        lambda: x.log_softmax(-1).exp(),
        lambda: torch.ops.aten._softmax.default(x, -1, False),
        lambda: torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None]),
    ):
        with Trace() as trace:
            call()
        assert set(trace.kernels) & SOFTMAX_KERNELS, trace.kernels
    with Trace() as trace:
        ah.softmax_stable(x)
    assert trace.package[0] == "softmax_stable"
    with Trace(allowed=(ah.softmax_stable,)) as trace:
        ah.softmax_stable(x)
    assert trace.package == [] and not set(trace.kernels) & SOFTMAX_KERNELS, "nothing inside allowed code counts"
    with Trace() as trace:
        torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)
    assert not set(trace.kernels) & SOFTMAX_KERNELS and trace.package == []
    import sys

    assert sys.gettrace() is None, "the trace function must be removed afterwards"


def test_a_patched_torch_or_a_lying_subclass_cannot_pass(capsys):
    from attention_helpers.lessons import lesson02

    def patches_allclose(x, dim=-1, temperature=1.0):
        torch.allclose = lambda *args, **kwargs: True
        torch.Tensor.__eq__ = lambda *args: True
        return torch.zeros_like(x)

    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("allclose", "equal", "isclose", "__eq__", "sub", "abs"):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    original = torch.allclose
    assert lesson02.exercise_1(patches_allclose) is False
    assert "your code changes torch itself (torch." in capsys.readouterr().out
    assert "__eq__" not in vars(torch.Tensor) and torch.allclose is original, "torch is put back"
    assert not torch.allclose(torch.zeros(1), torch.ones(1))
    assert lesson02.exercise_1(lambda x, dim=-1, temperature=1.0: torch.zeros_like(x).as_subclass(Liar)) is False
    assert "some values differ" in capsys.readouterr().out


def test_an_answer_that_changes_its_input_in_place_is_rejected_by_name(capsys):
    def softmax_in_place(scores):
        scores.sub_(scores.amax(-1, keepdim=True)).exp_()
        return scores / scores.sum(-1, keepdim=True)

    assert not check_function("f", softmax_in_place, ah.softmax_stable, [(torch.randn(3, 5),)], hint="h")
    out = capsys.readouterr().out
    assert out.startswith("f: not yet, your function changed its input scores in place on case 1 of 1.")
    assert "Hint: build a new tensor" in out


@pytest.mark.parametrize(
    ("answer", "expected", "reason"),
    [
        (True, 1, "expected a number, got bool"),
        (1, True, "expected a bool, got int"),
        ("1", 1, "expected a number, got str"),
        (torch.tensor([1.0, 0.0]), torch.tensor([True, False]), "the dtype is torch.float32, expected torch.bool"),
        (torch.tensor([1, 2]), torch.tensor([1.0, 2.0]), "the dtype is torch.int64, expected torch.float32"),
        (torch.tensor([1, 3]), torch.tensor([1.0, 2.0]), "expected a tensor of dtype torch.float32"),
        ([1.0, 2.0], torch.tensor([1.0, 2.0]), "expected a tensor, got list"),
        (torch.tensor(1.0), (1.0,), "expected a tuple of 1 items, got Tensor"),
    ],
)
def test_types_are_compared_before_values(answer, expected, reason):
    from attention_helpers.lessons import compare

    assert reason in compare(answer, expected)


@pytest.mark.parametrize("message", ["something broke.\n", "something broke. \n\n", "something\nbroke.", ""])
def test_an_error_message_gives_one_line_without_a_doubled_full_stop(message, capsys):
    def raises(x):
        raise ValueError(message)

    assert not check_function("f", raises, ah.softmax_stable, [(torch.randn(3, 5),)], hint="h")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and ".." not in out and ":." not in out and out.endswith(". Hint: h\n"), out


def _doubling_exercise(**options):
    from attention_helpers.lessons import Exercise, Mistake

    return Exercise(
        "E",
        reference=lambda x: 2 * x,
        cases=lambda: [(torch.tensor([2.0, 0.0]),), (torch.tensor([3.0, -1.0]),)],
        hint="double it",
        describe=lambda number, total, x: f"on case {number} of {total}",
        mistakes=lambda x: [
            Mistake("you squared it", "2 * x, not x ** 2", x**2),
            Mistake(
                "the signs are lost",
                "keep the sign",
                matches=lambda answer: bool((x < 0).any()) and bool((answer >= 0).all()),
            ),
        ],
        **options,
    )


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        (None, "E: Not answered yet (the answer is still None).\n"),
        (3, "E: not yet, expected a function, got int. Hint: define it with def\n"),
        (lambda x: x + x, "E: correct on all 2 hidden cases.\n"),
        (lambda x: None, "E: not yet, your function returned None on case 1 of 2. Hint: return the result\n"),
        # right on the first case (2 ** 2 = 2 * 2 there), named on the second
        (lambda x: x**2, "E: not yet, you squared it on case 2 of 2. Hint: 2 * x, not x ** 2\n"),
        (lambda x: 2 * x.abs(), "E: not yet, the signs are lost on case 2 of 2. Hint: keep the sign\n"),
        (
            lambda x: 3 * x,
            "E: not yet, the shape is right but some values differ (largest difference 2 at index (0,)) on case 1 "
            "of 2. Hint: double it\n",
        ),
    ],
)
def test_the_exercise_runner_gives_each_verdict(answer, verdict, capsys):
    assert _doubling_exercise().check(answer) is verdict.startswith("E: correct")
    assert capsys.readouterr().out == verdict


def test_the_exercise_runner_converts_the_answer_and_passes_only_the_arguments(capsys):
    from attention_helpers.lessons import Exercise

    exercise = Exercise(
        "E",
        reference=lambda x, expected: expected,
        cases=lambda: [(torch.tensor([1.0, 2.0]), 3.0)],
        arguments=lambda x, expected: (x,),
        convert=lambda answer: answer.item(),
        hint="add them up",
        describe=lambda number, total, *case: "on the case",
        done=" on {n} case",
    )
    assert exercise.check(lambda x: x.sum()) is True
    assert capsys.readouterr().out == "E: correct on 1 case.\n"


def _declared_exercises():
    """Every module-level :class:`Exercise` of the lessons, with its lesson number."""
    from attention_helpers.lessons import Exercise

    return [
        (number, exercise)
        for number in range(1, 14)
        for value in vars(_lesson(number)).values()
        for exercise in [getattr(value, "__self__", value)]  # ``exercise_1 = Exercise(...).check``, or the Exercise
        if isinstance(exercise, Exercise)
    ]


def _answer_wrong_on(exercise, target: int, wrong):
    """An answer function that gives the reference's result on every case but case ``target``, where it gives
    ``wrong`` (the exercise calls its answer once per case, in order)."""
    with torch.no_grad():  # computed beforehand: the answer may not call what the exercise forbids
        right = [exercise.reference(*case) for case in exercise.cases()]
    calls = []

    def answer(*args):
        calls.append(args)
        return wrong if len(calls) - 1 == target else right[len(calls) - 1]

    return answer


@pytest.mark.parametrize(
    ("lesson", "exercise"),
    [pair for pair in _declared_exercises() if not pair[1].value and pair[1].run is None],
    ids=lambda item: item if isinstance(item, int) else item.name,
)
def test_every_named_mistake_that_gives_a_wrong_answer_gets_its_hint(lesson, exercise, capsys):
    """Each Mistake with a ``wrong`` result, given on a case where it is wrong, is named with its hint on at least
    one case (on another, an earlier mistake may give the same answer and be named first)."""
    from attention_helpers.lessons import compare

    differ = exercise.differ or (lambda answer, expected: compare(answer, expected, exercise.atol))
    tried, named = set(), set()
    for number, case in enumerate(exercise.cases()):
        with torch.no_grad():
            expected = exercise.reference(*case)
        for index, mistake in enumerate(exercise.mistakes(*case)):
            wrong = mistake.wrong
            if mistake.item is not None and wrong is not None:  # a mistake in one item of a tuple answer
                wrong = (*expected[: mistake.item], wrong, *expected[mistake.item + 1 :])
            if wrong is None or differ(wrong, expected) is None:
                continue
            tried.add(index)
            assert exercise.check(_answer_wrong_on(exercise, number, wrong)) is False
            if f"Hint: {mistake.hint}\n" in capsys.readouterr().out:
                named.add(index)
    assert named == tried, f"lesson {lesson} {exercise.name}: mistakes {sorted(tried - named)} never named"


def test_the_exercise_runner_judges_a_value_answer_and_one_of_the_wrong_form(capsys):
    from attention_helpers.lessons import Exercise, Mistake, WrongFormError

    def pair(answer):
        if not isinstance(answer, tuple) or len(answer) != 2:
            raise WrongFormError(f"expected a pair, got {answer!r}", "give two numbers")
        return answer

    exercise = Exercise(
        "E",
        reference=lambda: (2, 3),
        cases=lambda: [()],
        hint="count again",
        mistakes=lambda: [Mistake("the pair is swapped", "smaller first", (3, 2))],
        done="",
        convert=pair,
        value=True,
    )
    verdicts = {
        (2, 3): "E: correct.\n",
        (3, 2): "E: not yet, the pair is swapped. Hint: smaller first\n",
        (2, 4): "E: not yet, item 2 of 2 is not right: that is not the right number. Hint: count again\n",
        5: "E: not yet, expected a pair, got 5. Hint: give two numbers\n",
        None: "E: Not answered yet (the answer is still None).\n",
    }
    for answer, verdict in verdicts.items():
        assert exercise.check(answer) is (verdict == "E: correct.\n")
        assert capsys.readouterr().out == verdict


def test_the_exercise_runner_uses_the_exercises_own_comparison_and_run(capsys):
    from attention_helpers.lessons import Exercise, Mistake

    exercise = Exercise(
        "E",
        reference=lambda n: n * (n + 1) // 2,
        cases=lambda: [(3,), (5,)],
        run=lambda step, n: sum(step(k) for k in range(1, n + 1)),  # the answer is one step of a sum
        differ=lambda answer, expected: None if answer == expected else f"the sum is {answer}",
        mistakes=lambda n: [Mistake("you added the squares", "add k itself", n * (n + 1) * (2 * n + 1) // 6)],
        hint="return k",
        describe=lambda number, total, n: f"for n = {n}",
    )
    assert exercise.check(lambda k: k) is True
    assert exercise.check(lambda k: k * k) is False
    assert exercise.check(lambda k: 2 * k) is False
    assert exercise.check(lambda k: 1 / 0) is False
    assert capsys.readouterr().out.splitlines() == [
        "E: correct on all 2 hidden cases.",
        "E: not yet, you added the squares for n = 3. Hint: add k itself",
        "E: not yet, the sum is 12 for n = 3. Hint: return k",
        "E: not yet, your code raised ZeroDivisionError for n = 3: division by zero. Hint: return k",
    ]


def test_judge_prints_only_a_wrong_verdict(capsys):
    exercise = _doubling_exercise()
    assert len(exercise.judge(lambda x: x + x)) == 2 and capsys.readouterr().out == ""
    assert exercise.judge(lambda x: 3 * x) == [] and capsys.readouterr().out.startswith("E: not yet, ")


# Issue 40 asks for at most 3,000 lines (3,776 when it was filed). The bound below is what the checks came to, and a
# later change may only lower it.
LESSONS_MAX_LINES = 2_985


def test_the_lessons_checks_stay_small():  # their functions' length: tests/test_project.py, as the package's
    import pathlib

    lessons = pathlib.Path(ah.__file__).parent / "lessons"
    total = sum(len(path.read_text().splitlines()) for path in lessons.glob("*.py"))
    assert total <= LESSONS_MAX_LINES, f"attention_helpers/lessons/ holds {total} lines, more than {LESSONS_MAX_LINES}"


@pytest.mark.parametrize(
    ("lesson", "exercise"),
    [pair for pair in _declared_exercises() if not pair[1].value],
    ids=lambda item: item if isinstance(item, int) else item.name,
)
def test_every_named_mistake_is_wrong_on_some_hidden_case(lesson, exercise):
    """A mistake table entry that computes the right answer (a planted slip in a variant builder) is never named:
    every mistake with a ``wrong`` result must differ from the reference on at least one hidden case."""
    from attention_helpers.lessons import compare

    differ = exercise.differ or (lambda answer, expected: compare(answer, expected, exercise.atol))
    declared, wrong_somewhere = set(), set()
    for case in exercise.cases():
        with torch.no_grad():
            expected = exercise.reference(*case)
        for index, mistake in enumerate(exercise.mistakes(*case)):
            if mistake.wrong is None or mistake.item is not None:
                continue
            declared.add(index)
            if differ(mistake.wrong, expected) is not None:
                wrong_somewhere.add(index)
    assert declared == wrong_somewhere, f"lesson {lesson} {exercise.name}: never wrong: {declared - wrong_somewhere}"

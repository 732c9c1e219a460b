"""The grader accepts every correct formulation and rejects each mistake with its own message."""

import functools
import random
import secrets

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name

from remat_guide import SolutionError, check_solution, checkpoint_dot_policy, grader
from remat_guide.exercise import pipeline

P = jax.checkpoint_policies
POLICY = P.dots_with_no_batch_dims_saveable
# The shapes the grader used to try on every call, always the same ones.
OLD_SHAPES = ((6, 4), (3, 5), (8, 8))
# One draw of shapes and values for the gradings that are not about the draw, new each run: they share
# JAX's compiles of its operations at those shapes.
SEED = secrets.randbits(64)


@pytest.fixture(autouse=True)
def _name_the_seed():
    print(f"check_solution(fn, seed={SEED}) repeats this run's draw")


def _math(w1, w2, x):
    return jnp.sum((jax.nn.relu(x @ w1) @ w2) ** 2)


def _checkpointed(policy):
    return jax.checkpoint(_math, policy=policy)


def _decorated(w1, w2, x):
    @functools.partial(jax.checkpoint, policy=P.dots_with_no_batch_dims_saveable)
    def inner(a, b, c):
        return jnp.square(jnp.dot(jnp.maximum(jnp.dot(c, a), 0.0), b)).sum()

    return inner(w1, w2, x)


def _transposed_operands(w1, w2, x):
    # The same math written with transposes: the matmul outputs have shape (d, N).
    h = jax.nn.relu((w1.T @ x.T).T)
    return jnp.sum((w2.T @ h.T) ** 2)


@functools.partial(jax.checkpoint, policy=POLICY)
def _decorated_at_top(w1, w2, x):
    return _math(w1, w2, x)


@functools.partial(jax.remat, policy=jax.ad_checkpoint.checkpoint_policies.dots_with_no_batch_dims_saveable)
def _remat_decorated(w1, w2, x):
    return _math(w1, w2, x)


class _CallableSolution:
    def __init__(self):
        self.checkpointed = jax.checkpoint(pipeline, policy=POLICY)

    def __call__(self, w1, w2, x):
        return self.checkpointed(w1, w2, x)


def _with_policy(w1, w2, x, *, policy):
    return jax.checkpoint(_math, policy=policy)(w1, w2, x)


_PLAIN = jax.checkpoint(_math, policy=POLICY)

CORRECT = {
    "reference implementation": checkpoint_dot_policy,
    "plain jax.checkpoint": _checkpointed(P.dots_with_no_batch_dims_saveable),
    "alias name of the policy": _checkpointed(P.checkpoint_dots_with_no_batch_dims),
    "jax.remat": jax.remat(_math, policy=P.dots_with_no_batch_dims_saveable),
    "decorator with maximum/square/dot": _decorated,
    "transposed formulation": jax.checkpoint(_transposed_operands, policy=P.dots_with_no_batch_dims_saveable),
    "jitted solution": jax.jit(_checkpointed(P.dots_with_no_batch_dims_saveable)),
    "jit inside the checkpoint": jax.checkpoint(jax.jit(pipeline), policy=POLICY),
    "jit inside and outside": jax.jit(jax.checkpoint(jax.jit(pipeline), policy=POLICY)),
    "nested jit outside": jax.jit(jax.jit(jax.checkpoint(pipeline, policy=POLICY))),
    "nested jit inside": jax.checkpoint(jax.jit(jax.jit(pipeline)), policy=POLICY),
    "jitted matmuls inside": jax.checkpoint(
        lambda w1, w2, x: jnp.sum(jax.jit(jnp.matmul)(jax.nn.relu(jax.jit(jnp.matmul)(x, w1)), w2) ** 2),
        policy=POLICY),
    "functools.partial binding the policy": functools.partial(_with_policy, policy=POLICY),
    "decorator at the top level": _decorated_at_top,
    "jax.remat decorator, policy from jax.ad_checkpoint": _remat_decorated,
    "jax.ad_checkpoint.checkpoint_policies": jax.checkpoint(
        _math, policy=jax.ad_checkpoint.checkpoint_policies.dots_with_no_batch_dims_saveable),
    "lambda": lambda w1, w2, x: jax.checkpoint(pipeline, policy=POLICY)(w1, w2, x),
    "callable object": _CallableSolution(),
    "keyword arguments into the checkpoint": lambda w1, w2, x: _PLAIN(w1=w1, w2=w2, x=x),
    "*args and **kwargs": lambda *args, **kwargs: _PLAIN(*args, **kwargs),
    "jit of keyword call": jax.jit(lambda w1, w2, x: _PLAIN(x=x, w2=w2, w1=w1)),
    "einsum": jax.checkpoint(
        lambda w1, w2, x: jnp.einsum("nd,de->ne", jax.nn.relu(jnp.einsum("nd,de->ne", x, w1)), w2).__pow__(2).sum(),
        policy=P.dots_with_no_batch_dims_saveable,
    ),
}


@pytest.mark.parametrize("fn", CORRECT.values(), ids=CORRECT.keys())
def test_accepts_correct_solutions(fn):
    assert check_solution(fn, seed=SEED) is None


def _reject(fn, *fragments, seed=SEED):
    with pytest.raises(SolutionError) as info:
        check_solution(fn, seed=seed)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_rejects_missing_checkpoint():
    _reject(_math, "does not use jax.checkpoint")


def test_rejects_checkpoint_without_policy():
    _reject(jax.checkpoint(_math), "has no policy")


@pytest.mark.parametrize(
    "policy, fragments",
    [
        (P.everything_saveable, ("everything_saveable", "saves values other than")),
        (P.nothing_saveable, ("nothing_saveable", "does not save the two matmul outputs")),
        (P.save_only_these_names("hidden"), ("policy save_only_these_names(...) does not save",)),
        (P.dots_saveable, ("dots_saveable", "batch dimensions")),
    ],
    ids=["everything_saveable", "nothing_saveable", "names policy", "dots_saveable"],
)
def test_rejects_wrong_policies(policy, fragments):
    _reject(_checkpointed(policy), *fragments)


def test_rejects_equivalent_custom_policy():
    def only_unbatched_dots(prim, *avals, **params):
        if prim.name != "dot_general":
            return False
        (_, _), (lhs_batch, _) = params["dimension_numbers"]
        return not lhs_batch

    message = _reject(_checkpointed(only_unbatched_dots), "policy only_unbatched_dots saves",
                      "asks for the standard")
    assert "<locals>" not in message and "0x" not in message


def test_rejects_partial_checkpoint_around_first_layer():
    first = jax.checkpoint(lambda w1, x: jax.nn.relu(x @ w1), policy=P.dots_with_no_batch_dims_saveable)
    _reject(lambda w1, w2, x: jnp.sum((first(w1, x) @ w2) ** 2), "only part of the pipeline", "dot_general")


def test_rejects_sum_outside_checkpoint():
    # The residuals are the right ones here: only the structure shows the mistake.
    inner = jax.checkpoint(lambda w1, w2, x: (jax.nn.relu(x @ w1) @ w2) ** 2, policy=P.dots_with_no_batch_dims_saveable)
    _reject(lambda w1, w2, x: jnp.sum(inner(w1, w2, x)), "only part of the pipeline", "reduce_sum")


def test_rejects_two_checkpoints():
    first = jax.checkpoint(lambda w1, x: jax.nn.relu(x @ w1), policy=P.dots_with_no_batch_dims_saveable)
    second = jax.checkpoint(lambda h, w2: jnp.sum((h @ w2) ** 2), policy=P.dots_with_no_batch_dims_saveable)
    _reject(lambda w1, w2, x: second(first(w1, x), w2), "2 separate checkpoints")


WRONG_MATH = {
    "relu is missing": lambda w1, w2, x: jnp.sum((x @ w1 @ w2) ** 2),
    "square is missing": lambda w1, w2, x: jnp.sum(jax.nn.relu(x @ w1) @ w2),
    "mean instead of the sum": lambda w1, w2, x: jnp.mean((jax.nn.relu(x @ w1) @ w2) ** 2),
    "w1 is transposed": lambda w1, w2, x: jnp.sum((jax.nn.relu(x @ w1.T) @ w2) ** 2),
    "w2 is transposed": lambda w1, w2, x: jnp.sum((jax.nn.relu(x @ w1) @ w2.T) ** 2),
    "swapped": lambda w1, w2, x: jnp.sum((jax.nn.relu(x @ w2) @ w1) ** 2),
    "wrong value": lambda w1, w2, x: jnp.sum((jax.nn.sigmoid(x @ w1) @ w2) ** 2),
}


@pytest.mark.parametrize("fragment, math", WRONG_MATH.items(), ids=WRONG_MATH.keys())
def test_rejects_wrong_math_even_when_checkpointed(fragment, math):
    _reject(jax.checkpoint(math, policy=P.dots_with_no_batch_dims_saveable), fragment)


def test_wrong_math_messages_are_distinct():
    messages = set()
    for math in WRONG_MATH.values():
        with pytest.raises(SolutionError) as info:
            check_solution(jax.checkpoint(math, policy=P.dots_with_no_batch_dims_saveable), seed=SEED)
        messages.add(str(info.value).split(" for ")[0])
    assert len(messages) == len(WRONG_MATH)


# Seeds whose first draw gives two or more slips the same value (found by search; about 1
# draw in 3000 per slip): the diagnosis must come from all three draws, not the first.
COLLIDING = [(777, "w2 is transposed", "w1 is transposed"),
             (777, "w1 is transposed", "w2 is transposed"),
             (2251, "w2 is transposed", "w1 is transposed"),
             (3231, "swapped", "w2 is transposed"),
             (3506, "w2 is transposed", "relu is missing"),
             (377, "mean instead of the sum", "square is missing")]


@pytest.mark.parametrize("seed, slip, other", COLLIDING)
def test_a_slip_is_named_only_when_it_matches_every_draw(seed, slip, other):
    values = np.random.default_rng(seed)
    first = grader._inputs(values, *grader._draw_shapes(random.Random(seed))[0])
    on_first = grader._matching_slips([WRONG_MATH[slip](*first)], [grader._float64(*first)])
    assert len(on_first) >= 2 and any(other in d for d in on_first), on_first  # the seed still collides
    fn = jax.checkpoint(WRONG_MATH[slip], policy=P.dots_with_no_batch_dims_saveable)
    with pytest.raises(SolutionError) as info:
        check_solution(fn, seed=seed)
    assert slip in str(info.value) and other not in str(info.value), str(info.value)


def test_every_matching_slip_is_named():
    # On all-ones 2 x 2 inputs the sum of (x @ w1 @ w2) is 16, and so is the mean of its
    # squares: the two slips cannot be told apart, so both are named.
    ones = (jnp.ones((2, 2)),) * 3
    with pytest.raises(SolutionError, match="matches each of these slips") as info:
        grader._check_values(WRONG_MATH["square is missing"], [ones])
    assert "square is missing" in str(info.value) and "mean instead of the sum" in str(info.value)


def _recording(fn, calls):
    """``fn``, recording the inputs of each call that runs it on arrays (not while tracing)."""
    def recorded(w1, w2, x):
        if not isinstance(x, jax.core.Tracer):
            calls.append(tuple(np.array(a) for a in (w1, w2, x)))
        return fn(w1, w2, x)

    return recorded


def test_rejects_non_scalar_result():
    calls = []
    message = _reject(_recording(lambda w1, w2, x: (jax.nn.relu(x @ w1) @ w2) ** 2, calls), "expected a scalar")
    assert f"array of shape {calls[0][2].shape}" in message


def test_rejects_non_array_result():
    _reject(lambda w1, w2, x: float(_math(w1, w2, x)), "returned a float")


def test_rejects_function_that_raises():
    def broken(w1, w2, x):
        raise RuntimeError("not implemented yet")

    calls = []
    message = _reject(_recording(broken, calls), "raised RuntimeError: not implemented yet")
    assert f"on w1, w2 of shape {calls[0][0].shape} and x of shape {calls[0][2].shape}" in message


def test_rejects_function_that_fails_only_when_traced():
    def concrete_only(w1, w2, x):
        if float(jnp.sum(x)) > 1e9:
            return jnp.zeros(())
        return _math(w1, w2, x)

    _reject(concrete_only, "jax.jit(jax.grad(fn)) raised")


def test_rejects_wrong_gradient():
    @jax.custom_vjp
    def bad_grad(w1, w2, x):
        return _math(w1, w2, x)

    # Ones, not zeros: on a small random draw the true gradient of w1 can be all zeros (every
    # ReLU inactive), and a zero gradient would then be right.
    bad_grad.defvjp(lambda w1, w2, x: (_math(w1, w2, x), (w1, w2, x)),
                    lambda res, g: tuple(jnp.ones_like(a) for a in res))
    _reject(bad_grad, "gradient with respect to w1 is wrong")


def test_names_policy_on_tagged_values_is_still_wrong():
    def tagged(w1, w2, x):
        h = checkpoint_name(x @ w1, "h")
        return jnp.sum((jax.nn.relu(h) @ w2) ** 2)

    _reject(jax.checkpoint(tagged, policy=P.save_only_these_names("h")),
            "policy save_only_these_names(...) saves values other than", "'h'")


def test_policies_are_named_readably():
    class DotsOnly:
        def __call__(self, prim, *avals, **params):
            return prim.name == "dot_general"

    _reject(_checkpointed(DotsOnly()), "policy DotsOnly ")
    _reject(_checkpointed(P.dots_saveable), "policy dots_saveable / checkpoint_dots ")
    combined = P.save_from_both_policies(P.dots_saveable, P.save_only_these_names("h"))
    _reject(_checkpointed(combined), "policy save_from_both_policies(...) ")


def test_rejects_non_callable():
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        check_solution(3)


def test_solution_error_is_an_assertion_error():
    assert issubclass(SolutionError, AssertionError)


def test_rejects_a_solution_that_checkpoints_only_when_jit_is_disabled():
    checkpointed = _checkpointed(P.dots_with_no_batch_dims_saveable)

    def only_without_jit(w1, w2, x):
        if jax.config.jax_disable_jit:
            return checkpointed(w1, w2, x)
        return _math(w1, w2, x)

    with jax.disable_jit():  # what the grader used to look at: the checkpointed version
        assert jax.make_jaxpr(only_without_jit)(jnp.eye(2), jnp.eye(2), jnp.ones((3, 2))).eqns[0] \
            .primitive.name == "remat2"
    _reject(only_without_jit, "does not use jax.checkpoint")


def test_looks_through_nested_jit_calls():
    inner = jax.jit(_checkpointed(P.dots_with_no_batch_dims_saveable))
    assert check_solution(jax.jit(lambda w1, w2, x: inner(w1, w2, x)), seed=SEED) is None


# Wrong solutions stay wrong however jax.jit is applied around or inside the checkpoint.
WRONG_UNDER_JIT = {
    "no policy": (jax.jit(jax.checkpoint(jax.jit(_math))), ("has no policy",)),
    "everything_saveable": (jax.checkpoint(jax.jit(_math), policy=P.everything_saveable),
                            ("everything_saveable", "saves values other than")),
    "nothing_saveable": (jax.jit(jax.checkpoint(jax.jit(_math), policy=P.nothing_saveable)),
                         ("does not save the two matmul outputs",)),
    "dots_saveable": (jax.checkpoint(jax.jit(jax.jit(_math)), policy=P.dots_saveable), ("batch dimensions",)),
    "sum outside": (jax.jit(lambda w1, w2, x: jnp.sum(jax.checkpoint(
        jax.jit(lambda w1, w2, x: (jax.nn.relu(x @ w1) @ w2) ** 2), policy=POLICY)(w1, w2, x))),
        ("only part of the pipeline", "reduce_sum")),
    "wrong math": (jax.checkpoint(jax.jit(lambda w1, w2, x: jnp.sum((x @ w1 @ w2) ** 2)), policy=POLICY),
                   ("relu is missing",)),
}


@pytest.mark.parametrize("fn, fragments", WRONG_UNDER_JIT.values(), ids=WRONG_UNDER_JIT.keys())
def test_rejections_survive_jit_inside_and_outside(fn, fragments):
    _reject(fn, *fragments)


def _right_only_for(shapes):
    """Checkpointed like a correct solution, but right only for inputs ``x`` of these shapes."""
    def body(w1, w2, x):
        value = _math(w1, w2, x)
        return value if tuple(x.shape) in shapes else 0.0 * value

    return jax.checkpoint(body, policy=POLICY)


def test_rejects_a_solution_right_only_for_the_old_fixed_shapes(monkeypatch):
    cached = _right_only_for(OLD_SHAPES)
    _reject(cached, "wrong value: fn returned 0, expected")
    # With the shapes the grader used to try, the same solution passed: the test means something.
    monkeypatch.setattr(grader, "_draw_shapes", lambda rng: list(OLD_SHAPES))
    assert check_solution(cached, seed=SEED) is None


def test_rejects_a_solution_right_only_for_the_shapes_of_its_first_call():
    first = []

    def first_shape_only(w1, w2, x):
        first.append(tuple(x.shape))
        value = _math(w1, w2, x)
        return value if tuple(x.shape) == first[0] else 0.0 * value

    _reject(jax.checkpoint(first_shape_only, policy=POLICY), "wrong value: fn returned 0")
    assert len(set(first)) > 1  # one grading already tries several shapes


def test_rejects_a_solution_right_only_for_the_shapes_of_an_earlier_grading():
    calls = []
    check_solution(_recording(checkpoint_dot_policy, calls))
    seen = {x.shape for _, _, x in calls}
    assert len(seen) == grader._NUM_SHAPES
    # Right for every shape the first grading tried; a second grading draws new ones.
    _reject(_right_only_for(seen), "wrong value: fn returned 0", seed=None)


def _fails_at_once(calls):
    # Records the inputs of a grading's value checks, then fails them (cheap).
    return _recording(lambda w1, w2, x: jnp.zeros(()), calls)


def test_each_call_draws_new_shapes():
    first_shapes = set()
    for _ in range(6):
        calls = []
        with pytest.raises(SolutionError):
            check_solution(_fails_at_once(calls))
        first_shapes.add(calls[0][2].shape)
    assert len(first_shapes) > 1


def test_each_call_draws_new_values(monkeypatch):
    monkeypatch.setattr(grader, "_draw_shapes", lambda rng: [(5, 3), (3, 5), (4, 2)])
    calls = []
    for _ in range(2):
        with pytest.raises(SolutionError):
            check_solution(_fails_at_once(calls))
    # The value is checked on all three draws before a wrong one fails the grading.
    assert len(calls) == 2 * 3
    (w1_a, _, x_a), (w1_b, _, x_b) = calls[0], calls[3]
    assert x_a.shape == x_b.shape == (5, 3)
    assert not np.array_equal(x_a, x_b) and not np.array_equal(w1_a, w1_b)


def test_one_grading_tries_distinct_shapes_with_n_different_from_d():
    calls = []
    check_solution(_recording(checkpoint_dot_policy, calls))
    shapes = list(dict.fromkeys(x.shape for _, _, x in calls))  # in the order tried
    low, high = grader._SIZES
    assert len(shapes) == grader._NUM_SHAPES
    assert all(low <= size <= high for shape in shapes for size in shape)
    assert all(n != d for n, d in shapes)
    assert any(n > d for n, d in shapes) and any(n < d for n, d in shapes)
    for w1, w2, x in calls:
        d = x.shape[1]
        assert w1.shape == w2.shape == (d, d) and not np.array_equal(w1, w1.T)


def test_draws_are_always_valid():
    for seed in range(500):
        shapes = grader._draw_shapes(random.Random(seed))
        assert len(set(shapes)) == len(shapes) == grader._NUM_SHAPES
        assert all(n != d for n, d in shapes)
        assert any(n > d for n, d in shapes) and any(n < d for n, d in shapes)


def test_a_seed_repeats_the_inputs():
    def inputs(seed):
        calls = []
        with pytest.raises(SolutionError):
            check_solution(_fails_at_once(calls), seed=seed)
        return calls[0]

    same_a, same_b, other = inputs(7), inputs(7), inputs(8)
    assert all(np.array_equal(a, b) for a, b in zip(same_a, same_b))
    assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(same_a, other))


@pytest.mark.parametrize("seed, error, match", [
    ("3", TypeError, "seed must be an int, got str"),
    (True, TypeError, "seed must be an int, got bool"),
    (1.5, TypeError, "seed must be an int, got float"),
    (-1, ValueError, "seed must be at least 0, got -1"),
])
def test_bad_seeds_are_refused(seed, error, match):
    with pytest.raises(error, match=match):
        check_solution(checkpoint_dot_policy, seed=seed)


@pytest.fixture
def remat3():
    previous = jax.config.jax_remat3
    jax.config.update("jax_remat3", True)
    yield
    jax.config.update("jax_remat3", previous)


def test_under_the_remat3_flag_the_checkpoint_is_found(remat3):
    # The flag makes jax.checkpoint a call_hi_primitive equation instead of remat2.
    eqn = jax.make_jaxpr(_PLAIN)(jnp.eye(2), jnp.eye(2), jnp.ones((3, 2))).eqns[0]
    assert eqn.primitive.name == "call_hi_primitive"
    assert check_solution(jax.jit(jax.checkpoint(jax.jit(pipeline), policy=POLICY)), seed=SEED) is None
    _reject(jax.checkpoint(_math), "has no policy")
    _reject(jax.checkpoint(_math, policy=P.dots_saveable), "batch dimensions")
    _reject(_math, "does not use jax.checkpoint")

"""The grader accepts every correct formulation and rejects each mistake with its own message."""

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

from remat_guide import SolutionError, check_solution, checkpoint_dot_policy

P = jax.checkpoint_policies


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


CORRECT = {
    "reference implementation": checkpoint_dot_policy,
    "plain jax.checkpoint": _checkpointed(P.dots_with_no_batch_dims_saveable),
    "alias name of the policy": _checkpointed(P.checkpoint_dots_with_no_batch_dims),
    "jax.remat": jax.remat(_math, policy=P.dots_with_no_batch_dims_saveable),
    "decorator with maximum/square/dot": _decorated,
    "transposed formulation": jax.checkpoint(_transposed_operands, policy=P.dots_with_no_batch_dims_saveable),
    "jitted solution": jax.jit(_checkpointed(P.dots_with_no_batch_dims_saveable)),
    "einsum": jax.checkpoint(
        lambda w1, w2, x: jnp.einsum("nd,de->ne", jax.nn.relu(jnp.einsum("nd,de->ne", x, w1)), w2).__pow__(2).sum(),
        policy=P.dots_with_no_batch_dims_saveable,
    ),
}


@pytest.mark.parametrize("fn", CORRECT.values(), ids=CORRECT.keys())
def test_accepts_correct_solutions(fn):
    assert check_solution(fn) is None


def _reject(fn, *fragments):
    with pytest.raises(SolutionError) as info:
        check_solution(fn)
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
            check_solution(jax.checkpoint(math, policy=P.dots_with_no_batch_dims_saveable))
        messages.add(str(info.value).split(" for ")[0])
    assert len(messages) == len(WRONG_MATH)


def test_rejects_non_scalar_result():
    _reject(lambda w1, w2, x: (jax.nn.relu(x @ w1) @ w2) ** 2, "expected a scalar", "shape (6, 4)")


def test_rejects_non_array_result():
    _reject(lambda w1, w2, x: float(_math(w1, w2, x)), "returned a float")


def test_rejects_function_that_raises():
    def broken(w1, w2, x):
        raise RuntimeError("not implemented yet")

    _reject(broken, "raised RuntimeError: not implemented yet", "shape (4, 4)")


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

    bad_grad.defvjp(lambda w1, w2, x: (_math(w1, w2, x), (w1, w2, x)),
                    lambda res, g: tuple(jnp.zeros_like(a) for a in res))
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
    assert check_solution(jax.jit(lambda w1, w2, x: inner(w1, w2, x))) is None

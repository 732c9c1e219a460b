"""The exercise's grader: checks a solution's value, gradient and what it saves."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core as jcore
import jax.numpy as jnp

from remat_guide import _validation as validation
from remat_guide._labels import policy_label
from remat_guide.residuals import Residuals, saved_residuals

__all__ = ["SolutionError", "check_solution"]

# (N, d) pairs: N != d in most of them, so a transposed or swapped operand shows.
_SHAPES = ((6, 4), (3, 5), (8, 8))
_VMAP_BATCH = 2
_RTOL = 1e-4
_POLICY = jax.checkpoint_policies.dots_with_no_batch_dims_saveable


class SolutionError(AssertionError):
    """A solution to the exercise is wrong; the message says what to change."""


# Written out here on purpose, not imported from remat_guide.exercise: the grader checks
# the package's own solution too, so its reference must not share that solution's code.
def _reference(w1: jax.Array, w2: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.sum((jax.nn.relu(x @ w1) @ w2) ** 2)


# Common slips, each with the diagnosis shown when a solution's value matches it.
_SLIPS: tuple[tuple[str, Callable[..., jax.Array]], ...] = (
    ("the relu is missing: apply jax.nn.relu to x @ w1",
     lambda w1, w2, x: jnp.sum((x @ w1 @ w2) ** 2)),
    ("the square is missing: sum (... @ w2) ** 2, not ... @ w2",
     lambda w1, w2, x: jnp.sum(jax.nn.relu(x @ w1) @ w2)),
    ("it takes the mean instead of the sum: use jnp.sum",
     lambda w1, w2, x: jnp.mean((jax.nn.relu(x @ w1) @ w2) ** 2)),
    ("w1 is transposed: compute x @ w1, not x @ w1.T",
     lambda w1, w2, x: jnp.sum((jax.nn.relu(x @ w1.T) @ w2) ** 2)),
    ("w2 is transposed: compute ... @ w2, not ... @ w2.T",
     lambda w1, w2, x: jnp.sum((jax.nn.relu(x @ w1) @ w2.T) ** 2)),
    ("w1 and w2 are swapped: the first matmul uses w1",
     lambda w1, w2, x: jnp.sum((jax.nn.relu(x @ w2) @ w1) ** 2)),
)


def _inputs(seed: int, n: int, d: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    return (jax.random.normal(k1, (d, d)), jax.random.normal(k2, (d, d)),
            jax.random.normal(k3, (n, d)))


def _shapes_text(w1: jax.Array, x: jax.Array) -> str:
    return f"w1, w2 of shape {tuple(w1.shape)} and x of shape {tuple(x.shape)}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _call(what: str, thunk: Callable[[], Any], w1: jax.Array, x: jax.Array) -> Any:
    try:
        return thunk()
    except Exception as error:  # a learner's code may raise anything
        raise SolutionError(
            f"{what} raised {_first_line(error)} (on {_shapes_text(w1, x)})"
        ) from error


def _close(a: jax.Array, b: jax.Array) -> bool:
    return bool(jnp.allclose(a, b, rtol=_RTOL, atol=_RTOL * float(jnp.abs(b).max())))


def _check_value(fn: Callable, w1: jax.Array, w2: jax.Array, x: jax.Array) -> None:
    out = _call("fn", lambda: fn(w1, w2, x), w1, x)
    if not isinstance(out, jax.Array):
        raise SolutionError(f"fn returned a {type(out).__name__}; expected a scalar JAX array")
    if out.shape != ():
        raise SolutionError(
            f"fn returned an array of shape {out.shape}; expected a scalar (the sum of all entries)"
        )
    expected = _reference(w1, w2, x)
    if _close(out, expected):
        return
    for diagnosis, slip in _SLIPS:
        if _close(out, slip(w1, w2, x)):
            raise SolutionError(f"wrong value: {diagnosis}")
    raise SolutionError(
        f"wrong value: fn returned {float(out):.6g}, expected {float(expected):.6g} "
        f"for {_shapes_text(w1, x)}"
    )


def _check_gradient(fn: Callable, w1: jax.Array, w2: jax.Array, x: jax.Array) -> None:
    grad = jax.jit(jax.grad(fn, argnums=(0, 1, 2)))
    got = _call("jax.jit(jax.grad(fn))", lambda: grad(w1, w2, x), w1, x)
    expected = jax.grad(_reference, argnums=(0, 1, 2))(w1, w2, x)
    for name, g, e in zip(("w1", "w2", "x"), got, expected):
        if not _close(g, e):
            raise SolutionError(f"the gradient with respect to {name} is wrong")


def _equation_label(eqn: Any) -> str:
    return str(eqn.params.get("name", eqn.primitive.name))


def _eval_inlined(jaxpr: Any, consts: Any, args: Any) -> list[Any]:
    """Evaluates a jaxpr, running the body of each ``jit`` call in place of the call."""
    env: dict[Any, Any] = {}

    def read(atom: Any) -> Any:
        return atom.val if isinstance(atom, jcore.Literal) else env[atom]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn.primitive.name in ("jit", "pjit"):
            inner = eqn.params["jaxpr"]
            outs = _eval_inlined(inner.jaxpr, inner.consts, ins)
        else:
            with eqn.ctx.manager:  # as jax.core.eval_jaxpr binds an equation
                outs = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
            outs = outs if eqn.primitive.multiple_results else [outs]
        for var, value in zip(eqn.outvars, outs):
            if not isinstance(var, jcore.DropVar):
                env[var] = value
    return [read(v) for v in jaxpr.outvars]


def _inlined(fn: Callable, w1: jax.Array, w2: jax.Array, x: jax.Array) -> Callable:
    """``fn`` as traced at these shapes, with its ``jax.jit`` calls inlined.

    A jitted solution shows its ``jax.checkpoint`` inside a ``jit`` call; inlining it
    shows the same structure as the solution without ``jax.jit``. The solution is traced
    with jit enabled, as it runs, so one that checkpoints only with jit disabled fails.
    """
    closed = _call("jax.make_jaxpr(fn)", lambda: jax.make_jaxpr(fn)(w1, w2, x), w1, x)

    def inlined(a: jax.Array, b: jax.Array, c: jax.Array) -> Any:
        return _eval_inlined(closed.jaxpr, closed.consts, [a, b, c])[0]

    return inlined


def _checkpoint_policy(fn: Callable, w1: jax.Array, w2: jax.Array, x: jax.Array) -> Any:
    """The policy of the one ``jax.checkpoint`` that must hold the whole pipeline."""
    eqns = _call("jax.make_jaxpr(fn)", lambda: jax.make_jaxpr(fn)(w1, w2, x), w1, x).jaxpr.eqns
    checkpoints = [e for e in eqns if e.primitive.name == "remat2"]
    if not checkpoints:
        raise SolutionError(
            "fn does not use jax.checkpoint: wrap the whole pipeline in jax.checkpoint("
            "..., policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)"
        )
    outside = [_equation_label(e) for e in eqns if e.primitive.name != "remat2"]
    if len(checkpoints) > 1 or outside:
        detail = f"{', '.join(outside)} run(s) outside it" if outside else (
            f"it is split into {len(checkpoints)} separate checkpoints")
        raise SolutionError(
            f"jax.checkpoint wraps only part of the pipeline ({detail}): "
            "wrap all of x @ w1, relu, @ w2, square and sum in one jax.checkpoint"
        )
    policy = checkpoints[0].params["policy"]
    if policy is None:
        raise SolutionError(
            "jax.checkpoint has no policy, so the backward pass recomputes both matmuls: "
            "pass policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable"
        )
    return policy


def _summary(residuals: Residuals) -> str:
    return ", ".join(f"{r.name} {r.type_str}" for r in residuals) or "nothing"


def _check_saved(fn: Callable, policy: Any, w1: jax.Array, w2: jax.Array, x: jax.Array) -> None:
    label = policy_label(policy)
    residuals = _call("saved_residuals(fn)", lambda: saved_residuals(fn, w1, w2, x), w1, x)
    arguments = residuals.by_kind("argument")
    computed = [r for r in residuals if r.kind != "argument"]
    matmul_size = x.shape[0] * x.shape[1]
    dots = [r for r in computed if r.name == "dot_general" and math.prod(r.shape) == matmul_size]
    if len(arguments) != 3:
        raise SolutionError(f"grad of fn keeps {len(arguments)} of the 3 inputs; expected all 3")
    others = [r for r in computed if r not in dots]
    if others:
        raise SolutionError(
            f"policy {label} saves values other than the matmul outputs (grad keeps "
            f"{_summary(Residuals(others))}): use "
            "jax.checkpoint_policies.dots_with_no_batch_dims_saveable"
        )
    if len(dots) != 2:
        raise SolutionError(
            f"policy {label} does not save the two matmul outputs (grad keeps "
            f"{_summary(Residuals(computed))} besides the inputs): use "
            "jax.checkpoint_policies.dots_with_no_batch_dims_saveable"
        )
    batched = [jnp.stack([a] * _VMAP_BATCH) for a in (w1, w2, x)]
    under_vmap = _call("saved_residuals(jax.vmap(fn))",
                       lambda: saved_residuals(jax.vmap(fn), *batched), w1, x)
    if len(under_vmap) != 3:
        raise SolutionError(
            f"policy {label} also saves matmuls that have batch dimensions (under jax.vmap "
            f"over all inputs grad keeps {_summary(under_vmap.by_kind('primitive'))}): use "
            "jax.checkpoint_policies.dots_with_no_batch_dims_saveable"
        )
    if policy is not _POLICY:
        raise SolutionError(
            f"policy {label} saves the right values here, but the exercise asks for the "
            "standard jax.checkpoint_policies.dots_with_no_batch_dims_saveable"
        )


def check_solution(fn: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]) -> None:
    """Grades a solution of the exercise: ``fn(w1, w2, x)``.

    A correct solution computes ``sum((relu(x @ w1) @ w2) ** 2)`` for ``(d, d)`` weights
    and ``(N, d)`` inputs, with the whole computation inside one ``jax.checkpoint``
    whose policy is ``jax.checkpoint_policies.dots_with_no_batch_dims_saveable``. Its
    value and gradient are compared with a reference on several random shapes, and what
    its backward pass keeps is checked too, because every policy gives the same numbers.
    The structure is read from ``fn`` as ``jax.jit`` traces it (calls to ``jax.jit``
    inside are looked through), never under ``jax.disable_jit``: a solution that
    checkpoints only when jit is disabled fails.

    Args:
        fn: The solution, called as ``fn(w1, w2, x)``.

    Returns:
        None when the solution is correct.

    Raises:
        TypeError: If ``fn`` is not callable.
        SolutionError: If the solution is wrong; the message says what to change.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide import check_solution, checkpoint_dot_policy
        >>> check_solution(checkpoint_dot_policy)
        >>> def no_checkpoint(w1, w2, x):
        ...     return jnp.sum((jax.nn.relu(x @ w1) @ w2) ** 2)
        >>> check_solution(no_checkpoint)
        Traceback (most recent call last):
        ...
        remat_guide.grader.SolutionError: fn does not use jax.checkpoint: ...
    """
    validation.callable_arg(fn, "fn")
    for seed, (n, d) in enumerate(_SHAPES):
        w1, w2, x = _inputs(seed, n, d)
        _check_value(fn, w1, w2, x)
        _check_gradient(fn, w1, w2, x)
        # The structure is read from fn as jit traces it, with its jit calls inlined.
        inlined = _inlined(fn, w1, w2, x)
        policy = _checkpoint_policy(inlined, w1, w2, x)
        _check_saved(inlined, policy, w1, w2, x)

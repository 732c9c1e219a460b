"""The exercise's grader: checks a solution's value, gradient and what it saves."""

from __future__ import annotations

import math
import random
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import jax.numpy as jnp
import numpy as np

from remat_guide import _validation as validation
from remat_guide._labels import policy_label
from remat_guide.residuals import Residuals, saved_residuals

__all__ = ["SolutionError", "check_solution"]

# Each call draws _NUM_SHAPES distinct (N, d) pairs afresh, N and d between _SIZES[0] and
# _SIZES[1] inclusive, never N == d (so a transposed or swapped operand shows), one with
# N > d and one with N < d, and fresh values: a solution that is right only for some
# shapes, or only for the shapes of an earlier call, fails.
_NUM_SHAPES = 3
_SIZES = (2, 12)
_VMAP_BATCH = 2
_RTOL = 1e-4
_POLICY = jax.checkpoint_policies.dots_with_no_batch_dims_saveable


class SolutionError(AssertionError):
    """A solution to the exercise is wrong; the message says what to change."""


# Written out here on purpose, not imported from remat_guide.exercise: the grader checks
# the package's own solution too, so its reference must not share that solution's code.
# It runs in NumPy, in float64: JAX would compile each operation again for every new shape.
def _relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0.0)


def _reference(w1: np.ndarray, w2: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.sum((_relu(x @ w1) @ w2) ** 2)


def _reference_gradient(w1: np.ndarray, w2: np.ndarray,
                        x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gradient of ``_reference`` with respect to ``(w1, w2, x)``, by the chain rule."""
    h = x @ w1
    r = _relu(h)
    dy = 2.0 * (r @ w2)
    dh = (dy @ w2.T) * (h > 0)
    return x.T @ dh, r.T @ dy, dh @ w1.T


# Common slips, each with the diagnosis shown when a solution's value matches it.
_SLIPS: tuple[tuple[str, Callable[..., np.ndarray]], ...] = (
    ("the relu is missing: apply jax.nn.relu to x @ w1",
     lambda w1, w2, x: np.sum((x @ w1 @ w2) ** 2)),
    ("the square is missing: sum (... @ w2) ** 2, not ... @ w2",
     lambda w1, w2, x: np.sum(_relu(x @ w1) @ w2)),
    ("it takes the mean instead of the sum: use jnp.sum",
     lambda w1, w2, x: np.mean((_relu(x @ w1) @ w2) ** 2)),
    ("w1 is transposed: compute x @ w1, not x @ w1.T",
     lambda w1, w2, x: np.sum((_relu(x @ w1.T) @ w2) ** 2)),
    ("w2 is transposed: compute ... @ w2, not ... @ w2.T",
     lambda w1, w2, x: np.sum((_relu(x @ w1) @ w2.T) ** 2)),
    ("w1 and w2 are swapped: the first matmul uses w1",
     lambda w1, w2, x: np.sum((_relu(x @ w2) @ w1) ** 2)),
)


def _draw_shapes(rng: random.Random) -> list[tuple[int, int]]:
    """``_NUM_SHAPES`` distinct ``(N, d)`` pairs with N != d: one N > d, one N < d, in random order."""
    low, high = _SIZES
    small, large = sorted(rng.sample(range(low, high + 1), 2))
    shapes = [(large, small)]  # N > d
    small, large = sorted(rng.sample(range(low, high + 1), 2))
    shapes.append((small, large))  # N < d
    while len(shapes) < _NUM_SHAPES:
        n, d = rng.sample(range(low, high + 1), 2)
        if (n, d) not in shapes:
            shapes.append((n, d))
    rng.shuffle(shapes)
    return shapes


def _inputs(rng: np.random.Generator, n: int, d: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    return tuple(jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
                 for shape in ((d, d), (d, d), (n, d)))


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


def _float64(*arrays: jax.Array) -> list[np.ndarray]:
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def _close(a: Any, b: np.ndarray) -> bool:
    """Whether ``a`` matches ``b`` (float64) to float32 accuracy, in NumPy: no compile per shape."""
    a, = _float64(a)
    return a.shape == b.shape and bool(
        np.allclose(a, b, rtol=_RTOL, atol=_RTOL * float(np.abs(b).max(initial=0.0))))


def _value(fn: Callable, w1: jax.Array, w2: jax.Array, x: jax.Array) -> jax.Array:
    out = _call("fn", lambda: fn(w1, w2, x), w1, x)
    if not isinstance(out, jax.Array):
        raise SolutionError(f"fn returned a {type(out).__name__}; expected a scalar JAX array")
    if out.shape != ():
        raise SolutionError(
            f"fn returned an array of shape {out.shape}; expected a scalar (the sum of all entries)"
        )
    return out


def _matching_slips(outs: Sequence[jax.Array], draws: Sequence[tuple[np.ndarray, ...]]) -> list[str]:
    """The diagnoses of the slips whose value matches the solution's on every draw."""
    return [diagnosis for diagnosis, slip in _SLIPS
            if all(_close(out, slip(*inputs)) for out, inputs in zip(outs, draws))]


def _check_values(fn: Callable, draws: Sequence[tuple[jax.Array, jax.Array, jax.Array]]) -> None:
    """Checks fn's value on every draw; a wrong one is diagnosed from all of them.

    On one draw two slips can give the same number (when the relu zeroes most of ``x @ w1``,
    say); a slip is named only when it matches on every draw, and when more than one does,
    each is named.
    """
    outs = [_value(fn, *draw) for draw in draws]
    inputs = [_float64(*draw) for draw in draws]
    wrong = [(out, draw, _reference(*i)) for out, draw, i in zip(outs, draws, inputs)
             if not _close(out, _reference(*i))]
    if not wrong:
        return
    slips = _matching_slips(outs, inputs)
    if len(slips) == 1:
        raise SolutionError(f"wrong value: {slips[0]}")
    if slips:
        raise SolutionError("wrong value: it matches each of these slips: " + "; or ".join(slips))
    out, (w1, _, x), expected = wrong[0]
    raise SolutionError(
        f"wrong value: fn returned {float(out):.6g}, expected {float(expected):.6g} "
        f"for {_shapes_text(w1, x)}"
    )


def _check_gradient(fn: Callable, w1: jax.Array, w2: jax.Array, x: jax.Array) -> None:
    grad = jax.jit(jax.grad(fn, argnums=(0, 1, 2)))
    got = _call("jax.jit(jax.grad(fn))", lambda: grad(w1, w2, x), w1, x)
    expected = _reference_gradient(*_float64(w1, w2, x))
    for name, g, e in zip(("w1", "w2", "x"), got, expected):
        if not _close(g, e):
            raise SolutionError(f"the gradient with respect to {name} is wrong")


def _equation_label(eqn: Any) -> str:
    return str(eqn.params.get("name", eqn.primitive.name))


def _checkpoint_of(eqn: Any) -> tuple[Any, Any, bool] | None:
    """``(body, policy, prevent_cse)`` if the equation is a ``jax.checkpoint``, else None.

    A checkpoint is a ``remat2`` equation, or under the ``jax_remat3`` flag a
    ``call_hi_primitive`` equation whose ``_prim`` is a ``RematTraced``.
    """
    if eqn.primitive.name == "remat2":
        body, policy, prevent_cse = (eqn.params[k] for k in ("jaxpr", "policy", "prevent_cse"))
    elif type(eqn.params.get("_prim")).__name__ == "RematTraced":
        remat = eqn.params["_prim"]
        body, policy, prevent_cse = remat.jaxpr, remat.policy, remat.prevent_cse
    else:
        return None
    if len(getattr(body, "jaxpr", body).invars) != len(eqn.invars):
        return None
    return body, policy, prevent_cse


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
        elif (checkpoint := _checkpoint_of(eqn)) is not None:
            # The same checkpoint, with the jit calls of its body inlined too: what it saves
            # is then named by the primitives that compute it, wherever jit was applied.
            inner, policy, prevent_cse = checkpoint
            body, body_consts = getattr(inner, "jaxpr", inner), getattr(inner, "consts", ())

            def run_body(*values: Any, body: Any = body, body_consts: Any = body_consts) -> Any:
                return _eval_inlined(body, body_consts, values)

            checkpointed = jax.checkpoint(run_body, prevent_cse=prevent_cse, policy=policy)
            with eqn.ctx.manager:
                outs = checkpointed(*ins)
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

    A jitted solution shows its ``jax.checkpoint`` inside a ``jit`` call, and a solution
    that checkpoints a jitted function shows a ``jit`` call inside the checkpoint; inlining
    them, at every depth, shows the same structure and the same saved values as the
    solution without ``jax.jit``. The solution is traced with jit enabled, as it runs,
    so one that checkpoints only with jit disabled fails.
    """
    closed = _call("jax.make_jaxpr(fn)", lambda: jax.make_jaxpr(fn)(w1, w2, x), w1, x)

    def inlined(a: jax.Array, b: jax.Array, c: jax.Array) -> Any:
        return _eval_inlined(closed.jaxpr, closed.consts, [a, b, c])[0]

    return inlined


def _checkpoint_policy(fn: Callable, w1: jax.Array, w2: jax.Array, x: jax.Array) -> Any:
    """The policy of the one ``jax.checkpoint`` that must hold the whole pipeline."""
    eqns = _call("jax.make_jaxpr(fn)", lambda: jax.make_jaxpr(fn)(w1, w2, x), w1, x).jaxpr.eqns
    checkpoints = [e for e in eqns if _checkpoint_of(e) is not None]
    if not checkpoints:
        raise SolutionError(
            "fn does not use jax.checkpoint: wrap the whole pipeline in jax.checkpoint("
            "..., policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)"
        )
    outside = [_equation_label(e) for e in eqns if _checkpoint_of(e) is None]
    if len(checkpoints) > 1 or outside:
        detail = f"{', '.join(outside)} run(s) outside it" if outside else (
            f"it is split into {len(checkpoints)} separate checkpoints")
        raise SolutionError(
            f"jax.checkpoint wraps only part of the pipeline ({detail}): "
            "wrap all of x @ w1, relu, @ w2, square and sum in one jax.checkpoint"
        )
    _, policy, _ = _checkpoint_of(checkpoints[0])
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
    # Only traced, never run: shapes are enough (stacking arrays would compile for each shape).
    batched = [jax.ShapeDtypeStruct((_VMAP_BATCH, *a.shape), a.dtype) for a in (w1, w2, x)]
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


def check_solution(fn: Callable[[jax.Array, jax.Array, jax.Array], jax.Array], *,
                   seed: int | None = None) -> None:
    """Grades a solution of the exercise: ``fn(w1, w2, x)``.

    A correct solution computes ``sum((relu(x @ w1) @ w2) ** 2)`` for ``(d, d)`` weights
    and ``(N, d)`` inputs, with the whole computation inside one ``jax.checkpoint``
    whose policy is ``jax.checkpoint_policies.dots_with_no_batch_dims_saveable``. Each
    call draws new inputs: three different shapes with N and d between 2 and 12 and
    ``N != d`` (at least one with ``N > d`` and one with ``N < d``), filled with random
    normal values. On each, the value and the gradient are compared with a reference,
    and what the backward pass keeps is checked too, because every policy gives the
    same numbers. A wrong value is diagnosed as a common slip (a transposed weight, a
    missing relu...) only when that slip gives the solution's value on all three draws;
    when several slips do, the message names each. The structure is read from ``fn`` as
    ``jax.jit`` traces it (calls to
    ``jax.jit``, outside the checkpoint or inside it, are looked through), never under
    ``jax.disable_jit``: a solution that checkpoints only when jit is disabled fails.

    Args:
        fn: The solution, called as ``fn(w1, w2, x)``.
        seed: ``None`` (the default) draws the shapes and values from a fresh random
            seed on every call. A non-negative int draws the same ones on every call
            with that seed, to repeat a failure.

    Returns:
        None when the solution is correct.

    Raises:
        TypeError: If ``fn`` is not callable or ``seed`` is neither None nor an int.
        ValueError: If ``seed`` is negative.
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

        A message that names shapes names the ones of this call; ``seed`` repeats them:

        >>> def no_sum(w1, w2, x):
        ...     return (jax.nn.relu(x @ w1) @ w2) ** 2
        >>> check_solution(no_sum, seed=0)
        Traceback (most recent call last):
        ...
        remat_guide.grader.SolutionError: fn returned an array of shape (12, 8); expected a scalar ...
        >>> check_solution(no_sum, seed=0)
        Traceback (most recent call last):
        ...
        remat_guide.grader.SolutionError: fn returned an array of shape (12, 8); expected a scalar ...
    """
    validation.callable_arg(fn, "fn")
    if seed is not None:
        seed = validation.integer(seed, "seed", minimum=0)
    else:
        seed = secrets.randbits(64)
    values = np.random.default_rng(seed)
    draws = [_inputs(values, n, d) for n, d in _draw_shapes(random.Random(seed))]
    _check_values(fn, draws)
    for w1, w2, x in draws:
        _check_gradient(fn, w1, w2, x)
        # The structure is read from fn as jit traces it, with its jit calls inlined.
        inlined = _inlined(fn, w1, w2, x)
        policy = _checkpoint_policy(inlined, w1, w2, x)
        _check_saved(inlined, policy, w1, w2, x)

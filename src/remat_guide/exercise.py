"""The exercise's reference solution: a two-matmul pipeline checkpointed with a dots policy."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["checkpoint_dot_policy", "pipeline"]


# The one definition of the pipeline: the solution checkpoints it, and the pages and
# remat_guide.models.exercise_loss run it.
def pipeline(w1: jax.Array, w2: jax.Array, x: jax.Array) -> jax.Array:
    """The exercise's computation, ``sum((relu(x @ w1) @ w2) ** 2)``, without any checkpoint.

    Examples:
        >>> import jax.numpy as jnp
        >>> from remat_guide.exercise import pipeline
        >>> pipeline(jnp.eye(2), jnp.eye(2), jnp.array([[1.0, -2.0]]))
        Array(1., dtype=float32)
    """
    y = x @ w1
    y = jax.nn.relu(y)
    y = y @ w2
    return jnp.sum(y**2)


_checkpointed_pipeline = jax.checkpoint(
    pipeline, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable
)


def _as_float_matrix(value: Any, name: str, expected: str) -> jax.Array:
    if value is None:
        raise TypeError(f"{name} must be an array, got None")
    try:
        array = jnp.asarray(value)
    except TypeError as error:
        raise TypeError(f"{name} must be an array, got {type(value).__name__}") from error
    except ValueError as error:  # a ragged nested list: NumPy cannot give it one shape
        raise ValueError(f"{name} must be an array of shape {expected}; the "
                         f"{type(value).__name__} given is ragged (its rows differ in "
                         "length), so it has no shape") from error
    if array.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape {expected}, got shape {tuple(array.shape)}"
        )
    if not jnp.issubdtype(array.dtype, jnp.floating):
        raise TypeError(f"{name} must have a floating dtype, got {array.dtype}")
    return array


def checkpoint_dot_policy(w1: jax.Array, w2: jax.Array, x: jax.Array) -> jax.Array:
    """Computes ``sum((relu(x @ w1) @ w2) ** 2)``, saving only inputs and matmul outputs when differentiated.

    The whole pipeline runs inside ``jax.checkpoint`` with
    ``policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable``: when
    differentiated, the forward pass keeps the inputs that the backward pass reads and the
    outputs of the two matmuls, and the backward pass recomputes the ``relu`` and the
    square. The inputs
    are checked while tracing, so it works under ``jax.jit``, ``jax.grad`` and
    ``jax.vmap`` and reports bad input before XLA sees it.

    Args:
        w1: The first weight matrix, of shape ``(d, d)``.
        w2: The second weight matrix, of shape ``(d, d)``.
        x: The inputs, of shape ``(N, d)``.

    Returns:
        The scalar ``sum((relu(x @ w1) @ w2) ** 2)``.

    Raises:
        TypeError: If an argument is not an array or does not have a floating dtype.
        ValueError: If an argument is not 2-D, or the shapes are not ``(d, d)``,
            ``(d, d)`` and ``(N, d)``.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide import checkpoint_dot_policy, saved_residuals
        >>> w1 = jnp.array([[1.0, -1.0], [0.5, 2.0]])
        >>> w2 = jnp.array([[2.0, 0.0], [1.0, 1.0]])
        >>> x = jnp.array([[1.0, 2.0], [3.0, -1.0], [0.0, 1.0]])
        >>> checkpoint_dot_policy(w1, w2, x)
        Array(96., dtype=float32)

        The gradient is the one of the same pipeline without ``jax.checkpoint``:

        >>> from remat_guide.exercise import pipeline
        >>> grads = jax.grad(checkpoint_dot_policy, argnums=(0, 1, 2))(w1, w2, x)
        >>> expected = jax.grad(pipeline, argnums=(0, 1, 2))(w1, w2, x)
        >>> all(jnp.allclose(g, e) for g, e in zip(grads, expected))
        True

        What the forward pass keeps when all three inputs are differentiated: the three
        inputs and the two matmul outputs (``jax.grad`` of ``w1`` alone, ``argnums=0``,
        does not keep ``w1``):

        >>> [(r.kind, r.name, r.shape) for r in saved_residuals(checkpoint_dot_policy, w1, w2, x)]
        [('argument', 'w1', (2, 2)), ('argument', 'w2', (2, 2)), ('argument', 'x', (3, 2)),
         ('primitive', 'dot_general', (3, 2)), ('primitive', 'dot_general', (3, 2))]
        >>> [r.name for r in saved_residuals(checkpoint_dot_policy, w1, w2, x, argnums=0)]
        ['w2', 'x', 'dot_general', 'dot_general']

        Shapes that do not fit are reported by name:

        >>> checkpoint_dot_policy(w1, w2, jnp.ones((3, 5)))
        Traceback (most recent call last):
        ...
        ValueError: w1 must have shape (d, d) = (5, 5) to match x of shape (3, 5), got (2, 2)
    """
    w1 = _as_float_matrix(w1, "w1", "(d, d)")
    w2 = _as_float_matrix(w2, "w2", "(d, d)")
    x = _as_float_matrix(x, "x", "(N, d)")
    d = x.shape[1]
    for name, weight in (("w1", w1), ("w2", w2)):
        if weight.shape != (d, d):
            raise ValueError(
                f"{name} must have shape (d, d) = ({d}, {d}) to match x of shape "
                f"{tuple(x.shape)}, got {tuple(weight.shape)}"
            )
    return _checkpointed_pipeline(w1, w2, x)

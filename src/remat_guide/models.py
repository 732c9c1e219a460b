"""Reference models for comparing policies: each is a ``loss_for(policy)`` plus abstract arguments."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

__all__ = [
    "TRANSFORMER_NAMES",
    "exercise_args",
    "exercise_loss",
    "mlp_args",
    "mlp_scan_loss",
    "mlp_unrolled_loss",
    "transformer_args",
    "transformer_loss",
    "transformer_matmul_flops",
]

Loss = Callable[..., jax.Array]

#: The ``checkpoint_name`` tags of :func:`transformer_loss`'s block, in the order the block
#: computes them, named the way production transformer code names them.
TRANSFORMER_NAMES = ("query_proj", "key_proj", "value_proj", "attn_out", "mlp_hidden")


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def _spec(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _pipeline(w1: jax.Array, w2: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.sum((jax.nn.relu(x @ w1) @ w2) ** 2)


def exercise_loss(policy: Any) -> Loss:
    """The exercise's pipeline ``sum((relu(x @ w1) @ w2) ** 2)``, checkpointed as a whole.

    Args:
        policy: A ``jax.checkpoint`` policy, or ``None`` for no ``jax.checkpoint`` at all.

    Returns:
        The loss ``f(w1, w2, x)``.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.models import exercise_loss
        >>> w = jnp.eye(2)
        >>> x = jnp.array([[1.0, -2.0]])
        >>> float(exercise_loss(None)(w, w, x))
        1.0
        >>> float(exercise_loss(jax.checkpoint_policies.dots_saveable)(w, w, x))
        1.0
    """
    if policy is None:
        return _pipeline
    return jax.checkpoint(_pipeline, policy=policy)


def exercise_args(n: int, d: int) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Abstract arguments ``(w1, w2, x)`` of :func:`exercise_loss`: ``(d, d)``, ``(d, d)``, ``(n, d)``.

    Examples:
        >>> from remat_guide.models import exercise_args
        >>> [a.shape for a in exercise_args(8, 4)]
        [(4, 4), (4, 4), (8, 4)]
    """
    n, d = _positive_int(n, "n"), _positive_int(d, "d")
    return _spec(d, d), _spec(d, d), _spec(n, d)


def _mlp_layer(x: jax.Array, w: dict[str, jax.Array]) -> jax.Array:
    return jnp.tanh(jax.nn.relu(x @ w["w_in"]) @ w["w_out"])


def mlp_unrolled_loss(policy: Any) -> Loss:
    """A stack of ``tanh(relu(x @ w_in) @ w_out)`` layers as a Python loop, one checkpoint per layer.

    Args:
        policy: The policy of each layer's ``jax.checkpoint``, or ``None`` for no checkpoint.

    Returns:
        The loss ``f(params, x)`` = ``mean(out ** 2)``; ``params`` holds ``w_in`` and
        ``w_out`` stacked over layers, of shape ``(layers, d, d)``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from remat_guide.models import mlp_unrolled_loss
        >>> params = {"w_in": jnp.ones((3, 2, 2)), "w_out": jnp.zeros((3, 2, 2))}
        >>> float(mlp_unrolled_loss(None)(params, jnp.ones((4, 2))))
        0.0
    """
    layer = _mlp_layer if policy is None else jax.checkpoint(_mlp_layer, policy=policy)

    def loss(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        for i in range(params["w_in"].shape[0]):
            x = layer(x, {k: v[i] for k, v in params.items()})
        return jnp.mean(x**2)

    return loss


def _scanned_loss(layer: Callable[[jax.Array, Any], jax.Array], policy: Any) -> Loss:
    """``mean(out ** 2)`` of ``layer`` applied by ``lax.scan`` over the layers of ``params``."""
    step = layer if policy is None else jax.checkpoint(layer, policy=policy, prevent_cse=False)

    def loss(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        x, _ = lax.scan(lambda carry, layer_params: (step(carry, layer_params), None), x, params)
        return jnp.mean(x**2)

    return loss


def mlp_scan_loss(policy: Any) -> Loss:
    """The same stack as :func:`mlp_unrolled_loss`, as ``lax.scan`` over the layers.

    The checkpoint wraps the scan body with ``prevent_cse=False``, which is safe inside
    ``lax.scan``.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.models import mlp_scan_loss, mlp_unrolled_loss
        >>> params = {"w_in": jnp.full((3, 2, 2), 0.5), "w_out": jnp.full((3, 2, 2), 0.3)}
        >>> x = jnp.ones((4, 2))
        >>> policy = jax.checkpoint_policies.nothing_saveable
        >>> bool(jnp.allclose(mlp_scan_loss(policy)(params, x), mlp_unrolled_loss(None)(params, x)))
        True
    """
    return _scanned_loss(_mlp_layer, policy)


def mlp_args(layers: int, n: int, d: int) -> tuple[dict[str, jax.ShapeDtypeStruct], jax.ShapeDtypeStruct]:
    """Abstract arguments ``(params, x)`` of the MLP stacks.

    Examples:
        >>> from remat_guide.models import mlp_args
        >>> params, x = mlp_args(layers=8, n=16, d=4)
        >>> params["w_in"].shape, x.shape
        ((8, 4, 4), (16, 4))
    """
    layers, n, d = (_positive_int(v, k) for k, v in (("layers", layers), ("n", n), ("d", d)))
    return {"w_in": _spec(layers, d, d), "w_out": _spec(layers, d, d)}, _spec(n, d)


def _rms_norm(x: jax.Array) -> jax.Array:
    return x * lax.rsqrt(jnp.mean(x**2, axis=-1, keepdims=True) + 1e-6)


def _transformer_block(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    h = _rms_norm(x)
    q = checkpoint_name(jnp.einsum("btd,dhk->bthk", h, p["query"]), "query_proj")
    k = checkpoint_name(jnp.einsum("btd,dhk->bthk", h, p["key"]), "key_proj")
    v = checkpoint_name(jnp.einsum("btd,dhk->bthk", h, p["value"]), "value_proj")
    scores = jnp.einsum("bqhk,bthk->bhqt", q, k) / math.sqrt(q.shape[-1])
    causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), dtype=bool))
    scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
    attention = jnp.einsum("bhqt,bthk->bqhk", jax.nn.softmax(scores, axis=-1), v)
    x = x + checkpoint_name(jnp.einsum("bqhk,hkd->bqd", attention, p["out"]), "attn_out")
    hidden = checkpoint_name(_rms_norm(x) @ p["mlp_in"], "mlp_hidden")
    return x + jax.nn.gelu(hidden) @ p["mlp_out"]


def transformer_loss(policy: Any) -> Loss:
    """Pre-norm transformer blocks (causal attention + MLP) as ``lax.scan`` over layers.

    Inside each block the query, key and value projections, the attention output
    projection and the MLP hidden layer are tagged with ``checkpoint_name`` as
    ``TRANSFORMER_NAMES`` lists them, so name-based policies can select them.

    Args:
        policy: The policy of the scan body's ``jax.checkpoint`` (``prevent_cse=False``),
            or ``None`` for no checkpoint.

    Returns:
        The loss ``f(params, x)`` = ``mean(out ** 2)`` for ``x`` of shape ``(batch, seq, d_model)``.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.models import transformer_args, transformer_loss
        >>> specs = transformer_args(layers=2, batch=1, seq=4, d_model=8, heads=2, mlp_dim=16)
        >>> params, x = jax.tree.map(lambda s: jnp.full(s.shape, 0.1, s.dtype), specs)
        >>> policy = jax.checkpoint_policies.save_only_these_names("attn_out")
        >>> a = transformer_loss(None)(params, x)
        >>> b = transformer_loss(policy)(params, x)
        >>> bool(jnp.allclose(a, b))
        True
    """
    return _scanned_loss(_transformer_block, policy)


def transformer_args(
    layers: int, batch: int, seq: int, d_model: int, heads: int, mlp_dim: int
) -> tuple[dict[str, jax.ShapeDtypeStruct], jax.ShapeDtypeStruct]:
    """Abstract arguments ``(params, x)`` of :func:`transformer_loss`.

    Raises:
        ValueError: If a size is not positive, or ``d_model`` is not a multiple of ``heads``.

    Examples:
        >>> from remat_guide.models import transformer_args
        >>> params, x = transformer_args(layers=4, batch=2, seq=16, d_model=32, heads=4, mlp_dim=64)
        >>> params["query"].shape, params["mlp_in"].shape, x.shape
        ((4, 32, 4, 8), (4, 32, 64), (2, 16, 32))
    """
    sizes = dict(layers=layers, batch=batch, seq=seq, d_model=d_model, heads=heads, mlp_dim=mlp_dim)
    for name, value in sizes.items():
        _positive_int(value, name)
    if d_model % heads:
        raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
    head_dim = d_model // heads
    params = {
        "query": _spec(layers, d_model, heads, head_dim),
        "key": _spec(layers, d_model, heads, head_dim),
        "value": _spec(layers, d_model, heads, head_dim),
        "out": _spec(layers, heads, head_dim, d_model),
        "mlp_in": _spec(layers, d_model, mlp_dim),
        "mlp_out": _spec(layers, mlp_dim, d_model),
    }
    return params, _spec(batch, seq, d_model)


def transformer_matmul_flops(
    layers: int, batch: int, seq: int, d_model: int, heads: int, mlp_dim: int
) -> int:
    """The matmul FLOPs of one forward pass of :func:`transformer_loss` (2 per multiply-add).

    The backward pass of each matmul costs twice its forward pass, so ``jax.grad``
    without checkpointing does about three times this, and recomputing the whole
    forward pass about four times.

    Examples:
        >>> from remat_guide.models import transformer_matmul_flops
        >>> transformer_matmul_flops(layers=1, batch=1, seq=2, d_model=4, heads=2, mlp_dim=8)
        576
    """
    tokens = batch * seq
    projections = 4 * 2 * tokens * d_model * d_model  # query, key, value, out
    attention = 2 * 2 * batch * seq * seq * d_model  # scores and the weighted sum of values
    mlp = 2 * 2 * tokens * d_model * mlp_dim
    return layers * (projections + attention + mlp)

"""Reference models for comparing policies: each is a ``loss_for(policy)`` plus abstract arguments."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from remat_guide import _validation as validation
from remat_guide import exercise

__all__ = [
    "MEASURED_POLICIES",
    "TRANSFORMER_NAMES",
    "measured_policy",
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

MEASURED_POLICIES = ("none", "nothing_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
                     "offload_mlp_hidden", "offload_dot_with_no_batch_dims")
"""The policies that GPUs were measured with (``benchmarks/check_on_hardware.py``), by the names it records."""


def measured_policy(name: str) -> Any:
    """The policy of :func:`transformer_loss` that a name of :data:`MEASURED_POLICIES` stands for.

    ``"none"`` is no checkpoint (``None``); ``"offload_mlp_hidden"`` offloads the MLP's
    hidden layer to pinned host memory and recomputes the rest; the others are
    ``jax.checkpoint_policies`` of that name, ``offload_dot_with_no_batch_dims`` from the
    device to pinned host memory.

    Raises:
        ValueError: If ``name`` is not one of them.

    Examples:
        >>> from remat_guide.models import measured_policy
        >>> measured_policy("none") is None, measured_policy("dots_saveable").__name__
        (True, 'dots_saveable')
    """
    policies = jax.checkpoint_policies
    if name not in MEASURED_POLICIES:
        raise ValueError(f"name must be one of {', '.join(MEASURED_POLICIES)}, got {name!r}")
    if name == "none":
        return None
    if name == "offload_mlp_hidden":
        return policies.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=["mlp_hidden"],
            offload_src="device", offload_dst="pinned_host")
    if name == "offload_dot_with_no_batch_dims":
        return policies.offload_dot_with_no_batch_dims("device", "pinned_host")
    return getattr(policies, name)


def _positive_int(value: Any, name: str) -> int:
    return validation.integer(value, name, minimum=1)


def _sizes(**sizes: Any) -> dict[str, int]:
    return {name: _positive_int(value, name) for name, value in sizes.items()}


def _fits(sizes: Mapping[str, int], **shapes: tuple[int, ...]) -> None:
    """Refuses sizes that make an array larger than any machine holds (float32)."""
    for what, shape in shapes.items():
        size = validation.nbytes(shape, np.float32)
        if size > validation.MAX_BYTES:
            given = ", ".join(f"{k}={v}" for k, v in sizes.items())
            raise ValueError(
                f"{given} make {what} of shape {shape} take {size:,} bytes, more than any "
                f"machine holds (at most {validation.MAX_BYTES:,})"
            )


def _policy(policy: Any) -> Any:
    return policy if policy is None else validation.policy(policy, "policy")


def _float_shape(value: Any, name: str) -> tuple[int, ...]:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"{name} must be an array, got {type(value).__name__}")
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{name} must have a floating dtype, got {dtype}")
    return tuple(shape)


def _params(params: Any, keys: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """The shapes of a model's ``params``, which must hold exactly ``keys``."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict with keys {keys}, got {type(params).__name__}")
    if set(params) != set(keys):
        raise ValueError(f"params must have the keys {keys}, got {tuple(params)}")
    return {key: _float_shape(params[key], f"params[{key!r}]") for key in keys}


def _expect(shapes: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]],
            how: str) -> None:
    for name, shape in expected.items():
        if shapes[name] != shape:
            raise ValueError(f"{name} must have shape {shape} ({how}), got {shapes[name]}")


def _spec(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _checked_pipeline(w1: jax.Array, w2: jax.Array, x: jax.Array) -> jax.Array:
    _check_exercise(w1, w2, x)
    return exercise.pipeline(w1, w2, x)


def _check_exercise(w1: Any, w2: Any, x: Any) -> None:
    shapes = {name: _float_shape(v, name) for name, v in (("w1", w1), ("w2", w2), ("x", x))}
    if len(shapes["x"]) != 2:
        raise ValueError(f"x must have shape (n, d), got {shapes['x']}")
    d = shapes["x"][1]
    _expect(shapes, {"w1": (d, d), "w2": (d, d)}, f"(d, d) for x of shape {shapes['x']}")


def exercise_loss(policy: Any) -> Loss:
    """The exercise's pipeline ``sum((relu(x @ w1) @ w2) ** 2)``, checkpointed as a whole.

    Args:
        policy: A ``jax.checkpoint`` policy, or ``None`` for no ``jax.checkpoint`` at all.

    Returns:
        The loss ``f(w1, w2, x)``; it raises a TypeError or ValueError naming the
        argument when the arguments are not floating ``(d, d)``, ``(d, d)``, ``(n, d)``.

    Raises:
        TypeError: If ``policy`` is neither None nor a callable ``policy(prim, *avals, **params)``.

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
    if _policy(policy) is None:
        return _checked_pipeline
    return jax.checkpoint(_checked_pipeline, policy=policy)


def exercise_args(n: int, d: int) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Abstract arguments ``(w1, w2, x)`` of :func:`exercise_loss`: ``(d, d)``, ``(d, d)``, ``(n, d)``.

    Raises:
        TypeError: If a size is not an int.
        ValueError: If a size is not positive, or an array would be larger than any
            machine holds.

    Examples:
        >>> from remat_guide.models import exercise_args
        >>> [a.shape for a in exercise_args(8, 4)]
        [(4, 4), (4, 4), (8, 4)]
    """
    n, d = _positive_int(n, "n"), _positive_int(d, "d")
    _fits({"n": n, "d": d}, w1=(d, d), x=(n, d))
    return _spec(d, d), _spec(d, d), _spec(n, d)


def _mlp_layer(x: jax.Array, w: dict[str, jax.Array]) -> jax.Array:
    return jnp.tanh(jax.nn.relu(x @ w["w_in"]) @ w["w_out"])


def mlp_unrolled_loss(policy: Any) -> Loss:
    """A stack of ``tanh(relu(x @ w_in) @ w_out)`` layers as a Python loop, one checkpoint per layer.

    Args:
        policy: The policy of each layer's ``jax.checkpoint``, or ``None`` for no checkpoint.

    Returns:
        The loss ``f(params, x)`` = ``mean(out ** 2)``; ``params`` holds ``w_in`` and
        ``w_out`` stacked over layers, of shape ``(layers, d, d)``, and ``x`` has shape
        ``(n, d)``. The loss raises a TypeError or ValueError naming the argument for
        other keys, shapes that do not match or non-floating arrays.

    Raises:
        TypeError: If ``policy`` is neither None nor a callable ``policy(prim, *avals, **params)``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from remat_guide.models import mlp_unrolled_loss
        >>> params = {"w_in": jnp.ones((3, 2, 2)), "w_out": jnp.zeros((3, 2, 2))}
        >>> float(mlp_unrolled_loss(None)(params, jnp.ones((4, 2))))
        0.0
    """
    layer = _mlp_layer if _policy(policy) is None else jax.checkpoint(_mlp_layer, policy=policy)

    def loss(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        _check_mlp(params, x)
        for i in range(params["w_in"].shape[0]):
            x = layer(x, {k: v[i] for k, v in params.items()})
        return jnp.mean(x**2)

    return loss


def _check_mlp(params: Any, x: Any) -> None:
    shapes = {f"params[{k!r}]": v for k, v in _params(params, ("w_in", "w_out")).items()}
    shapes["x"] = _float_shape(x, "x")
    w_in = shapes["params['w_in']"]
    if len(w_in) != 3 or w_in[1] != w_in[2]:
        raise ValueError(f"params['w_in'] must have shape (layers, d, d), got {w_in}")
    if len(shapes["x"]) != 2:
        raise ValueError(f"x must have shape (n, d), got {shapes['x']}")
    expected = {"params['w_out']": w_in, "x": (shapes["x"][0], w_in[1])}
    _expect(shapes, expected, f"to match params['w_in'] of shape {w_in}")


def _scanned_loss(layer: Callable[[jax.Array, Any], jax.Array], policy: Any,
                  check: Callable[[Any, Any], None]) -> Loss:
    """``mean(out ** 2)`` of ``layer`` applied by ``lax.scan`` over the layers of ``params``."""
    step = layer if _policy(policy) is None else jax.checkpoint(layer, policy=policy, prevent_cse=False)

    def loss(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        check(params, x)
        x, _ = lax.scan(lambda carry, layer_params: (step(carry, layer_params), None), x, params)
        return jnp.mean(x**2)

    return loss


def mlp_scan_loss(policy: Any) -> Loss:
    """The same stack as :func:`mlp_unrolled_loss`, as ``lax.scan`` over the layers.

    The checkpoint wraps the scan body with ``prevent_cse=False``, which is safe inside
    ``lax.scan``.

    Raises:
        TypeError: If ``policy`` is neither None nor a callable ``policy(prim, *avals, **params)``.

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
    return _scanned_loss(_mlp_layer, policy, _check_mlp)


def mlp_args(layers: int, n: int, d: int) -> tuple[dict[str, jax.ShapeDtypeStruct], jax.ShapeDtypeStruct]:
    """Abstract arguments ``(params, x)`` of the MLP stacks.

    Raises:
        TypeError: If a size is not an int.
        ValueError: If a size is not positive, or an array would be larger than any
            machine holds.

    Examples:
        >>> from remat_guide.models import mlp_args
        >>> params, x = mlp_args(layers=8, n=16, d=4)
        >>> params["w_in"].shape, x.shape
        ((8, 4, 4), (16, 4))
    """
    sizes = _sizes(layers=layers, n=n, d=d)
    layers, n, d = sizes.values()
    _fits(sizes, w_in=(layers, d, d), x=(n, d))
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
        The loss ``f(params, x)`` = ``mean(out ** 2)`` for ``x`` of shape ``(batch, seq, d_model)``
        and ``params`` as :func:`transformer_args` describes them. The loss raises a
        TypeError or ValueError naming the argument for other keys, shapes that do not
        match or non-floating arrays.

    Raises:
        TypeError: If ``policy`` is neither None nor a callable ``policy(prim, *avals, **params)``.

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
    return _scanned_loss(_transformer_block, policy, _check_transformer)


_TRANSFORMER_KEYS = ("query", "key", "value", "out", "mlp_in", "mlp_out")


def _check_transformer(params: Any, x: Any) -> None:
    shapes = {f"params[{k!r}]": v for k, v in _params(params, _TRANSFORMER_KEYS).items()}
    shapes["x"] = _float_shape(x, "x")
    query, mlp_in = shapes["params['query']"], shapes["params['mlp_in']"]
    if len(query) != 4:
        raise ValueError(f"params['query'] must have shape (layers, d_model, heads, head_dim), "
                         f"got {query}")
    if len(mlp_in) != 3:
        raise ValueError(f"params['mlp_in'] must have shape (layers, d_model, mlp_dim), got {mlp_in}")
    if len(shapes["x"]) != 3:
        raise ValueError(f"x must have shape (batch, seq, d_model), got {shapes['x']}")
    layers, d_model, heads, head_dim = query
    expected = {
        "params['key']": query,
        "params['value']": query,
        "params['out']": (layers, heads, head_dim, d_model),
        "params['mlp_in']": (layers, d_model, mlp_in[2]),
        "params['mlp_out']": (layers, mlp_in[2], d_model),
        "x": (*shapes["x"][:2], d_model),
    }
    _expect(shapes, expected, f"to match params['query'] of shape {query}")


def transformer_args(
    layers: int, batch: int, seq: int, d_model: int, heads: int, mlp_dim: int
) -> tuple[dict[str, jax.ShapeDtypeStruct], jax.ShapeDtypeStruct]:
    """Abstract arguments ``(params, x)`` of :func:`transformer_loss`.

    Raises:
        TypeError: If a size is not an int.
        ValueError: If a size is not positive, ``d_model`` is not a multiple of ``heads``,
            or an array (or the attention scores) would be larger than any machine holds.

    Examples:
        >>> from remat_guide.models import transformer_args
        >>> params, x = transformer_args(layers=4, batch=2, seq=16, d_model=32, heads=4, mlp_dim=64)
        >>> params["query"].shape, params["mlp_in"].shape, x.shape
        ((4, 32, 4, 8), (4, 32, 64), (2, 16, 32))
    """
    sizes = _transformer_sizes(layers, batch, seq, d_model, heads, mlp_dim)
    layers, batch, seq, d_model, heads, mlp_dim = sizes.values()
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

    Returns:
        The count, an exact Python int for any sizes.

    Raises:
        TypeError: If a size is not an int.
        ValueError: As for :func:`transformer_args`.

    Examples:
        >>> from remat_guide.models import transformer_matmul_flops
        >>> transformer_matmul_flops(layers=1, batch=1, seq=2, d_model=4, heads=2, mlp_dim=8)
        576
    """
    sizes = _transformer_sizes(layers, batch, seq, d_model, heads, mlp_dim)
    layers, batch, seq, d_model, heads, mlp_dim = sizes.values()
    tokens = batch * seq
    projections = 4 * 2 * tokens * d_model * d_model  # query, key, value, out
    attention = 2 * 2 * batch * seq * seq * d_model  # scores and the weighted sum of values
    mlp = 2 * 2 * tokens * d_model * mlp_dim
    return layers * (projections + attention + mlp)


def _transformer_sizes(layers: Any, batch: Any, seq: Any, d_model: Any, heads: Any,
                       mlp_dim: Any) -> dict[str, int]:
    sizes = _sizes(layers=layers, batch=batch, seq=seq, d_model=d_model, heads=heads,
                   mlp_dim=mlp_dim)
    layers, batch, seq, d_model, heads, mlp_dim = sizes.values()
    if d_model % heads:
        raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
    _fits(sizes, **{"params['query']": (layers, d_model, d_model),
                    "params['mlp_in']": (layers, d_model, mlp_dim),
                    "x": (batch, seq, d_model),
                    "the attention scores": (batch, heads, seq, seq),
                    "the MLP activations": (layers, batch, seq, mlp_dim)})
    return sizes

"""Reference models for comparing policies: a ``loss_for(policy)`` or a training step, and abstract arguments."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from remat_guide import _attention as attention_kernels
from remat_guide import _validation as validation
from remat_guide import exercise

__all__ = [
    "DECODER_NAMES",
    "LLAMA3",
    "MAXTEXT_EXPRESSIONS",
    "MAXTEXT_PRESETS",
    "DecoderConfig",
    "decoder_args",
    "decoder_loss",
    "decoder_optimizer",
    "decoder_step",
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


# --- A decoder in the shape of today's open models (Llama 3), whole training steps -----------------


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """The sizes of a Llama-style decoder (see :func:`decoder_loss`).

    Attributes:
        name: What the configuration is called, for tables.
        layers: Decoder blocks, scanned over.
        d_model: The width of the residual stream.
        heads: Query heads.
        kv_heads: Key and value heads (grouped-query attention: ``heads`` is a multiple).
        mlp_dim: The width of the SwiGLU MLP's hidden layer.
        vocab: Vocabulary entries (token embedding rows and output logits).
        tied_embeddings: Whether the output projection is the token embedding transposed
            (Llama 3.2 1B) rather than a matrix of its own (8B, 70B).
        rope_theta: The base of the rotary embeddings' frequencies.
        source: Where the sizes come from.

    Raises:
        TypeError, ValueError: If a size is not a positive int, or ``d_model`` is not a
            multiple of ``heads``, or ``heads`` of ``kv_heads``.
    """

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    mlp_dim: int
    vocab: int
    tied_embeddings: bool = False
    rope_theta: float = 500_000.0
    source: str = ""

    def __post_init__(self) -> None:
        validation.string(self.name, "name")
        for field in ("layers", "d_model", "heads", "kv_heads", "mlp_dim", "vocab"):
            object.__setattr__(self, field, _positive_int(getattr(self, field), field))
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if (self.d_model // self.heads) % 2:
            raise ValueError(f"d_model // heads ({self.d_model // self.heads}) must be even (rotary embeddings "
                             "turn pairs of features)")

    @property
    def head_dim(self) -> int:
        """The width of one attention head, ``d_model // heads``."""
        return self.d_model // self.heads

    @property
    def parameters(self) -> int:
        """How many parameters the model has (every weight, norms included).

        Examples:
            >>> from remat_guide.models import LLAMA3
            >>> [f"{LLAMA3[size].parameters / 1e9:.2f}B" for size in ("1b", "8b", "70b")]
            ['1.24B', '8.03B', '70.55B']
        """
        return sum(math.prod(shape) for shape, _ in jax.tree.leaves(_decoder_layout(self), is_leaf=_is_entry))

    def smaller(self, **sizes: Any) -> DecoderConfig:
        """The same architecture with some sizes changed, such as a test's few layers.

        Examples:
            >>> from remat_guide.models import LLAMA3
            >>> LLAMA3["8b"].smaller(layers=2, d_model=64, heads=4, kv_heads=2, mlp_dim=128, vocab=256).head_dim
            16
        """
        return dataclasses.replace(self, name=f"{self.name} (smaller)", **sizes)


_LLAMA_SOURCE = ("Meta's Llama 3 paper (arXiv:2407.21783, table 3) and the model's config.json on "
                 "Hugging Face (meta-llama/{repo})")

LLAMA3 = {
    "1b": DecoderConfig("Llama 3.2 1B", layers=16, d_model=2048, heads=32, kv_heads=8, mlp_dim=8192,
                        vocab=128_256, tied_embeddings=True,
                        source="the model's config.json on Hugging Face (meta-llama/Llama-3.2-1B)"),
    "8b": DecoderConfig("Llama 3.1 8B", layers=32, d_model=4096, heads=32, kv_heads=8, mlp_dim=14_336,
                        vocab=128_256, source=_LLAMA_SOURCE.format(repo="Llama-3.1-8B")),
    "70b": DecoderConfig("Llama 3.1 70B", layers=80, d_model=8192, heads=64, kv_heads=8, mlp_dim=28_672,
                         vocab=128_256, source=_LLAMA_SOURCE.format(repo="Llama-3.1-70B")),
}
"""The published sizes of three Llama 3 models. Their rotary embeddings' long-context
frequency scaling (``rope_scaling`` in 3.1 and 3.2) is left out: it changes no shape and no cost."""

DECODER_NAMES = ("query_proj", "key_proj", "value_proj", "context", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo",
                 "logits")
"""The ``checkpoint_name`` tags of :func:`decoder_loss`, named as MaxText names them: the three
attention projections, the attention's output before (``context``) and after (``out_proj``)
its projection, the MLP's gate (``mlpwi_0``), up (``mlpwi_1``) and down (``mlpwo``)
projections, and the output logits."""


_QKV = ("query_proj", "value_proj", "key_proj")
# Each preset as (a function of jax.checkpoint_policies, its keyword or positional arguments).
_PRESETS: dict[str, tuple[str, tuple, dict[str, Any]]] = {
    "full": ("nothing_saveable", (), {}),
    "minimal": ("dots_with_no_batch_dims_saveable", (), {}),
    "save_dot_with_context_except_mlp": ("save_only_these_names", (*_QKV, "context", "out_proj"), {}),
    "save_dot_except_mlpwi": ("save_only_these_names", (*_QKV, "out_proj", "mlpwo"), {}),
    "save_dot_except_mlp": ("save_only_these_names", (*_QKV, "out_proj"), {}),
    "save_qkv_proj": ("save_only_these_names", _QKV, {}),
    "save_out_proj": ("save_only_these_names", ("out_proj",), {}),
    "qkv_proj_offloaded": ("save_and_offload_only_these_names", (),
                           {"names_which_can_be_saved": [], "names_which_can_be_offloaded": list(_QKV),
                            "offload_src": "device", "offload_dst": "pinned_host"}),
    "minimal_offloaded": ("offload_dot_with_no_batch_dims", ("device", "pinned_host"), {}),
}


def _maxtext_presets() -> dict[str, Any]:
    policies = jax.checkpoint_policies
    made = {}
    for name, (function, args, keywords) in _PRESETS.items():
        policy = getattr(policies, function)
        made[name] = policy(*args, **keywords) if args or keywords else policy
    return made


def _expression(function: str, args: tuple, keywords: dict[str, Any]) -> str:
    if not (args or keywords):
        return f"jax.checkpoint_policies.{function}"
    written = [repr(arg) for arg in args] + [f"{key}={value!r}" for key, value in keywords.items()]
    return f"jax.checkpoint_policies.{function}({', '.join(written)})"


MAXTEXT_PRESETS = _maxtext_presets()
"""MaxText's ``remat_policy`` presets as ``jax.checkpoint`` policies on :data:`DECODER_NAMES`.

Mapped as MaxText's ``Decoder.get_remat_policy`` (``MaxText/layers/decoders.py``) maps
them: ``full`` recomputes everything, ``minimal`` keeps the matmuls without batch
dimensions, the ``save_*`` presets keep the named projections, the ``*_offloaded`` ones
move theirs to pinned host memory. Newer MaxText versions define ``minimal`` by names
instead; the policy here is the one that source gives.
"""

MAXTEXT_EXPRESSIONS = {name: _expression(*spec) for name, spec in _PRESETS.items()}
"""Each of :data:`MAXTEXT_PRESETS` as the ``jax.checkpoint_policies`` expression that makes it
(``save_qkv_proj``: ``jax.checkpoint_policies.save_only_these_names('query_proj', 'value_proj',
'key_proj')``)."""


def _is_entry(leaf: Any) -> bool:
    """Whether ``leaf`` is one ``(shape, PartitionSpec)`` entry of :func:`_decoder_layout`."""
    return isinstance(leaf, tuple) and len(leaf) == 2 and isinstance(leaf[1], jax.sharding.PartitionSpec)


def _decoder_layout(config: DecoderConfig) -> dict[str, Any]:
    """Each parameter's shape and its ``PartitionSpec`` over the mesh axes ``fsdp`` and ``tensor``."""
    P = jax.sharding.PartitionSpec
    L, d, h, n, k = config.layers, config.d_model, config.heads, config.kv_heads, config.head_dim
    f, v = config.mlp_dim, config.vocab
    layout: dict[str, Any] = {
        "embed": ((v, d), P("tensor", "fsdp")),
        "layers": {
            "attn_norm": ((L, d), P()),
            "query": ((L, d, h, k), P(None, "fsdp", "tensor", None)),
            "key": ((L, d, n, k), P(None, "fsdp", "tensor", None)),
            "value": ((L, d, n, k), P(None, "fsdp", "tensor", None)),
            "out": ((L, h, k, d), P(None, "tensor", None, "fsdp")),
            "mlp_norm": ((L, d), P()),
            "gate": ((L, d, f), P(None, "fsdp", "tensor")),
            "up": ((L, d, f), P(None, "fsdp", "tensor")),
            "down": ((L, f, d), P(None, "tensor", "fsdp")),
        },
        "final_norm": ((d,), P()),
    }
    if not config.tied_embeddings:
        layout["unembed"] = ((d, v), P("fsdp", "tensor"))
    return layout


def _decoder_rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    normed = x32 * lax.rsqrt(jnp.mean(x32**2, axis=-1, keepdims=True) + 1e-5)
    return normed.astype(x.dtype) * scale.astype(x.dtype)


def _rotary(x: jax.Array, theta: float) -> jax.Array:
    """Rotary position embeddings on ``x`` of shape ``(batch, seq, heads, head_dim)``."""
    half = x.shape[-1] // 2
    frequencies = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = jnp.arange(x.shape[1], dtype=jnp.float32)[:, None] * frequencies
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    first, second = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1).astype(x.dtype)


def _batch_spec(mesh: Any, ndim: int) -> Any:
    """The sharding of an activation: its batch over the mesh's ``data`` and ``fsdp`` axes."""
    axes = tuple(axis for axis in ("data", "fsdp") if axis in mesh.axis_names)
    return jax.sharding.NamedSharding(_auto(mesh), jax.sharding.PartitionSpec(axes or None, *([None] * (ndim - 1))))


def _auto(mesh: Any) -> jax.sharding.AbstractMesh:
    """The mesh's shape and axis names, all axes automatic, with no devices: the same on any target's devices."""
    return jax.sharding.AbstractMesh(tuple(mesh.shape[a] for a in mesh.axis_names), tuple(mesh.axis_names),
                                     axis_types=(jax.sharding.AxisType.Auto,) * len(mesh.axis_names))


def _decoder_block(config: DecoderConfig, attend: Callable, x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    p = jax.tree.map(lambda w: w.astype(jnp.bfloat16), p)  # float32 parameters are master weights
    h = _decoder_rms_norm(x, p["attn_norm"])
    q = checkpoint_name(jnp.einsum("btd,dhk->bthk", h, p["query"]), "query_proj")
    k = checkpoint_name(jnp.einsum("btd,dnk->btnk", h, p["key"]), "key_proj")
    v = checkpoint_name(jnp.einsum("btd,dnk->btnk", h, p["value"]), "value_proj")
    q, k = _rotary(q, config.rope_theta), _rotary(k, config.rope_theta)
    context = checkpoint_name(attend(q, k, v), "context")
    x = x + checkpoint_name(jnp.einsum("bthk,hkd->btd", context, p["out"]), "out_proj")
    h = _decoder_rms_norm(x, p["mlp_norm"])
    gate = checkpoint_name(h @ p["gate"], "mlpwi_0")
    up = checkpoint_name(h @ p["up"], "mlpwi_1")
    return x + checkpoint_name((jax.nn.silu(gate) * up) @ p["down"], "mlpwo")


def _attend(implementation: Any, mesh: Any) -> Callable:
    """The attention of ``implementation``; a kernel's runs on each device's shard of the batch and heads."""
    if not isinstance(implementation, str) or implementation not in attention_kernels.IMPLEMENTATIONS:
        raise ValueError(f"attention must be one of {', '.join(map(repr, attention_kernels.IMPLEMENTATIONS))}, "
                         f"got {implementation!r}")
    attend = attention_kernels.attention(implementation)
    if mesh is None or implementation in ("xla", "blockwise"):
        return attend
    spec = jax.sharding.PartitionSpec(tuple(a for a in ("data", "fsdp") if a in mesh.axis_names) or None, None,
                                      "tensor" if "tensor" in mesh.axis_names else None, None)
    return jax.shard_map(attend, mesh=_auto(mesh), in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)


def _decoder_head(x: jax.Array, scale: jax.Array, unembed: jax.Array, targets: jax.Array) -> jax.Array:
    """The mean cross-entropy of the logits ``norm(x) @ unembed`` (float32) against ``targets``."""
    h = _decoder_rms_norm(x, scale)
    logits = checkpoint_name(jnp.einsum("btd,dv->btv", h, unembed.astype(jnp.bfloat16),
                                        preferred_element_type=jnp.float32), "logits")
    chosen = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - chosen)


def decoder_loss(config: DecoderConfig, policy: Any, mesh: Any = None, attention: str = "xla") -> Loss:
    """A Llama-style decoder's next-token loss, its blocks scanned over the layers.

    Each block: RMSNorm, causal grouped-query attention with rotary embeddings (by default
    XLA's plain ``softmax(q k^T) v``; see ``attention``), RMSNorm, a SwiGLU MLP,
    each with a residual connection; then a final RMSNorm, the output projection to the
    vocabulary (float32 logits) and the mean cross-entropy. Matmuls run in bfloat16;
    float32 parameters are cast to bfloat16 inside each block, as master weights are. The
    values :data:`DECODER_NAMES` lists are tagged with ``checkpoint_name``.

    Args:
        config: The sizes, such as ``LLAMA3["8b"]``.
        policy: The policy of the ``jax.checkpoint`` around each block (the scan's body,
            ``prevent_cse=False``) and around the output head; ``None`` for no checkpoint.
        mesh: The ``jax.sharding.Mesh`` the arguments are sharded over (see
            :func:`decoder_args`), so that every block's activations stay sharded over
            the batch; ``None`` when they are not sharded.
        attention: How the attention is computed. ``"xla"``: XLA's plain softmax, whose
            float32 (seq, seq) scores a policy may keep. ``"fused"``: what training at
            scale runs, picked for the platform the program is lowered for: Pallas's
            splash kernel on TPUs, Pallas's Triton flash kernel on NVIDIA GPUs, and
            elsewhere (the CPU), or when the sequence is not a multiple of 128 tokens,
            ``"blockwise"``. ``"blockwise"``: plain JAX that keeps
            what the kernels keep (q, k, v, the output and each row's log-sum-exp) and
            recomputes the scores block by block, so its memory is a fused kernel's.
            ``"splash"``, ``"triton"``: that kernel only. A kernel runs on each device's
            shard of the batch and heads (``jax.shard_map`` over ``mesh``).

    Returns:
        The loss ``f(params, batch)`` for ``params`` and ``batch`` as
        :func:`decoder_args` describes them.

    Raises:
        TypeError: If ``config`` is not a :class:`DecoderConfig`, ``policy`` is neither
            None nor a policy, or ``mesh`` is not a mesh.
        ValueError: If ``attention`` is none of the above.

    Examples:
        >>> import jax
        >>> from remat_guide.models import LLAMA3, decoder_args, decoder_loss
        >>> config = LLAMA3["8b"].smaller(layers=2, d_model=64, heads=4, kv_heads=2, mlp_dim=128, vocab=256)
        >>> params, _, batch = decoder_args(config, batch=2, seq=16)
        >>> jax.eval_shape(decoder_loss(config, None), params, batch)
        ShapeDtypeStruct(shape=(), dtype=float32)
        >>> args = jax.tree.map(lambda s: jax.numpy.ones(s.shape, s.dtype), decoder_args(config, 2, 128))
        >>> plain, fused = (decoder_loss(config, None, attention=name)(args[0], args[2]) for name in ("xla", "fused"))
        >>> bool(abs(plain - fused) < 1e-2)
        True
    """
    config = _config(config)
    policy = _policy(policy)
    _mesh(mesh)
    block = functools.partial(_decoder_block, config, _attend(attention, mesh))
    head = _decoder_head
    if policy is not None:
        block = jax.checkpoint(block, policy=policy, prevent_cse=False)
        head = jax.checkpoint(head, policy=policy)

    def constrain(x: jax.Array) -> jax.Array:
        return x if mesh is None else lax.with_sharding_constraint(x, _batch_spec(mesh, x.ndim))

    def loss(params: dict[str, Any], batch: dict[str, jax.Array]) -> jax.Array:
        x = constrain(params["embed"].astype(jnp.bfloat16)[batch["inputs"]])
        x, _ = lax.scan(lambda carry, layer: (block(constrain(carry), layer), None), x, params["layers"])
        unembed = params["embed"].T if config.tied_embeddings else params["unembed"]
        return head(x, params["final_norm"], unembed, batch["targets"])

    return loss


def _optax() -> Any:
    try:
        import optax
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError("the decoder's training step uses optax: pip install '.[train]' in a clone of "
                                  "remat-guide (or: pip install optax)") from error
    return optax


def decoder_optimizer(learning_rate: float = 3e-4) -> Any:
    """The optimizer of :func:`decoder_step`: ``optax.adamw`` as Llama 3 was trained (b2 0.95, weight decay 0.1).

    Args:
        learning_rate: A positive number, or an optax schedule (a function of the step).

    Raises:
        TypeError: If ``learning_rate`` is neither a number nor callable.
        ValueError: If it is a number that is not positive.

    Examples:
        >>> from remat_guide.models import decoder_optimizer
        >>> type(decoder_optimizer()).__name__
        'GradientTransformationExtraArgs'
    """
    if not callable(learning_rate):
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)):
            raise TypeError(f"learning_rate must be a number or an optax schedule, got "
                            f"{type(learning_rate).__name__}")
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate}")
    return _optax().adamw(learning_rate, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)


def decoder_step(config: DecoderConfig, policy: Any, mesh: Any = None, optimizer: Any = None,
                 attention: str = "xla") -> Callable:
    """One training step of :func:`decoder_loss`: ``step(params, opt_state, batch) -> (params, opt_state, loss)``.

    The gradient of the loss, the optimizer's update and the new parameters, as a training
    loop runs them (jit it with ``donate_argnums=(0, 1)``; :func:`remat_guide.compare_policies` with
    ``step=True`` does). With float32 parameters (the default of :func:`decoder_args`)
    they are the master weights and AdamW's moments are float32; with bfloat16
    parameters the moments are still float32 (they are made from float32 copies, see
    :func:`decoder_args`) and the update is rounded to bfloat16.

    Args:
        config: As for :func:`decoder_loss`.
        policy: As for :func:`decoder_loss`.
        mesh: As for :func:`decoder_loss`.
        optimizer: An optax ``GradientTransformation``; ``None`` for
            :func:`decoder_optimizer`. :func:`decoder_args` must be given the same one.
        attention: As for :func:`decoder_loss`.

    Returns:
        The step.

    Raises:
        TypeError: As for :func:`decoder_loss`, or if ``optimizer`` has no ``update``.

    Examples:
        >>> import jax
        >>> from remat_guide.models import LLAMA3, decoder_args, decoder_step
        >>> config = LLAMA3["8b"].smaller(layers=2, d_model=64, heads=4, kv_heads=2, mlp_dim=128, vocab=256)
        >>> args = decoder_args(config, batch=2, seq=16)
        >>> step = decoder_step(config, jax.checkpoint_policies.nothing_saveable)
        >>> params, opt_state, loss = jax.eval_shape(step, *args)
        >>> jax.tree.structure(params) == jax.tree.structure(args[0]), loss.shape
        (True, ())
    """
    optax = _optax()
    optimizer = _optimizer(optimizer)
    loss = decoder_loss(config, policy, mesh, attention)

    def step(params: Any, opt_state: Any, batch: dict[str, jax.Array]) -> tuple[Any, Any, jax.Array]:
        value, grads = jax.value_and_grad(loss)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def decoder_args(config: DecoderConfig, batch: int, seq: int, *, mesh: Any = None,
                 param_dtype: Any = jnp.float32, optimizer: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """Abstract ``(params, opt_state, batch)`` of :func:`decoder_step` (``params, batch`` of :func:`decoder_loss`).

    Args:
        config: As for :func:`decoder_loss`.
        batch: Sequences per step, over the whole mesh.
        seq: Tokens per sequence.
        mesh: ``None`` for unsharded arguments, or a ``jax.sharding.Mesh`` with axes
            among ``data``, ``fsdp`` and ``tensor``: the batch is split over ``data``
            and ``fsdp``; every weight matrix over ``fsdp`` along its model width
            (FSDP: ZeRO-3) and over ``tensor`` along its heads, MLP width or vocabulary
            (Megatron-style tensor parallelism); norms are replicated. The optimizer's
            state is sharded as its parameters are.
        param_dtype: ``jnp.float32`` (master weights, the default) or ``jnp.bfloat16``.
        optimizer: As for :func:`decoder_step`.

    Returns:
        ``jax.ShapeDtypeStruct`` pytrees: ``params`` (see the shapes below), the
        optimizer's state made from float32 copies of them (``jax.eval_shape`` of its
        ``init``), and ``batch``, a dict of int32 ``inputs`` and ``targets`` of shape
        ``(batch, seq)``.

    Raises:
        TypeError: If a size is not an int, ``mesh`` is not a mesh, or ``param_dtype``
            is not float32 or bfloat16.
        ValueError: If a size is not positive, ``mesh`` has other axis names, or
            ``batch`` (or a sharded dimension) is not a multiple of its mesh axes.

    Examples:
        >>> from remat_guide.models import LLAMA3, decoder_args
        >>> params, opt_state, batch = decoder_args(LLAMA3["70b"], batch=8, seq=4096)
        >>> params["layers"]["query"].shape, params["layers"]["key"].shape, batch["inputs"].shape
        ((80, 8192, 64, 128), (80, 8192, 8, 128), (8, 4096))
        >>> params["embed"].dtype, opt_state[0].mu["embed"].dtype
        (dtype('float32'), dtype('float32'))
    """
    config = _config(config)
    sizes = _sizes(batch=batch, seq=seq)
    batch, seq = sizes.values()
    _mesh(mesh)
    dtype = jnp.dtype(param_dtype) if param_dtype in (jnp.float32, jnp.bfloat16, "float32", "bfloat16") else None
    if dtype is None:
        raise TypeError(f"param_dtype must be jnp.float32 or jnp.bfloat16, got {param_dtype!r}")
    optimizer = _optimizer(optimizer)
    _fits(sizes, logits=(batch, seq, config.vocab))
    layout = _decoder_layout(config)
    P = jax.sharding.PartitionSpec

    def sharding(spec: Any, shape: tuple[int, ...], what: str) -> Any:
        if mesh is None:
            return None
        kept = tuple(axis if axis in mesh.axis_names else None for axis in spec)
        for size, axis in zip(shape, kept):
            if axis is not None and size % mesh.shape[axis]:
                raise ValueError(f"{what} of shape {shape} cannot be split over the mesh axis {axis!r} of size "
                                 f"{mesh.shape[axis]}: {size} is not a multiple")
        return jax.sharding.NamedSharding(mesh, P(*kept))

    specs = jax.tree_util.tree_map_with_path(
        lambda path, entry: jax.ShapeDtypeStruct(entry[0], dtype, sharding=sharding(
            entry[1], entry[0], f"params{jax.tree_util.keystr(path)}")), layout, is_leaf=_is_entry)
    f32 = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, jnp.float32, sharding=s.sharding), specs)
    state = jax.eval_shape(optimizer.init, f32)
    if mesh is not None:
        optax = _optax()
        replicated = jax.sharding.NamedSharding(mesh, P())
        state = optax.tree_map_params(
            optimizer, lambda leaf, like: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=like.sharding),
            state, specs,
            transform_non_params=lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=replicated))
    data = None if mesh is None else tuple(a for a in ("data", "fsdp") if a in mesh.axis_names)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32,
                                  sharding=sharding(P(data or None), (batch, seq), "batch['inputs']")
                                  if mesh is not None and data else None)
    return specs, state, {"inputs": tokens, "targets": tokens}


def _config(config: Any) -> DecoderConfig:
    if not isinstance(config, DecoderConfig):
        raise TypeError(f"config must be a DecoderConfig (such as LLAMA3['8b']), got {type(config).__name__}")
    return config


def _mesh(mesh: Any) -> None:
    if mesh is None:
        return
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"mesh must be None or a jax.sharding.Mesh, got {type(mesh).__name__}")
    other = [axis for axis in mesh.axis_names if axis not in ("data", "fsdp", "tensor")]
    if other:
        raise ValueError(f"mesh axes must be among 'data', 'fsdp' and 'tensor', got {tuple(mesh.axis_names)}")


def _optimizer(optimizer: Any) -> Any:
    if optimizer is None:
        return decoder_optimizer()
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise TypeError(f"optimizer must be an optax GradientTransformation (init and update), got "
                        f"{type(optimizer).__name__}")
    return optimizer

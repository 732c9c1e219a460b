"""Causal grouped-query attention four ways: XLA's plain softmax, a blockwise stand-in, and the Pallas kernels."""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["IMPLEMENTATIONS", "KERNEL_BLOCK", "attention", "blockwise", "plain", "splash", "triton"]

IMPLEMENTATIONS = ("xla", "fused", "blockwise", "splash", "triton")

KERNEL_BLOCK = 128
"""The kernels work on blocks of this many tokens: ``"fused"`` is ``"blockwise"`` for other sequence lengths."""

# The blockwise stand-in holds at most this many float32 scores at a time (64 MiB).
_SCORES_AT_ONCE = 2**24


def plain(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """``softmax(q k^T / sqrt(d)) v``, causal, as XLA computes it: the (seq, seq) scores in float32.

    ``q`` is ``(batch, seq, heads, head_dim)``; ``k`` and ``v`` are ``(batch, seq, kv_heads,
    head_dim)`` with ``heads`` a multiple of ``kv_heads``. Returns ``q``'s shape and dtype.
    """
    batch, seq, heads, dim = q.shape
    groups = q.reshape(batch, seq, k.shape[2], heads // k.shape[2], dim)
    scores = jnp.einsum("btngk,bsnk->bngts", groups, k, preferred_element_type=jnp.float32)
    causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    scores = jnp.where(causal, scores / math.sqrt(dim), jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return jnp.einsum("bngts,bsnk->btngk", weights, v).reshape(q.shape)


def _chunk(batch: int, seq: int, heads: int) -> int:
    """Queries per block: the largest power of two dividing ``seq`` whose scores fit :data:`_SCORES_AT_ONCE`."""
    size = seq & -seq
    while size > 1 and batch * heads * size * seq > _SCORES_AT_ONCE:
        size //= 2
    return size


def _blocks(x: jax.Array, size: int) -> jax.Array:
    """``(batch, seq, ...)`` as ``(seq // size, batch, size, ...)``: the blocks to scan over."""
    batch, seq = x.shape[:2]
    return jnp.moveaxis(x.reshape(batch, seq // size, size, *x.shape[2:]), 1, 0)


def _unblocks(x: jax.Array) -> jax.Array:
    blocks, batch, size = x.shape[:3]
    return jnp.moveaxis(x, 0, 1).reshape(batch, blocks * size, *x.shape[3:])


def _block_scores(q_block: jax.Array, k: jax.Array, start: jax.Array) -> jax.Array:
    """The scaled, causally masked float32 scores ``(batch, kv_heads, group, size, seq)`` of one query block."""
    batch, size, heads, dim = q_block.shape
    kv_heads, seq = k.shape[2], k.shape[1]
    groups = q_block.reshape(batch, size, kv_heads, heads // kv_heads, dim)
    scores = jnp.einsum("btngk,bsnk->bngts", groups, k, preferred_element_type=jnp.float32) / math.sqrt(dim)
    allowed = (start + jnp.arange(size))[:, None] >= jnp.arange(seq)[None, :]
    return jnp.where(allowed, scores, jnp.finfo(jnp.float32).min)


def _forward(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    batch, seq, heads, dim = q.shape
    size = _chunk(batch, seq, heads)

    def block(_: None, item: tuple[jax.Array, jax.Array]) -> tuple[None, tuple[jax.Array, jax.Array]]:
        index, q_block = item
        scores = _block_scores(q_block, k, index * size)
        lse = jax.nn.logsumexp(scores, axis=-1)
        weights = jnp.exp(scores - lse[..., None]).astype(q.dtype)
        out = jnp.einsum("bngts,bsnk->btngk", weights, v).reshape(q_block.shape)
        return None, (out, lse)

    _, (out, lse) = lax.scan(block, None, (jnp.arange(seq // size), _blocks(q, size)))
    return _unblocks(out), lse


@jax.custom_vjp
def blockwise(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """The same attention as :func:`plain`, computed as a fused kernel computes it, in plain JAX.

    The forward pass works through blocks of queries and keeps, for the backward pass,
    what a flash-attention kernel keeps: ``q``, ``k``, ``v``, the output and each query's
    log-sum-exp. The backward pass recomputes each block's scores from them. No (seq, seq)
    array is ever whole in memory: at most :data:`_SCORES_AT_ONCE` scores at a time.
    It runs on every platform; a fused kernel is faster, the memory is the same.
    """
    return _forward(q, k, v)[0]


def _blockwise_forward(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, tuple]:
    out, lse = _forward(q, k, v)
    return out, (q, k, v, out, lse)


def _blockwise_backward(saved: tuple, d_out: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    q, k, v, out, lse = saved
    batch, seq, heads, dim = q.shape
    kv_heads = k.shape[2]
    size = _chunk(batch, seq, heads)
    shape = (batch, size, kv_heads, heads // kv_heads, dim)

    def block(carry: tuple[jax.Array, jax.Array], item: tuple) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        dk, dv = carry
        index, q_block, out_block, d_block, lse_block = item
        scores = _block_scores(q_block, k, index * size)
        weights = jnp.exp(scores - lse_block[..., None])
        d_grouped = d_block.reshape(shape)
        dv = dv + jnp.einsum("bngts,btngk->bsnk", weights.astype(q.dtype), d_grouped,
                             preferred_element_type=jnp.float32)
        d_weights = jnp.einsum("btngk,bsnk->bngts", d_grouped, v, preferred_element_type=jnp.float32)
        rows = jnp.einsum("btngk,btngk->bngt", d_grouped.astype(jnp.float32),
                          out_block.reshape(shape).astype(jnp.float32))
        d_scores = (weights * (d_weights - rows[..., None]) / math.sqrt(dim)).astype(q.dtype)
        dq = jnp.einsum("bngts,bsnk->btngk", d_scores, k, preferred_element_type=jnp.float32)
        dk = dk + jnp.einsum("bngts,btngk->bsnk", d_scores, q_block.reshape(shape),
                             preferred_element_type=jnp.float32)
        return (dk, dv), dq.reshape(q_block.shape).astype(q.dtype)

    zeros = jnp.zeros(k.shape, jnp.float32)
    items = (jnp.arange(seq // size), _blocks(q, size), _blocks(out, size), _blocks(d_out, size), lse)
    (dk, dv), dq = lax.scan(block, (zeros, zeros), items)
    return _unblocks(dq), dk.astype(k.dtype), dv.astype(v.dtype)


blockwise.defvjp(_blockwise_forward, _blockwise_backward)


def splash(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """The causal attention of Pallas's splash kernel for TPUs (MaxText's default on TPUs).

    Lowers for TPUs only. Same layout and result as :func:`plain`.
    """
    from jax.experimental.pallas.ops.tpu import splash_attention as kernels

    _, seq, heads, dim = q.shape
    mask = kernels.MultiHeadMask([kernels.CausalMask((seq, seq))] * heads)
    block = math.gcd(seq, 512)  # MaxText's default blocks, or the largest that divides a shorter sequence
    sizes = kernels.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                               block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block)
    kernel = kernels.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1)
    heads_first = functools.partial(jnp.swapaxes, axis1=1, axis2=2)
    out = jax.vmap(kernel)(heads_first(q / jnp.asarray(math.sqrt(dim), q.dtype)), heads_first(k), heads_first(v))
    return heads_first(out)


def triton(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """The causal flash attention of Pallas's Triton kernel for NVIDIA GPUs (forward and backward kernels).

    Lowers for NVIDIA GPUs only; compiling it ahead of time needs an abstract mesh of the
    target's devices around the lowering (``jax.sharding.use_abstract_mesh``), which
    :mod:`remat_guide`'s tools set. The kernel takes as many key heads as query heads:
    ``k`` and ``v`` are repeated to ``heads``. Same layout and result as :func:`plain`.
    """
    with warnings.catch_warnings():
        # JAX 0.12 marks the module deprecated in favour of the separate tokamax package.
        warnings.simplefilter("ignore", DeprecationWarning)
        from jax.experimental.pallas.ops.gpu import attention as kernels

    group = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    return kernels.mha(q, k, v, None, sm_scale=1 / math.sqrt(q.shape[-1]), causal=True)


def _fused(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    if q.shape[1] % KERNEL_BLOCK:
        return blockwise(q, k, v)
    return lax.platform_dependent(q, k, v, tpu=splash, cuda=triton, default=blockwise)


_BY_NAME = {"xla": plain, "fused": _fused, "blockwise": blockwise, "splash": splash, "triton": triton}


def attention(implementation: str) -> Any:
    """The attention function of one of :data:`IMPLEMENTATIONS`; ``"fused"`` picks by the platform lowered for."""
    return _BY_NAME[implementation]

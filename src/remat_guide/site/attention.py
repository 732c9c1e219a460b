"""A small flash-attention Pallas kernel with a custom VJP, for the attention kernels page."""

from __future__ import annotations

import functools
import json
import math
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import pallas as pl

__all__ = ["CUDNN_TRACE", "count_primitive", "cudnn_trace", "flash_attention", "loss_for",
           "reference_attention"]

CUDNN_TRACE = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "_hardware"
               / "h200-2026-11-27-cudnn-attention.json")
"""cuDNN's attention traced on an H200 by ``benchmarks/attention_on_gpu.py`` (see the folder's README)."""

_MASKED = -1e30  # finite, so that a row's running maximum never becomes inf - inf


def _forward_kernel(q_ref: Any, k_ref: Any, v_ref: Any, o_ref: Any, lse_ref: Any, *,
                    block: int, scale: float) -> None:
    """One block of queries of one head: its output and its rows' log-sum-exp, causal."""
    row0 = pl.program_id(1) * block
    q = q_ref[...].astype(jnp.float32) * scale
    rows = row0 + jnp.arange(block)

    def step(j: Any, carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        acc, top, total = carry
        k = k_ref[pl.ds(j * block, block), :].astype(jnp.float32)
        v = v_ref[pl.ds(j * block, block), :].astype(jnp.float32)
        s = q @ k.T
        cols = j * block + jnp.arange(block)
        s = jnp.where(rows[:, None] >= cols[None, :], s, _MASKED)
        new_top = jnp.maximum(top, s.max(axis=1))
        p = jnp.exp(s - new_top[:, None])
        shrink = jnp.exp(top - new_top)
        return shrink[:, None] * acc + p @ v, new_top, shrink * total + p.sum(axis=1)

    start = (jnp.zeros((block, q.shape[1]), jnp.float32),
             jnp.full((block,), _MASKED, jnp.float32), jnp.zeros((block,), jnp.float32))
    acc, top, total = jax.lax.fori_loop(0, pl.program_id(1) + 1, step, start)
    o_ref[...] = (acc / total[:, None]).astype(o_ref.dtype)
    lse_ref[...] = top + jnp.log(total)


def _forward(q: Any, k: Any, v: Any, block: int, interpret: bool) -> tuple[Any, Any]:
    batch, seq, heads, dim = q.shape
    if seq % block:
        raise ValueError(f"q: the sequence length {seq} must be a multiple of block={block}")
    tile = pl.BlockSpec((None, block, None, dim), lambda b, i, h: (b, i, h, 0))
    whole = pl.BlockSpec((None, seq, None, dim), lambda b, i, h: (b, 0, h, 0))
    kernel = functools.partial(_forward_kernel, block=block, scale=1 / math.sqrt(dim))
    return pl.pallas_call(
        kernel,
        grid=(batch, seq // block, heads),
        in_specs=[tile, whole, whole],
        out_specs=[tile, pl.BlockSpec((None, None, block), lambda b, i, h: (b, h, i))],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, seq), jnp.float32)],
        interpret=interpret,
        name="flash_forward",
    )(q, k, v)


def _backward(q: Any, k: Any, v: Any, out: Any, lse: Any, g: Any) -> tuple[Any, Any, Any]:
    """FlashAttention-2's backward, untiled: the probabilities rebuilt from the log-sum-exp."""
    scale = 1 / math.sqrt(q.shape[-1])
    f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    q, k, v, out, g = map(f32, (q, k, v, out, g))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
    seq = q.shape[1]
    causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    p = jnp.where(causal, jnp.exp(s - lse[..., None]), 0.0)
    dv = jnp.einsum("bhqk,bqhd->bkhd", p, g)
    dp = jnp.einsum("bqhd,bkhd->bhqk", g, v)
    delta = jnp.einsum("bqhd,bqhd->bhq", g, out)
    ds = p * (dp - delta[..., None]) * scale
    return (jnp.einsum("bhqk,bkhd->bqhd", ds, k), jnp.einsum("bhqk,bqhd->bkhd", ds, q), dv)


@functools.cache
def _attention(block: int, interpret: bool, names: tuple[str, str] | None) -> Callable:
    @jax.custom_vjp
    def attention(q: Any, k: Any, v: Any) -> Any:
        return _forward(q, k, v, block, interpret)[0]

    def forward(q: Any, k: Any, v: Any) -> tuple[Any, tuple]:
        out, lse = _forward(q, k, v, block, interpret)
        if names is not None:
            out, lse = checkpoint_name(out, names[0]), checkpoint_name(lse, names[1])
        return out, (q, k, v, out, lse)

    def backward(residuals: tuple, g: Any) -> tuple[Any, Any, Any]:
        q, k, v, out, lse = residuals
        dq, dk, dv = _backward(q, k, v, out, lse, g)
        return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)

    attention.defvjp(forward, backward)
    return attention


def flash_attention(q: Any, k: Any, v: Any, *, block: int = 128, interpret: bool = True,
                    names: tuple[str, str] | None = None) -> Any:
    """Causal attention by a Pallas kernel that keeps its output and log-sum-exp for the backward pass.

    ``q``, ``k`` and ``v`` are ``[batch, seq, heads, head_dim]`` (the layout of
    ``jax.nn.dot_product_attention``). The forward pass is one ``pallas_call``; its
    custom VJP keeps ``q``, ``k``, ``v``, the output and the rows' log-sum-exp, and
    ``names`` tags the last two with ``checkpoint_name`` inside the forward rule.
    """
    return _attention(block, interpret, names)(q, k, v)


def reference_attention(q: Any, k: Any, v: Any) -> Any:
    """The same causal attention by XLA's dots (``jax.nn.dot_product_attention``)."""
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")


def count_primitive(jaxpr: Any, name: str) -> int:
    """How many equations bind the primitive ``name``, inside nested jaxprs too."""
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == name
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    count += count_primitive(inner, name)
    return count


def loss_for(attention: Callable, policy: Any = None) -> Callable:
    """``sum(attention(q, k, v))`` in float32, with the attention under ``jax.checkpoint(policy)``.

    ``policy=None`` leaves the attention without a checkpoint.
    """
    checked = attention if policy is None else jax.checkpoint(attention, policy=policy)
    return lambda q, k, v: jnp.sum(checked(q, k, v).astype(jnp.float32))


@functools.cache
def cudnn_trace() -> dict[str, Any]:
    """The H200 trace of cuDNN's attention, as JSON."""
    return json.loads(CUDNN_TRACE.read_text(encoding="utf-8"))

"""count_flops: loop bodies are multiplied by their trip counts, nested loops included."""

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from remat_guide import count_flops

OUTER, INNER, N, D = 3, 4, 16, 64


def _nested_scan(w, x):
    def outer(carry, w_outer):
        carry, _ = lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), carry, w_outer)
        return carry, None

    return jnp.sum(lax.scan(outer, x, w)[0])


def _unrolled(ws, x):
    for w in ws:  # separate arrays: no slicing or gradient stacking that scan does not do
        x = jnp.tanh(x @ w)
    return jnp.sum(x)


def _compiled_grad(f, *args):
    return jax.jit(jax.grad(f, argnums=(0, 1))).lower(*args).compile()


def test_nested_scan_counts_every_layer_like_the_unrolled_loop():
    x = jax.ShapeDtypeStruct((N, D), jnp.float32)
    stacked = jax.ShapeDtypeStruct((OUTER, INNER, D, D), jnp.float32)
    separate = [jax.ShapeDtypeStruct((D, D), jnp.float32)] * (OUTER * INNER)
    scanned = count_flops(_compiled_grad(_nested_scan, stacked, x))
    unrolled = count_flops(_compiled_grad(_unrolled, separate, x))

    assert unrolled.loops == () and unrolled.total == unrolled.reported
    assert abs(scanned.total - unrolled.total) <= 0.01 * unrolled.total
    # XLA's own figure counts each loop body once: far below the truth.
    assert scanned.reported < unrolled.total / OUTER
    # A forward and a backward loop at each level, with the trip counts of the scans.
    assert sorted(loop.trip_count for loop in scanned.loops) == sorted([INNER, INNER, OUTER, OUTER])


def test_total_is_within_three_percent_of_the_matmul_count():
    layers = OUTER * INNER
    stacked = jax.ShapeDtypeStruct((layers, D, D), jnp.float32)
    x = jax.ShapeDtypeStruct((N, D), jnp.float32)

    def scanned(w, x):
        return jnp.sum(lax.scan(lambda c, wi: (c @ wi, None), x, w)[0])

    # Forward, and the two matmuls of each layer's backward pass (inputs and weights).
    matmuls = 3 * layers * 2 * N * D * D
    total = count_flops(_compiled_grad(scanned, stacked, x)).total
    assert matmuls <= total <= 1.03 * matmuls


def test_program_without_loops_is_what_xla_reports():
    compiled = jax.jit(lambda a, b: jnp.sin(a @ b)).lower(jnp.ones((8, 4)), jnp.ones((4, 2))).compile()
    count = count_flops(compiled)
    assert count.loops == ()
    assert count.total == count.reported == round(compiled.cost_analysis()["flops"])


def test_loop_without_known_trip_count_is_refused():
    def until_large(x):
        return lax.while_loop(lambda v: jnp.sum(v) < 100.0, lambda v: v @ v, x)

    compiled = jax.jit(until_large).lower(jnp.ones((4, 4))).compile()
    with pytest.raises(ValueError, match="no known trip count"):
        count_flops(compiled)


def test_rejects_anything_but_a_compiled_program():
    lowered = jax.jit(jnp.sin).lower(jnp.ones(3))
    with pytest.raises(TypeError, match=r"compiled must be a jax.stages.Compiled .*, got Lowered"):
        count_flops(lowered)

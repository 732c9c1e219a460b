"""Every dtype JAX differentiates is accepted; keys and integers outside argnums too, as jax.grad accepts them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from remat_guide import Residual, compare_policies, fwd_bwd, saved_residuals

FLOATS = [jnp.bfloat16, jnp.float16, jnp.float32, jnp.float8_e4m3fn, jnp.float8_e5m2]


def dropout_layer(w, key, x):
    return jnp.sum(jnp.tanh(x @ w) * jax.random.bernoulli(key, 0.5, (8, 4)))


def loss_for(policy):
    return dropout_layer if policy is None else jax.checkpoint(dropout_layer, policy=policy)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: jnp.dtype(d).name)
def test_floating_dtypes_are_listed_with_their_own_size(dtype):
    res = saved_residuals(lambda a: jnp.sum(jnp.sin(a)), jnp.ones(3, dtype))
    assert [(r.name, r.dtype) for r in res] == [("cos", jnp.dtype(dtype))]
    assert res.total_bytes == 3 * jnp.dtype(dtype).itemsize
    assert fwd_bwd(lambda a: jnp.sum(jnp.sin(a)), jnp.ones(3, dtype)).saved == ("cos",)


def test_a_bfloat16_model_is_compared_and_its_loss_may_be_bfloat16():
    w, x = jnp.ones((4, 4), jnp.bfloat16), jnp.ones((8, 4), jnp.bfloat16)
    rows = compare_policies(lambda p: (lambda w, x: jnp.sum(jnp.tanh(x @ w)))
                            if p is None else jax.checkpoint(lambda w, x: jnp.sum(jnp.tanh(x @ w)), policy=p),
                            w, x, policies=["nothing_saveable"])
    assert [row.name for row in rows] == ["no checkpoint", "nothing_saveable"]
    assert rows[1].residual_bytes < rows[0].residual_bytes


def test_a_prng_key_outside_argnums_is_an_argument_like_any_other():
    w, x = jnp.ones((4, 4)), jnp.ones((8, 4))
    kept = saved_residuals(jax.checkpoint(dropout_layer), w, jax.random.key(0), x)
    assert [(r.name, r.type_str, r.nbytes) for r in kept] == [
        ("w", "f32[4,4]", 64), ("key", "key<fry>[]", 8), ("x", "f32[8,4]", 128)]
    rows = compare_policies(loss_for, w, jax.random.key(0), x, policies=["nothing_saveable"])
    assert rows[1].residual_bytes == kept.total_bytes


def test_a_prng_key_inside_argnums_is_refused_by_name():
    with pytest.raises(TypeError, match=r"argument args\[1\] must have a floating-point dtype.*key<fry>"):
        compare_policies(loss_for, jnp.ones((4, 4)), jax.random.key(0), jnp.ones((8, 4)), argnums=1)


def test_integer_and_boolean_arguments_are_accepted_beside_a_floating_one():
    def scaled(x, n, flag):
        return jnp.sum(jnp.where(flag, jnp.sin(x) * n, x))

    res = saved_residuals(scaled, jnp.ones(3), 2, True)
    assert jax.grad(scaled)(jnp.ones(3), 2, True).shape == (3,)  # as jax.grad accepts them
    assert "cos" in [r.name for r in res.by_kind("primitive")]


def test_a_residual_may_hold_a_key_dtype():
    key_dtype = jax.random.key(0).dtype
    residual = Residual((), key_dtype, "argument", "key")
    assert residual.nbytes == 8 and residual.type_str == "key<fry>[]"
    assert Residual((2,), np.dtype("float32"), "argument", "x").nbytes == 8

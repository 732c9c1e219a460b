"""checkpoint_dot_policy: its value, gradient, transformations, residuals and input checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from remat_guide import checkpoint_dot_policy, saved_residuals


def _inputs(n=5, d=3, dtype=jnp.float32):
    k1, k2, k3 = jax.random.split(jax.random.key(7), 3)
    return (jax.random.normal(k1, (d, d), dtype), jax.random.normal(k2, (d, d), dtype),
            jax.random.normal(k3, (n, d), dtype))


def _plain(w1, w2, x):
    return jnp.sum((jnp.maximum(x @ w1, 0) @ w2) ** 2)


def test_value_matches_numpy():
    w1, w2, x = _inputs()
    a, b, c = (np.asarray(v, np.float64) for v in (w1, w2, x))
    expected = np.sum((np.maximum(c @ a, 0) @ b) ** 2)
    np.testing.assert_allclose(checkpoint_dot_policy(w1, w2, x), expected, rtol=1e-5)


def test_gradient_under_jit_matches_uncheckpointed():
    args = _inputs()
    got = jax.jit(jax.grad(checkpoint_dot_policy, argnums=(0, 1, 2)))(*args)
    expected = jax.grad(_plain, argnums=(0, 1, 2))(*args)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5)


def test_vmap_over_x_and_over_everything():
    w1, w2, x = _inputs()
    xs = jnp.stack([x, 2 * x])
    np.testing.assert_allclose(
        jax.vmap(checkpoint_dot_policy, in_axes=(None, None, 0))(w1, w2, xs),
        [_plain(w1, w2, x), _plain(w1, w2, 2 * x)], rtol=1e-5)
    batch = [jnp.stack([v, v + 1]) for v in (w1, w2, x)]
    np.testing.assert_allclose(
        jax.vmap(checkpoint_dot_policy)(*batch), jax.vmap(_plain)(*batch), rtol=1e-5)


def test_saves_inputs_and_the_two_matmul_outputs():
    w1, w2, x = _inputs(n=5, d=3)
    res = saved_residuals(checkpoint_dot_policy, w1, w2, x)
    assert [(r.kind, r.name, r.shape) for r in res] == [
        ("argument", "w1", (3, 3)), ("argument", "w2", (3, 3)), ("argument", "x", (5, 3)),
        ("primitive", "dot_general", (5, 3)), ("primitive", "dot_general", (5, 3))]
    assert res.total_bytes == (9 + 9 + 15 + 15 + 15) * 4


def test_accepts_numpy_and_bfloat16():
    w1, w2, x = (np.asarray(v) for v in _inputs())
    assert checkpoint_dot_policy(w1, w2, x).shape == ()
    out = checkpoint_dot_policy(*_inputs(dtype=jnp.bfloat16))
    assert out.dtype == jnp.bfloat16


@pytest.mark.parametrize(
    "args, error, message",
    [
        (("w", "w", "x"), TypeError, "w1 must be an array, got str"),
        ((jnp.ones((3, 3)), jnp.ones((3, 3)), jnp.ones(3)), ValueError,
         r"x must be a 2-D array of shape \(N, d\), got shape \(3,\)"),
        ((jnp.ones((3, 3, 1)), jnp.ones((3, 3)), jnp.ones((5, 3))), ValueError,
         r"w1 must be a 2-D array of shape \(d, d\), got shape \(3, 3, 1\)"),
        ((jnp.ones((3, 4)), jnp.ones((3, 3)), jnp.ones((5, 3))), ValueError,
         r"w1 must have shape \(d, d\) = \(3, 3\) to match x of shape \(5, 3\), got \(3, 4\)"),
        ((jnp.ones((3, 3)), jnp.ones((4, 4)), jnp.ones((5, 3))), ValueError,
         r"w2 must have shape \(d, d\) = \(3, 3\) to match x of shape \(5, 3\), got \(4, 4\)"),
        ((jnp.ones((3, 3), jnp.int32), jnp.ones((3, 3)), jnp.ones((5, 3))), TypeError,
         "w1 must have a floating dtype, got int32"),
        ((jnp.ones((3, 3)), jnp.ones((3, 3)), jnp.ones((5, 3), bool)), TypeError,
         "x must have a floating dtype, got bool"),
    ],
    ids=["not an array", "x 1-D", "w1 3-D", "w1 not square", "w2 wrong d", "int dtype", "bool dtype"],
)
def test_bad_input_is_named(args, error, message):
    with pytest.raises(error, match=message):
        checkpoint_dot_policy(*args)


def test_bad_input_is_reported_at_trace_time_under_jit_and_vmap():
    with pytest.raises(ValueError, match="w2 must have shape"):
        jax.jit(checkpoint_dot_policy)(jnp.ones((3, 3)), jnp.ones((2, 2)), jnp.ones((5, 3)))
    with pytest.raises(ValueError, match=r"x must be a 2-D array .* got shape \(5,\)"):
        jax.vmap(checkpoint_dot_policy, in_axes=(None, None, 0))(
            jnp.ones((3, 3)), jnp.ones((3, 3)), jnp.ones((4, 5)))

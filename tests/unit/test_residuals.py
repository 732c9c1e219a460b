"""saved_residuals: residuals as records, for pytrees, keyword arguments and shape-only inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name

from remat_guide import Residual, Residuals, saved_residuals


def _sin_chain(x):
    return jnp.sum(jnp.sin(jnp.sin(x)))


def test_matches_jax_own_listing():
    from jax._src.ad_checkpoint import saved_residuals as jax_saved_residuals

    x = jnp.ones((4, 2))
    ours = saved_residuals(_sin_chain, x)
    theirs = jax_saved_residuals(_sin_chain, x)
    assert [r.type_str for r in ours] == [a.str_short(short_dtypes=True) for a, _ in theirs]
    assert [r.name for r in ours] == [s.split()[2] for _, s in theirs]


def test_records_have_sizes_and_stable_locations():
    res = saved_residuals(_sin_chain, jnp.ones((4, 2)))
    assert [r.kind for r in res] == ["primitive", "primitive"]
    assert all(r.nbytes == 32 and r.dtype == np.float32 for r in res)
    assert res.total_bytes == 64
    assert all(r.location.startswith("test_residuals.py:") for r in res)
    assert "/" not in str(res.table())


def test_pytree_and_keyword_arguments_are_named_by_path():
    def loss(params, x, *, scale):
        h = jnp.tanh(x @ params["w"][0])
        return scale * jnp.sum(h @ params["w"][1])

    params = {"w": (jnp.ones((3, 4)), jnp.ones((4, 2)))}
    res = saved_residuals(loss, params, jnp.ones((5, 3)), scale=jnp.float32(2.0))
    names = [r.name for r in res if r.kind == "argument"]
    assert names == ["params['w'][0]", "params['w'][1]", "x", "scale"]
    assert any(r.name == "tanh" for r in res)


def test_checkpoint_name_is_reported_as_named():
    def f(x):
        y = checkpoint_name(jnp.sin(x), "a")
        return jnp.sum(jnp.sin(y))

    policy = jax.checkpoint_policies.save_only_these_names("a")
    res = saved_residuals(jax.checkpoint(f, policy=policy), jnp.ones(3))
    assert [(r.kind, r.name) for r in res] == [("argument", "x"), ("named", "'a'")]


def test_function_with_no_residuals():
    res = saved_residuals(lambda x: jnp.sum(x), jnp.ones(8))
    assert len(res) == 0 and res.total_bytes == 0
    assert "0 residuals" in str(res)


def test_literal_residual_is_a_constant():
    res = saved_residuals(lambda x: 3.0 * jnp.sum(x), jnp.ones(8))
    assert [(r.kind, r.name, r.shape) for r in res] == [("constant", "literal", ())]


def test_shape_dtype_structs_are_enough():
    spec = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
    res = saved_residuals(jax.checkpoint(_sin_chain), spec)
    assert res == Residuals([Residual((1024, 1024), np.dtype("float32"), "argument", "x")])


def test_by_kind_and_table():
    res = saved_residuals(jax.checkpoint(_sin_chain), jnp.ones(3))
    assert len(res.by_kind("argument")) == 1 and len(res.by_kind("primitive")) == 0
    with pytest.raises(ValueError, match="kind must be one of"):
        res.by_kind("argumnet")
    assert str(res.table()).splitlines()[1].split() == ["type", "bytes", "kind", "source"]


def test_rejects_non_callable():
    with pytest.raises(TypeError, match="f must be callable, got list"):
        saved_residuals([1, 2], jnp.ones(3))


def test_exercise_solution_keeps_its_inputs_and_two_matmul_outputs():
    from remat_guide import checkpoint_dot_policy

    w1, w2, x = jnp.ones((16, 16)), jnp.ones((16, 16)), jnp.ones((24, 16))
    matmul_out = jax.eval_shape(lambda x, w: x @ w, x, w1)
    matmul_bytes = int(np.prod(matmul_out.shape)) * matmul_out.dtype.itemsize
    res = saved_residuals(checkpoint_dot_policy, w1, w2, x)
    assert res.total_bytes == w1.nbytes + w2.nbytes + x.nbytes + 2 * matmul_bytes
    assert [r.name for r in res.by_kind("primitive")] == ["dot_general", "dot_general"]


def test_a_checkpoint_name_fwd_tag_is_named_under_the_remat3_flag():
    from jax.ad_checkpoint import checkpoint_name_fwd

    def f(w, x):
        m = checkpoint_name_fwd(jnp.sin(x * w), "m")
        return jnp.sum(jnp.sin(m) * w)

    g = jax.checkpoint(f, policy=jax.checkpoint_policies.save_only_these_names("m"))
    previous = jax.config.jax_remat3
    jax.config.update("jax_remat3", True)
    try:
        residuals = saved_residuals(g, jnp.ones(3), jnp.ones(3))
    finally:
        jax.config.update("jax_remat3", previous)
    assert [(r.kind, r.name) for r in residuals] == [("named", "'m'")]

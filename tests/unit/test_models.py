"""The reference models: every variant computes the same loss and gradient."""

import jax
import numpy as np
import pytest

from remat_guide import count_flops
from remat_guide.models import (
    TRANSFORMER_NAMES,
    _transformer_block,
    mlp_args,
    mlp_scan_loss,
    mlp_unrolled_loss,
    transformer_args,
    transformer_loss,
    transformer_matmul_flops,
)

P = jax.checkpoint_policies
CONFIG = dict(layers=2, batch=2, seq=8, d_model=16, heads=2, mlp_dim=32)


def _random(specs, seed=0):
    leaves, tree = jax.tree.flatten(specs)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(tree, [0.3 * jax.random.normal(k, s.shape, s.dtype)
                                     for k, s in zip(keys, leaves)])


def _close(a, b):
    return all(np.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in
               zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("policy", [None, P.nothing_saveable, P.dots_with_no_batch_dims_saveable])
def test_mlp_scan_and_unrolled_agree(policy):
    params, x = _random(mlp_args(layers=3, n=5, d=4))
    reference = jax.jit(jax.value_and_grad(mlp_unrolled_loss(None)))(params, x)
    assert _close(jax.jit(jax.value_and_grad(mlp_unrolled_loss(policy)))(params, x), reference)
    assert _close(jax.jit(jax.value_and_grad(mlp_scan_loss(policy)))(params, x), reference)


@pytest.mark.parametrize("policy", [P.nothing_saveable, P.dots_saveable,
                                    P.save_only_these_names(*TRANSFORMER_NAMES)])
def test_transformer_policies_keep_the_gradient(policy):
    params, x = _random(transformer_args(**CONFIG))
    reference = jax.jit(jax.value_and_grad(transformer_loss(None)))(params, x)
    assert _close(jax.jit(jax.value_and_grad(transformer_loss(policy)))(params, x), reference)


def test_transformer_tags_the_production_names():
    specs = transformer_args(**CONFIG)
    jaxpr = str(jax.make_jaxpr(transformer_loss(P.nothing_saveable))(*specs))
    for name in TRANSFORMER_NAMES:
        assert f"name={name}" in jaxpr


def test_transformer_attention_is_causal():
    params, x = _random(transformer_args(**CONFIG))
    first_layer = jax.tree.map(lambda a: a[0], params)

    def outputs(x):
        return _transformer_block(x, first_layer)

    changed = x.at[:, -1].add(1.0)  # only the last position changes
    assert np.allclose(outputs(x)[:, :-1], outputs(changed)[:, :-1], atol=1e-6)
    assert not np.allclose(outputs(x)[:, -1], outputs(changed)[:, -1])


def test_forward_flops_match_the_analytic_matmul_count():
    config = dict(layers=2, batch=2, seq=32, d_model=128, heads=4, mlp_dim=512)
    compiled = jax.jit(transformer_loss(None)).lower(*transformer_args(**config)).compile()
    matmuls = transformer_matmul_flops(**config)
    assert matmuls <= count_flops(compiled).total <= 1.05 * matmuls


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(CONFIG, heads=3), ValueError, r"d_model \(16\) must be a multiple of heads \(3\)"),
    (dict(CONFIG, layers=0), ValueError, "layers must be at least 1, got 0"),
    (dict(CONFIG, seq=8.0), TypeError, "seq must be an int, got float"),
])
def test_transformer_args_are_validated(kwargs, error, message):
    with pytest.raises(error, match=message):
        transformer_args(**kwargs)

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
MLP_POLICIES = [None, P.nothing_saveable, P.dots_with_no_batch_dims_saveable]
TRANSFORMER_POLICIES = [P.nothing_saveable, P.dots_saveable, P.save_only_these_names(*TRANSFORMER_NAMES)]
# LLVM's optimizations speed up only the machine code, which runs once here, and take a third of each compile.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


def _random(specs, seed=0):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: (0.3 * rng.standard_normal(s.shape)).astype(s.dtype), specs)


def _run_together(functions, *args):
    """Each function's value and gradient at ``args``, from one compiled program."""
    both = [jax.value_and_grad(f) for f in functions]
    return jax.jit(lambda *a: [f(*a) for f in both]).lower(*args).compile(FAST_COMPILE)(*args)


def _close(a, b):
    return all(np.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in
               zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.fixture(scope="module")
def mlp_results():
    """The unrolled MLP's value and gradient without a checkpoint, then each policy's unrolled and scanned ones."""
    losses = [mlp_unrolled_loss(None)] + [make(policy) for policy in MLP_POLICIES
                                          for make in (mlp_unrolled_loss, mlp_scan_loss)]
    reference, *results = _run_together(losses, *_random(mlp_args(layers=3, n=5, d=4)))
    return reference, dict(zip(MLP_POLICIES, zip(results[::2], results[1::2])))


@pytest.mark.parametrize("policy", MLP_POLICIES)
def test_mlp_scan_and_unrolled_agree(policy, mlp_results):
    reference, results = mlp_results
    unrolled, scanned = results[policy]
    assert _close(unrolled, reference)
    assert _close(scanned, reference)


@pytest.fixture(scope="module")
def transformer_results():
    """The transformer's value and gradient without a checkpoint, then each policy's."""
    losses = [transformer_loss(policy) for policy in [None, *TRANSFORMER_POLICIES]]
    reference, *results = _run_together(losses, *_random(transformer_args(**CONFIG)))
    return reference, dict(zip(TRANSFORMER_POLICIES, results))


@pytest.mark.parametrize("policy", TRANSFORMER_POLICIES)
def test_transformer_policies_keep_the_gradient(policy, transformer_results):
    reference, results = transformer_results
    assert _close(results[policy], reference)


def test_transformer_tags_the_production_names():
    specs = transformer_args(**CONFIG)
    jaxpr = str(jax.make_jaxpr(transformer_loss(P.nothing_saveable))(*specs))
    for name in TRANSFORMER_NAMES:
        assert f"name={name}" in jaxpr


def test_transformer_attention_is_causal():
    params, x = _random(transformer_args(**CONFIG))
    first_layer = jax.tree.map(lambda a: a[0], params)
    changed = x.copy()
    changed[:, -1] += 1.0  # only the last position changes
    block = jax.jit(_transformer_block)
    before, after = block(x, first_layer), block(changed, first_layer)
    assert np.allclose(before[:, :-1], after[:, :-1], atol=1e-6)
    assert not np.allclose(before[:, -1], after[:, -1])


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

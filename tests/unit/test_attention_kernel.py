"""The attention page's Pallas kernel: its values, gradients and what it keeps for the backward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from remat_guide import saved_residuals
from remat_guide.site.attention import count_primitive, cudnn_trace, flash_attention, loss_for, reference_attention

SPEC = jax.ShapeDtypeStruct((1, 256, 2, 64), jnp.bfloat16)


def test_the_kernel_matches_xlas_attention_and_its_gradient():
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((2, 128, 2, 32), np.float32) for _ in range(4)]
    kernel = lambda q, k, v: flash_attention(q, k, v, block=32)  # noqa: E731

    def values_and_gradients(q, k, v, g):
        def of(attention):
            return attention(q, k, v), jax.grad(lambda *a: jnp.sum(attention(*a) * g), argnums=(0, 1, 2))(q, k, v)
        return of(kernel), of(reference_attention)

    # One compile for both, LLVM's optimizations off: the interpreted kernel runs once, and the
    # compile took most of the time.
    compiled = jax.jit(values_and_gradients).lower(*args).compile({"xla_backend_optimization_level": 0})
    (out, grads), (reference, expected) = compiled(*args)
    assert jnp.allclose(out, reference, atol=1e-5)
    for got, want in zip(grads, expected, strict=True):
        assert jnp.allclose(got, want, atol=1e-5)


def test_the_kernel_refuses_a_sequence_its_blocks_do_not_divide():
    x = jax.ShapeDtypeStruct((1, 100, 2, 64), jnp.float32)
    with pytest.raises(ValueError, match="multiple of block"):
        jax.eval_shape(flash_attention, x, x, x)


def test_without_a_checkpoint_it_keeps_output_and_log_sum_exp():
    kept = saved_residuals(loss_for(flash_attention), SPEC, SPEC, SPEC)
    assert [r.type_str for r in kept][3:] == ["bf16[1,256,2,64]", "f32[1,2,256]"]


@pytest.mark.parametrize("policy", [jax.checkpoint_policies.dots_saveable,
                                    jax.checkpoint_policies.dots_with_no_batch_dims_saveable])
def test_a_dots_policy_keeps_only_the_arguments_and_reruns_the_kernel(policy):
    loss = loss_for(flash_attention, policy)
    assert [r.name for r in saved_residuals(loss, SPEC, SPEC, SPEC)] == ["q", "k", "v"]
    grad = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(SPEC, SPEC, SPEC).jaxpr
    assert count_primitive(grad, "pallas_call") == 2


def test_names_inside_the_forward_rule_reach_the_policy():
    def named(q, k, v):
        return flash_attention(q, k, v, names=("o", "lse"))

    loss = loss_for(named, jax.checkpoint_policies.save_only_these_names("o", "lse"))
    kept = saved_residuals(loss, SPEC, SPEC, SPEC)
    assert [(r.kind, r.name) for r in kept][3:] == [("named", "'o'"), ("named", "'lse'")]
    grad = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(SPEC, SPEC, SPEC).jaxpr
    assert count_primitive(grad, "pallas_call") == 1


def test_the_stored_h200_trace_lists_every_policy_at_both_shapes():
    trace = cudnn_trace()
    assert trace["device"] == "NVIDIA H200"
    for rows in trace["residuals"].values():
        assert all("error" not in row for row in rows.values())
        assert rows["dots_saveable"]["forward_kernels_in_grad"] == 2

"""The decoder's attention implementations: the same values and gradients, a fused kernel's memory, the kernels."""

import base64
import functools
import pathlib
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from remat_guide import _attention as attention
from remat_guide import _roofline as roofline
from remat_guide import compare_policies, saved_residuals
from remat_guide._cache import compile_unrun
from remat_guide._measure import check_inputs, target_step
from remat_guide.models import LLAMA3, MAXTEXT_PRESETS, decoder_args, decoder_loss, decoder_step
from remat_guide.targets import TARGETS, lowering_for, place, target_devices

SMALL = LLAMA3["8b"].smaller(layers=2, d_model=64, heads=4, kv_heads=2, mlp_dim=128, vocab=256)
# Heads of 128 features and 256 tokens: the shapes the kernels' blocks need.
KERNEL_SIZED = LLAMA3["8b"].smaller(layers=2, d_model=256, heads=2, kv_heads=1, mlp_dim=256, vocab=256)
# The decoder each target's kernel tests lower: for a TPU one such head, which XLA compiles in half KERNEL_SIZED's
# time; for a GPU, whose compile takes as long over either, KERNEL_SIZED, whose two heads the FLOP count checks.
LOWERED = {"tpu-v5e": KERNEL_SIZED.smaller(d_model=128, heads=1, kv_heads=1, mlp_dim=128, vocab=128),
           "h100": KERNEL_SIZED}


def _qkv(batch=2, seq=64, heads=8, kv_heads=2, dim=16):
    keys = jax.random.split(jax.random.key(0), 3)
    shapes = [(batch, seq, heads, dim), (batch, seq, kv_heads, dim), (batch, seq, kv_heads, dim)]
    return [jax.random.normal(key, shape, jnp.float32) for key, shape in zip(keys, shapes)]


def test_the_blockwise_attention_has_the_plain_attentions_values_and_gradients(monkeypatch):
    monkeypatch.setattr(attention, "_SCORES_AT_ONCE", 2 * 8 * 16 * 64)  # four blocks of 16 queries
    assert attention._chunk(2, 64, 8) == 16
    q, k, v = _qkv()

    def value_and_gradients(f, *args):
        return f(*args), jax.grad(lambda *a: jnp.sum(jnp.sin(f(*a))), argnums=(0, 1, 2))(*args)

    with jax.default_matmul_precision("highest"):
        (blockwise, grads), (plain, plain_grads) = (jax.jit(value_and_gradients, static_argnums=0)(f, q, k, v)
                                                    for f in (attention.blockwise, attention.plain))
    np.testing.assert_allclose(blockwise, plain, atol=1e-5)
    for blockwise, plain in zip(grads, plain_grads):
        np.testing.assert_allclose(blockwise, plain, atol=1e-4)


def test_the_blockwise_attention_is_causal():
    q, k, v = _qkv()
    changed = v.at[:, 40:].set(0.0)  # later tokens cannot reach earlier outputs
    np.testing.assert_array_equal(attention.blockwise(q, k, v)[:, :40], attention.blockwise(q, k, changed)[:, :40])


@functools.cache
def _losses_and_gradients():
    """The small decoder's loss and gradient with each attention the CPU runs, on fixed parameters and tokens.

    The parameters are drawn, not constant: with equal weights every logit is equal and the
    loss is the same whatever the attention computes.
    """
    rng = np.random.default_rng(0)
    params, _, batch = jax.tree.map(lambda s: (0.1 * rng.standard_normal(s.shape)).astype(s.dtype),
                                    decoder_args(SMALL, 2, 128))
    batch = {"inputs": jnp.arange(256).reshape(2, 128) % 256, "targets": jnp.arange(256).reshape(2, 128)[::-1] % 256}
    each = {name: jax.value_and_grad(decoder_loss(SMALL, None, attention=name))
            for name in ("xla", "fused", "blockwise")}
    lowered = jax.jit(lambda *args: {name: f(*args) for name, f in each.items()}).lower(params, batch)
    # One program, compiled with LLVM's optimizations off: the same HLO, in a third of three compiles' time.
    return lowered.compile(compiler_options={"xla_backend_optimization_level": 0})(params, batch)


@pytest.mark.parametrize("name", ["fused", "blockwise"])
def test_the_decoders_fused_attention_computes_the_plain_loss_and_gradient_on_the_cpu(name):
    values = _losses_and_gradients()
    np.testing.assert_allclose(values[name][0], values["xla"][0], rtol=1e-5)
    for fused, plain in zip(jax.tree.leaves(values[name][1]), jax.tree.leaves(values["xla"][1])):
        np.testing.assert_allclose(fused, plain, atol=2e-4)


def test_the_kernels_keep_no_seq_by_seq_array_and_the_plain_attention_does():
    params, _, batch = decoder_args(SMALL, 2, 512)  # 512 tokens: no other array is (512, 512)
    for name in ("xla", "blockwise", "splash", "triton"):
        residuals = saved_residuals(decoder_loss(SMALL, None, attention=name), params, batch)
        square = [r for r in residuals if tuple(r.shape[-2:]) == (512, 512)]
        assert bool(square) == (name == "xla"), name


def test_fused_lists_the_residuals_of_every_kernel_it_may_lower_to_and_compiles_to_one():
    params, _, batch = decoder_args(SMALL, 2, 256)
    kept = {name: saved_residuals(decoder_loss(SMALL, None, attention=name), params, batch).total_bytes
            for name in ("fused", "blockwise", "splash", "triton")}
    assert kept["fused"] > max(kept["blockwise"], kept["splash"], kept["triton"])
    memory = {name: _compiled("tpu-v5e", name).memory_analysis().temp_size_in_bytes for name in ("fused", "splash")}
    assert memory["fused"] == memory["splash"]


def test_an_unknown_attention_is_refused_by_name():
    with pytest.raises(ValueError, match="attention must be one of 'xla', 'fused'"):
        decoder_loss(SMALL, None, attention="flash")


@functools.cache
def _lowered(target, attention_name, inside):
    """The step lowered for ``target`` inside ``lowering_for`` or, outside it, with only its device as default."""
    args = place(decoder_args(LOWERED[target], 1, 256), target)
    lower = jax.jit(decoder_step(LOWERED[target], None, attention=attention_name), donate_argnums=(0, 1)).lower
    context = lowering_for(target) if inside else jax.default_device(target_devices(target)[0])
    with context, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Pallas Triton's, outside lowering_for
        return lower(*args)


@functools.cache
def _compiled(target, attention_name):
    """The step compiled for ``target`` as the package compiles what it measures (once for the tests that share it)."""
    return compile_unrun(_lowered(target, attention_name, True), TARGETS[target].platform)


def _with_kernel_bodies(text):
    """The text with each Mosaic kernel's base64 body and locations decoded beside it (Triton's IR is text)."""
    blobs = re.findall(r'\\22(?:body|debug_locations)\\22: \\22([A-Za-z0-9+/=]+)', text)
    return text + "".join(base64.b64decode(blob + "=" * (-len(blob) % 4)).decode("latin-1") for blob in blobs)


@pytest.mark.parametrize("target", ["tpu-v5e", "h100"])
def test_a_kernel_program_lowered_for_a_target_names_no_folder(target):
    # The kernels record the files of their callers: this package's, or JAX's own for splash.
    folders = [str(pathlib.Path(module.__file__).parent) for module in (attention, jax)]
    outside, inside = (_with_kernel_bodies(_lowered(target, "fused", flag).as_text()) for flag in (False, True))
    assert any(folder in outside for folder in folders)
    assert not any(folder in inside for folder in folders)
    assert ".py" in inside


def test_on_a_tpu_the_fused_attention_is_the_splash_kernel():
    assert "tpu_custom_call" in _compiled("tpu-v5e", "fused").as_text()
    assert "tpu_custom_call" not in _compiled("tpu-v5e", "xla").as_text()


def test_on_a_gpu_the_fused_attention_is_pallas_triton_kernel_and_its_flops_are_counted():
    text = _compiled("h100", "fused").as_text()
    names = re.findall(r'name = "(mha_\w+)"', text)
    assert {"mha_forward", "mha_backward"} <= set(names)
    counted = sum(count * flops.get("bf16", 0) for count, flops, *_ in roofline.kernels(text)["kernels"])
    without = sum(count * flops.get("bf16", 0)
                  for count, flops, *_ in roofline.kernels(re.sub(r'name = "mha_', 'name = "other_', text))["kernels"])
    # Two layers, one sequence of 256 tokens, 2 heads of 128: the forward's 2 products and the
    # backward's 7, each 2 * seq * seq * head_dim FLOPs per head, half of them (causal).
    per_product = 2 * 256 * 256 * 128 * 2 // 2
    assert counted - without == 2 * (2 + 7) * per_product


def test_the_fused_attentions_step_needs_less_memory_on_every_target():
    args = decoder_args(KERNEL_SIZED, 4, 1024)
    for target in ("h100", "tpu-v5e"):
        fused = compare_policies(functools.partial(decoder_step, KERNEL_SIZED, attention="fused"), *args, step=True,
                                 target=target, policies={"full": MAXTEXT_PRESETS["full"]})
        # XLA's attention only on the target, as largest_batch measures a step: no FLOPs to count here.
        plain, refused, _ = target_step(functools.partial(decoder_step, KERNEL_SIZED, attention="xla"), None,
                                        check_inputs(args, 0, target_name=target, step=True))
        assert not refused and fused[0].device_bytes < plain, target
        assert fused[1].flops >= fused[0].flops

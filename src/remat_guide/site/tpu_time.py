"""The "Time on TPU chips" page: the step-time estimate on TPU targets, against XLA's count and a MaxText run."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np
import pandas as pd

from remat_guide import models
from remat_guide.site.stored import compile_ahead
from remat_guide.targets import TARGETS, estimate_step, lowering_for, place, target_devices

__all__ = ["MAXTEXT", "POLICIES", "REFERENCE", "MaxTextRun", "maxtext_estimate", "model_flops_per_chip",
           "reference_table"]

REFERENCE = {"layers": 4, "batch": 4, "seq": 128, "d_model": 256, "heads": 4, "mlp_dim": 1024}
"""The reference transformer of the accelerators pages (:func:`remat_guide.models.transformer_loss`)."""

POLICIES = {
    "no checkpoint": None,
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "offload mlp_hidden": jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["mlp_hidden"],
        offload_src="device", offload_dst="pinned_host"),
}
"""The policies of the reference table: one keeps everything, one nothing, one the matmuls, one offloads."""


@functools.cache
def _reference(label: str, name: str) -> Any:
    """The reference transformer's gradient under ``POLICIES[label]``, compiled for ``name`` (from the store)."""
    args = models.transformer_args(**REFERENCE)
    lowered = jax.jit(jax.grad(models.transformer_loss(POLICIES[label]))).lower(*place(args, name))
    return compile_ahead(lowered, name)


def reference_table(name: str = "tpu-v5e") -> pd.DataFrame:
    """Per policy, the estimate's parts and XLA's own figures for the reference transformer on a TPU target.

    Columns: ``policy``; ``est. step``, ``matmul`` and ``memory`` (seconds: the estimate and
    its two resources alone; ``NaN`` for a program that moves bytes to or from host memory,
    which gets no estimate on a TPU); ``XLA optimal_seconds``; ``XLA FLOPs`` (each loop body
    once, elementwise work included); ``matmul FLOPs once`` (the package's count of the
    same program's matmuls, each loop body once); ``matmul FLOPs`` (every iteration).
    """
    lines = []
    for label in POLICIES:
        compiled = _reference(label, name)
        kernels, cost = compiled.kernels, compiled.cost_analysis()
        host = kernels["host_out"] + kernels["host_in"]
        estimate = None if host else estimate_step(kernels, name)
        lines.append({
            "policy": label,
            "est. step": np.nan if estimate is None else estimate.seconds,
            "matmul": np.nan if estimate is None else estimate.compute_seconds,
            "memory": np.nan if estimate is None else estimate.memory_seconds,
            "host bytes": host,
            "XLA optimal_seconds": cost["optimal_seconds"],
            "XLA FLOPs": cost["flops"],
            "matmul FLOPs once": kernels["matmul_flops_once"],
            "matmul FLOPs": compiled.matmul_flops,
            "loops counted once": kernels["loops_counted_once"],
        })
    return pd.DataFrame(lines)


MAXTEXT = {
    "model": models.DecoderConfig("Llama 2 70B", layers=80, d_model=8192, heads=64, kv_heads=8, mlp_dim=28_672,
                                  vocab=32_000, rope_theta=10_000.0,
                                  source="MaxText's llama2-70b model config"),
    "target": "tpu-v5p",
    "chips": 64,
    "sequences_per_chip": 4,
    "seq": 4096,
    "remat_policy": "save_dot_except_mlpwi",
    "published_mfu": 0.65,
    "source": "MaxText's getting_started/Run_Llama2.md (model FLOP utilization for training, v5p-128, bf16); "
              "configuration from MaxText/configs/v5p/llama2_70b.sh",
}
"""A published TPU run to hold the estimate against: MaxText trains Llama 2 70B on a v5p-128
slice (64 chips, FSDP over all of them) with ``remat_policy=save_dot_except_mlpwi``, 4
sequences of 4096 tokens per chip, and reports 65% model FLOP utilization."""


@dataclasses.dataclass(frozen=True)
class MaxTextRun:
    """The package's estimate of :data:`MAXTEXT`'s step, and the utilization it implies.

    Attributes:
        seconds, compute_seconds, memory_seconds: The estimate and its two resources alone.
        collective_seconds: Its collectives between chips, at the ICI's published rate.
        model_flops: What utilization counts, per chip (:func:`model_flops_per_chip`).
        attention_flops: The causal attention's share of ``model_flops``.
        matmul_flops: The compiled program's matmul FLOPs per chip, recomputation included.
        device_bytes: XLA's peak per chip, which fits a v5p's memory.
        mfu: ``model_flops`` over the estimate times the chip's bfloat16 peak.
    """

    seconds: float
    compute_seconds: float
    memory_seconds: float
    model_flops: float
    attention_flops: float
    matmul_flops: float
    device_bytes: int
    mfu: float
    collective_seconds: float = 0.0


def model_flops_per_chip(config: models.DecoderConfig, tokens: int, seq: int) -> tuple[float, float]:
    """A training step's model FLOPs on one chip, as MFU counts them (no recomputation), and their attention part.

    Six per weight per token (forward and backward) for every matmul weight, the output
    projection included and the embedding lookup not; the attention's two products
    (``q k^T``, ``p v``), causal so half of them, three times over (forward, backward).
    """
    per_layer = config.d_model * config.head_dim * (config.heads * 2 + config.kv_heads * 2)
    per_layer += 3 * config.d_model * config.mlp_dim
    weights = config.layers * per_layer + config.d_model * config.vocab
    attention = tokens * 3 * config.layers * 2 * 2 * seq * config.heads * config.head_dim // 2
    return float(tokens * 6 * weights + attention), float(attention)


@functools.cache
def maxtext_estimate() -> MaxTextRun:
    """:data:`MAXTEXT`'s step, the decoder of :func:`remat_guide.models.decoder_step` with its sizes, splash
    attention and MaxText's policy, compiled for 64 TPU v5p chips (from the store) and estimated."""
    config, name, chips = MAXTEXT["model"], MAXTEXT["target"], MAXTEXT["chips"]
    mesh = jax.sharding.Mesh(np.array(target_devices(name, chips)).reshape(chips, 1), ("fsdp", "tensor"))
    args = models.decoder_args(config, MAXTEXT["sequences_per_chip"] * chips, MAXTEXT["seq"], mesh=mesh)
    step = models.decoder_step(config, models.MAXTEXT_PRESETS[MAXTEXT["remat_policy"]], mesh, attention="fused")
    with lowering_for(name):
        lowered = jax.jit(step, donate_argnums=(0, 1)).lower(*args)
    compiled = compile_ahead(lowered, name)
    estimate = estimate_step(compiled.kernels, name)
    flops, attention = model_flops_per_chip(config, MAXTEXT["sequences_per_chip"] * MAXTEXT["seq"], MAXTEXT["seq"])
    peak = TARGETS[name].hardware.matmul_flops["bf16"]
    memory = compiled.memory_analysis()
    return MaxTextRun(estimate.seconds, estimate.compute_seconds, estimate.memory_seconds, flops, attention,
                      float(compiled.matmul_flops), int(memory.peak_memory_in_bytes), flops / (estimate.seconds * peak),
                      estimate.collective_seconds)

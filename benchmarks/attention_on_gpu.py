"""What jax.checkpoint's policies keep around cuDNN's attention kernel, traced on an NVIDIA GPU.

``jax.nn.dot_product_attention(..., implementation="cudnn")`` asks for cuDNN while it
traces, so the attention page cannot list its residuals on a CPU. This script lists them
on a GPU (nothing is allocated: the arguments are ``jax.ShapeDtypeStruct`` values) and
writes one JSON file, which docs/_hardware/ keeps:

    PYTHONPATH=src python benchmarks/attention_on_gpu.py OUT.json
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from remat_guide import saved_residuals
from remat_guide.site.attention import count_primitive

SHAPES = ((1, 256, 2, 64), (1, 4096, 16, 128))
FORWARD = "dot_product_attention_fwd_wrapper"
POLICIES = {
    "no checkpoint": None,
    "everything_saveable": jax.checkpoint_policies.everything_saveable,
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "save_only_these_names('attn_out')": jax.checkpoint_policies.save_only_these_names("attn_out"),
    f"prim.name == '{FORWARD}'": lambda prim, *_, **__: prim.name == FORWARD,
}


def cudnn(q: Any, k: Any, v: Any) -> Any:
    out = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
    return checkpoint_name(out, "attn_out")


def rows(shape: tuple[int, ...]) -> dict[str, Any]:
    spec = jax.ShapeDtypeStruct(shape, jnp.bfloat16)
    found = {}
    for label, policy in POLICIES.items():
        attention = cudnn if policy is None else jax.checkpoint(cudnn, policy=policy)

        def loss(q: Any, k: Any, v: Any, attention: Any = attention) -> Any:
            return jnp.sum(attention(q, k, v).astype(jnp.float32))

        try:
            residuals = saved_residuals(loss, spec, spec, spec)
            grad = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(spec, spec, spec).jaxpr
            found[label] = {
                "residuals": [{"type": r.type_str, "bytes": r.nbytes, "kind": r.kind, "name": r.name}
                              for r in residuals],
                "total_bytes": residuals.total_bytes,
                "forward_kernels_in_grad": count_primitive(grad, FORWARD),
            }
        except Exception as error:  # recorded: what happens is the point
            found[label] = {"error": f"{type(error).__name__}: {error}"[:400]}
    return found


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(path: str) -> None:
    record = {
        "device": jax.devices()[0].device_kind,
        "versions": {name: _version(name) for name in
                     ("jax", "jaxlib", "jax-cuda13-plugin", "nvidia-cudnn-cu13")},
        "residuals": {"x".join(map(str, shape)): rows(shape) for shape in SHAPES},
    }
    with open(path, "w") as file:
        json.dump(record, file, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])

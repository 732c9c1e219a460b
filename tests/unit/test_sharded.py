"""Sharded arguments: compare_policies and recommend_policy report per-device figures.

The checks run in a child process that starts JAX with 8 simulated CPU devices; this
process keeps the single device the other tests expect.
"""

import json
import os
import subprocess
import sys

import pytest

from remat_guide.sharded import is_sharded

CHILD = r"""
import json
import jax
jax.config.update("jax_num_cpu_devices", 8)
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from remat_guide import compare_policies, recommend_policy
from remat_guide.models import mlp_args, mlp_scan_loss
from remat_guide.sharded import is_sharded, residual_shardings

mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
params, x = mlp_args(layers=4, n=512, d=64)
sharded_x = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P("data")))
names = ["dots_saveable", "nothing_saveable"]
one = {r.name: r for r in compare_policies(mlp_scan_loss, params, x, policies=names)}
eight = {r.name: r for r in compare_policies(mlp_scan_loss, params, sharded_x, policies=names)}
budget = eight["dots_saveable"].temp_bytes
best = recommend_policy(mlp_scan_loss, params, sharded_x, budget_bytes=budget, policies=names)
policy = jax.checkpoint_policies.dots_saveable
pieces = residual_shardings(mlp_scan_loss(policy), params, sharded_x, argnums=0)  # as compare_policies
print(json.dumps({
    "devices": jax.device_count(),
    "sharded": [is_sharded(params, x), is_sharded(params, sharded_x)],
    "one": {k: [r.per_device, r.residual_bytes, r.temp_bytes, r.flops] for k, r in one.items()},
    "eight": {k: [r.per_device, r.residual_bytes, r.temp_bytes, r.flops] for k, r in eight.items()},
    "best": [best.name, best.per_device, best.temp_bytes, budget],
    "pieces": [[list(p.residual.shape), p.spec, list(p.device_shape), p.device_nbytes,
                p.residual.nbytes] for p in pieces],
}))
"""


@pytest.fixture(scope="module")
def measured():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_child_has_eight_devices_and_sees_sharding(measured):
    assert measured["devices"] == 8
    assert measured["sharded"] == [False, True]


def test_rows_are_labelled_per_device(measured):
    assert all(row[0] is False for row in measured["one"].values())
    assert all(row[0] is True for row in measured["eight"].values())


def test_per_device_memory_and_flops_are_below_the_whole(measured):
    for name, (_, residual, temp, flops) in measured["eight"].items():
        _, residual_1, temp_1, flops_1 = measured["one"][name]
        assert residual < residual_1 and temp < temp_1, name
        # The batch is split 8 ways; the weights' gradients are summed across devices.
        assert flops_1 / 9 < flops < flops_1 / 6, (name, flops, flops_1)


def test_batch_sharded_residuals_hold_an_eighth_per_device(measured):
    batch = [p for p in measured["pieces"] if p[1].startswith("P(None, 'data'")
             or p[1].startswith("P('data'")]
    assert batch, measured["pieces"]
    for shape, spec, device_shape, device_nbytes, nbytes in batch:
        assert device_nbytes * 8 == nbytes, (shape, spec)
    residual = measured["eight"]["dots_saveable"][1]
    assert residual == sum(p[3] for p in measured["pieces"])


def test_recommend_policy_budgets_per_device(measured):
    name, per_device, temp, budget = measured["best"]
    assert per_device is True and temp <= budget


def test_unsharded_values_are_not_sharded():
    import jax.numpy as jnp

    assert not is_sharded(jnp.ones(3), [jnp.zeros(2)])

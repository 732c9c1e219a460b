"""Compiling for a TPU or an NVIDIA GPU ahead of time (target=): names, devices, placement, figures, choices.

The memory figures of a target row must be those of XLA's own compile of the same gradient
for that target (``jax.jit(jax.grad(loss)).lower(*place(args, name)).compile()``), and the
FLOPs those of the same comparison on this machine. The accelerator compiles are shared by
module-scoped fixtures: one comparison per kind (TPU v5e, H100) on a small scanned model
whose layers tag a value ``"h"``, plus a direct compile or two per kind to check them against.
"""

import importlib.util
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import remat_guide.targets
from helpers import scanned_loss_for
from remat_guide import Comparison, PolicyRow, compare_policies, plan_names, recommend_policy
from remat_guide._cache import target_figures, unrun_options
from remat_guide.compare import STANDARD_POLICIES
from remat_guide.models import mlp_args, transformer_args, transformer_loss
from remat_guide.planner import plan_label, plan_policy
from remat_guide.targets import TARGETS, Target, place, target, target_devices

TPU, GPU = "tpu-v5e", "h100"
# d = 128: XLA's TPU layouts tile the last dimension by 128 lanes, so a narrower hidden value
# would take more (padded) host memory than its nbytes; at 128 the figures compare exactly.
LAYERS, N, D = 4, 16, 128
ARGS = mlp_args(layers=LAYERS, n=N, d=D)
OFFLOAD = "offload h"
SAVE_H = plan_label(["h"])


def hidden(x, w):
    return jnp.tanh(x @ w["w_in"])


def tagged_layer(x, w):
    """A scanned MLP layer that tags its hidden value "h"."""
    return jnp.tanh(checkpoint_name(hidden(x, w), "h") @ w["w_out"])


tagged_loss_for = scanned_loss_for(tagged_layer)


def offload_policy():
    return jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["h"],
        offload_src="device", offload_dst="pinned_host")


POLICIES = {**{name: getattr(jax.checkpoint_policies, name) for name in STANDARD_POLICIES},
            SAVE_H: jax.checkpoint_policies.save_only_these_names("h"),
            OFFLOAD: offload_policy()}


def hidden_bytes():
    """The bytes of every layer's "h", from the shapes: what the offloading policy puts on the host."""
    params, x = ARGS
    one_layer = {key: jax.ShapeDtypeStruct(value.shape[1:], value.dtype) for key, value in params.items()}
    h = jax.eval_shape(hidden, x, one_layer)
    return params["w_in"].shape[0] * int(np.prod(h.shape)) * np.dtype(h.dtype).itemsize


def direct_memory(policy, name):
    """XLA's memory analysis of the gradient with ``policy``, compiled for target ``name`` by hand."""
    loss = tagged_loss_for(policy)
    memory = jax.jit(jax.grad(loss, argnums=0)).lower(*place(ARGS, name)).compile().memory_analysis()
    fit = (memory.peak_memory_in_bytes if TARGETS[name].platform == "tpu" else
           memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
           - memory.alias_size_in_bytes)
    return memory.temp_size_in_bytes, memory.peak_memory_in_bytes, memory.host_temp_size_in_bytes, fit


@pytest.fixture(scope="module")
def cpu_rows():
    return {row.name: row for row in compare_policies(tagged_loss_for, *ARGS, policies=POLICIES)}


@pytest.fixture(scope="module")
def tpu_rows():
    """Every policy compiled for a TPU v5e (7 small TPU compiles), and 2 compiled by hand."""
    rows = {row.name: row for row in compare_policies(tagged_loss_for, *ARGS, policies=POLICIES, target=TPU)}
    direct = {"no checkpoint": direct_memory(None, TPU), OFFLOAD: direct_memory(POLICIES[OFFLOAD], TPU)}
    return rows, direct


@pytest.fixture(scope="module")
def gpu_rows():
    """Three policies compiled for an H100 (3 GPU compiles), and 2 compiled by hand."""
    policies = {SAVE_H: POLICIES[SAVE_H], OFFLOAD: POLICIES[OFFLOAD]}
    rows = {row.name: row for row in compare_policies(tagged_loss_for, *ARGS, policies=policies, target=GPU)}
    direct = {"no checkpoint": direct_memory(None, GPU), OFFLOAD: direct_memory(POLICIES[OFFLOAD], GPU)}
    return rows, direct


# --- names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_name_resolves_to_its_target(name):
    chosen = target(name)
    assert chosen is TARGETS[name] and chosen.name == name
    assert chosen.platform in ("tpu", "cuda")
    assert target(chosen) is chosen


def test_an_unknown_name_is_refused_listing_the_known_ones():
    with pytest.raises(ValueError, match="target") as info:
        target("h1000")
    assert "'h1000'" in str(info.value)
    for name in TARGETS:
        assert name in str(info.value)


@pytest.mark.parametrize("bad", [3, None, b"h100", ["h100"]])
def test_a_name_of_the_wrong_type_is_refused_naming_target(bad):
    with pytest.raises(TypeError, match=r"^target\b"):
        target(bad)


def test_every_gpu_target_has_a_description_in_the_installed_plugin():
    configs = remat_guide.targets._gpu_target_configs()
    gpus = [t for t in TARGETS.values() if t.platform == "cuda"]
    assert gpus
    for gpu in gpus:
        assert gpu.topology in configs, (gpu.name, sorted(configs))


# --- devices -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [TPU, "tpu-v5p", GPU])
@pytest.mark.parametrize("count", [1, 8])
def test_devices_are_of_the_target_kind_distinct_and_the_same_each_call(name, count):
    devices = target_devices(name, count)
    assert len(devices) == count
    assert len({d.id for d in devices}) == count
    assert {d.device_kind for d in devices} == {TARGETS[name].device_kind}
    # device.platform says "gpu" for the CUDA plugin's devices, where Target.platform says "cuda".
    assert {d.platform for d in devices} == {{"tpu": "tpu", "cuda": "gpu"}[TARGETS[name].platform]}
    again = target_devices(name, count)
    assert all(a is b for a, b in zip(again, devices, strict=True))
    assert TARGETS[name].devices(count) == devices


def test_sixteen_gpus_come_as_two_hosts_of_eight():
    devices = target_devices(GPU, 16)
    assert len({d.id for d in devices}) == 16


@pytest.mark.parametrize("name, count, error", [
    (TPU, 0, ValueError),
    (GPU, -1, ValueError),
    (TPU, True, TypeError),
    (GPU, 2.0, TypeError),
    (GPU, "8", TypeError),
    (TPU, 3, ValueError),      # a TPU v5e slice has 1, 4, 8, 16, ... chips
    ("tpu-v5p", 2, ValueError),
    (GPU, 9, ValueError),      # more than one host: a multiple of 8
    (GPU, 12, ValueError),
])
def test_a_bad_count_is_refused_naming_count(name, count, error):
    with pytest.raises(error) as info:
        target_devices(name, count)
    assert type(info.value) is error
    assert str(info.value).startswith("count"), str(info.value)


# --- placement ---------------------------------------------------------------------------


def test_unsharded_arguments_sit_on_one_device_of_the_target():
    params, x = place(ARGS, TPU)
    for leaf, original in ((params["w_in"], ARGS[0]["w_in"]), (x, ARGS[1])):
        assert isinstance(leaf, jax.ShapeDtypeStruct)
        assert (leaf.shape, leaf.dtype) == (original.shape, original.dtype)
        assert list(leaf.sharding.device_set) == target_devices(TPU, 1)
    scalar = place(2.0, GPU)
    assert (scalar.shape, scalar.weak_type) == ((), True)
    assert list(scalar.sharding.device_set) == target_devices(GPU, 1)


def test_sharded_arguments_keep_spec_axes_and_mesh_shape_on_the_target():
    # Arguments sharded over a 2 x 2 mesh of H100s, placed on TPU v5e chips.
    mesh = Mesh(np.array(target_devices(GPU, 4)).reshape(2, 2), ("data", "model"))
    params, x = ARGS
    sharded_x = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P("data")))
    sharded_w = jax.ShapeDtypeStruct(params["w_out"].shape, params["w_out"].dtype,
                                     sharding=NamedSharding(mesh, P(None, None, "model")))
    placed_params, placed_x = place(({"w_in": params["w_in"], "w_out": sharded_w}, sharded_x), TPU)
    for leaf, spec in ((placed_x, P("data")), (placed_params["w_out"], P(None, None, "model"))):
        assert leaf.sharding.spec == spec
        assert leaf.sharding.mesh.axis_names == ("data", "model")
        assert leaf.sharding.mesh.devices.shape == (2, 2)
        assert {d.device_kind for d in leaf.sharding.device_set} == {TARGETS[TPU].device_kind}
        assert set(leaf.sharding.device_set) == set(target_devices(TPU, 4))
    # The unsharded weight is replicated over the same chips, as jax.jit treats it, so that one
    # program can take all three (it used to sit on one chip: "incompatible devices").
    assert placed_params["w_in"].sharding.spec == P()
    assert placed_params["w_in"].sharding.device_set == placed_x.sharding.device_set
    jax.jit(tagged_loss_for(None)).lower(placed_params, placed_x)  # lowers: no compile


SHARDED_CHILD = r"""
import json
import os
import jax
jax.config.update("jax_num_cpu_devices", 4)
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from remat_guide import compare_policies
from remat_guide.models import mlp_args, mlp_scan_loss
from remat_guide.targets import place

mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
params, x = mlp_args(layers=2, n=64, d=128)
x = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P("data")))
policy = jax.checkpoint_policies.nothing_saveable
rows = compare_policies(mlp_scan_loss, params, x, target="tpu-v5e", policies={"nothing": policy})
placed = place((params, x), "tpu-v5e")
direct = [jax.jit(jax.grad(mlp_scan_loss(p))).lower(*placed).compile().memory_analysis() for p in (None, policy)]
print(json.dumps({
    "rows": [[r.per_device, r.target, r.temp_bytes, r.peak_bytes, r.host_bytes] for r in rows],
    "direct": [[m.temp_size_in_bytes, m.peak_memory_in_bytes, m.host_temp_size_in_bytes] for m in direct],
    "placed": [str(placed[1].sharding.spec), list(placed[1].sharding.mesh.axis_names),
               list(placed[1].sharding.mesh.devices.shape),
               sorted({d.device_kind for d in placed[1].sharding.device_set}),
               len(placed[0]["w_in"].sharding.device_set)],
}), flush=True)
os._exit(0)  # without the interpreter's teardown of what XLA compiled: most of a second
"""


def test_sharded_arguments_on_a_cpu_mesh_give_per_device_rows_of_the_target():
    # A child process with 4 CPU devices, as tests/unit/test_sharded.py does.
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", SHARDED_CHILD], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert [row[:2] for row in out["rows"]] == [[True, TPU], [True, TPU]]
    assert [row[2:] for row in out["rows"]] == out["direct"]
    assert out["placed"] == [str(P("data")), ["data", "model"], [2, 2], [TARGETS[TPU].device_kind], 4]


# --- figures -----------------------------------------------------------------------------


@pytest.mark.parametrize("rows_fixture, name", [("tpu_rows", TPU), ("gpu_rows", GPU)])
def test_target_rows_are_xlas_own_figures_for_that_target(rows_fixture, name, request):
    rows, direct = request.getfixturevalue(rows_fixture)
    for label, figures in direct.items():
        row = rows[label]
        assert (row.temp_bytes, row.peak_bytes, row.host_bytes, row.device_bytes) == figures, label
    for row in rows.values():
        assert row.target == name
        if TARGETS[name].platform == "tpu":
            assert row.device_bytes == row.peak_bytes
            # Estimated, except where the program offloads: a TPU's host link has no published rate.
            assert (row.step_seconds is None) == (row.host_bytes > 0), row.name
            assert row.step_seconds is None or row.step_seconds > 0
        else:  # what an H200's allocator held: arguments, outputs and temporary buffers
            assert row.device_bytes == row.argument_bytes + row.output_bytes + row.temp_bytes - row.alias_bytes
            assert row.step_seconds > 0
        assert row.per_device is False
    # A target's peak counts the arguments and outputs: at least the parameters and their gradient.
    assert min(row.peak_bytes for row in rows.values()) >= 2 * sum(
        a.size * a.dtype.itemsize for a in jax.tree.leaves(ARGS[0]))


@pytest.mark.parametrize("policy", [None, "offload"])
def test_compiling_for_a_gpu_without_autotuning_plans_the_same_memory(policy):
    """Autotuning off on a GPU target: the same device and host bytes as XLA's default compile ahead of time.

    Both compiles come from the figure store (`make verify-figures` compiles its entries
    again), as XLA's GPU compiler made them for this program.
    """
    args = place(transformer_args(layers=2, batch=2, seq=16, d_model=32, heads=2, mlp_dim=64), GPU)
    loss = transformer_loss(policy and plan_policy(["attn_out"], ["mlp_hidden"]))
    lowered = jax.jit(jax.grad(loss)).lower(*args)
    sizes = ("temp_size_in_bytes", "peak_memory_in_bytes", "host_temp_size_in_bytes", "argument_size_in_bytes",
             "output_size_in_bytes")
    unrun, default = (target_figures(lowered, GPU, "cuda", options)["memory"]
                      for options in (unrun_options("cuda"), {}))
    assert unrun_options("cuda") == {"xla_gpu_autotune_level": 0}
    assert [unrun[size] for size in sizes] == [default[size] for size in sizes]
    assert (unrun["host_temp_size_in_bytes"] > 0) == (policy == "offload")


@pytest.mark.parametrize("rows_fixture", ["tpu_rows", "gpu_rows"])
def test_target_rows_have_the_flops_and_residuals_of_this_machine(rows_fixture, cpu_rows, request):
    rows, _ = request.getfixturevalue(rows_fixture)
    for label, row in rows.items():
        local = cpu_rows[label]
        assert (row.flops, row.reported_flops, row.flops_ratio, row.residual_bytes) == (
            local.flops, local.reported_flops, local.flops_ratio, local.residual_bytes), label


def test_cpu_rows_have_no_target_and_fit_by_temp_bytes(cpu_rows):
    for row in cpu_rows.values():
        assert row.target is None
        assert row.device_bytes == row.temp_bytes
        assert row.host_bytes == 0


@pytest.mark.parametrize("rows_fixture", ["tpu_rows", "gpu_rows"])
def test_the_offloaded_values_are_the_host_bytes(rows_fixture, request):
    rows, _ = request.getfixturevalue(rows_fixture)
    assert rows[OFFLOAD].host_bytes == hidden_bytes() == LAYERS * N * D * 4
    for label, row in rows.items():
        if label != OFFLOAD:
            assert row.host_bytes == 0, label
    # What goes to the host leaves the device: the same saved set kept on the device peaks higher.
    assert rows[OFFLOAD].peak_bytes < rows[SAVE_H].peak_bytes


# --- choosing with a target --------------------------------------------------------------


def test_recommend_policy_on_a_target_fits_by_the_peak():
    # Two TPU compiles: the baseline and nothing_saveable.
    rows = compare_policies(tagged_loss_for, *ARGS, policies=["nothing_saveable"], target=TPU)
    base, nothing = rows
    assert nothing.peak_bytes < base.peak_bytes and nothing.flops > base.flops
    budget = (nothing.peak_bytes + base.peak_bytes) // 2
    chosen = recommend_policy(tagged_loss_for, *ARGS, budget_bytes=budget, policies=["nothing_saveable"],
                              target=TPU)
    assert (chosen.name, chosen.target, chosen.peak_bytes) == ("nothing_saveable", TPU, nothing.peak_bytes)
    assert recommend_policy(rows=rows, budget_bytes=base.peak_bytes).name == "no checkpoint"
    with pytest.raises(ValueError, match=f"XLA peak on {TPU} is {nothing.peak_bytes} bytes"):
        recommend_policy(rows=rows, budget_bytes=nothing.peak_bytes - 1)


def test_recommend_policy_from_target_rows_picks_the_fewest_flops_that_fit(tpu_rows):
    rows, _ = tpu_rows
    peaks = sorted({row.peak_bytes for row in rows.values()})
    assert len(peaks) >= 3
    for budget in [*peaks, *((a + b) // 2 for a, b in zip(peaks, peaks[1:]))]:
        chosen = recommend_policy(rows=list(rows.values()), budget_bytes=budget)
        fitting = [row for row in rows.values() if row.peak_bytes <= budget]
        assert chosen.peak_bytes <= budget
        assert chosen.flops == min(row.flops for row in fitting)


def test_plan_names_on_a_target_reuses_its_rows_and_fits_by_the_peak(tpu_rows):
    rows, _ = tpu_rows
    # The offloading row is the plan that offloads "h", under its plan label.
    measured = {plan_label([], ["h"]) if label == OFFLOAD else label: row for label, row in rows.items()}
    candidates = list(rows.values())
    peaks = sorted({row.peak_bytes for row in candidates})
    for budget in peaks:
        chosen = plan_names(tagged_loss_for, *ARGS, budget_bytes=budget, names=["h"], measured=dict(measured),
                            target=TPU)
        assert chosen.compiled == 0  # every plan was measured already
        assert chosen.target == TPU and chosen.peak_bytes <= budget
        fitting = [row for row in candidates if row.peak_bytes <= budget]
        assert chosen.flops <= min(row.flops for row in fitting) * (1 + 5e-3)
        assert set(chosen.choices.values()) <= {"keep", "offload", "recompute"}
        # Without offloading, the same call chooses among keep and recompute.
        kept = plan_names(tagged_loss_for, *ARGS, budget_bytes=budget, names=["h"], measured=dict(measured),
                          target=TPU, offload=False)
        assert kept.host_bytes == 0 and "offload" not in kept.choices.values()


def test_recommend_policy_refuses_a_target_with_rows(tpu_rows):
    rows, _ = tpu_rows
    with pytest.raises(ValueError, match=r"rows are measured already: target would not be used"):
        recommend_policy(rows=list(rows.values()), budget_bytes=10**9, target=GPU)


def test_plan_names_refuses_measured_rows_of_another_target(cpu_rows):
    budget = max(row.temp_bytes for row in cpu_rows.values())

    def measured():
        return {label: row for label, row in cpu_rows.items() if label != OFFLOAD}

    reused = measured()
    chosen = plan_names(tagged_loss_for, *ARGS, budget_bytes=budget, names=["h"], measured=reused)
    assert chosen.compiled == 0 and chosen.target is None
    with pytest.raises(ValueError, match="another .*target"):
        plan_names(tagged_loss_for, *ARGS, budget_bytes=budget, names=["h"], measured=reused, target=TPU)
    # Rows of this machine given to a first call for a target are refused too, not compared
    # by temp_bytes with a target's peaks, and the dict is left as it was.
    fresh = measured()
    with pytest.raises(ValueError, match="compiled for this machine, not for tpu-v5e"):
        plan_names(tagged_loss_for, *ARGS, budget_bytes=budget, names=["h"], measured=fresh, target=TPU)
    assert fresh == measured()


# --- a missing compiler ------------------------------------------------------------------


@pytest.fixture
def no_compilers(monkeypatch):
    """As if neither libtpu nor the CUDA plugin were installed.

    The device caches are bypassed (their uncached functions stand in), not cleared, so the
    devices of the other tests stay the same objects; monkeypatch restores everything.
    """
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "libtpu" or name.startswith("jax_plugins.xla_cuda"):
            return None
        return real(name, *args, **kwargs)

    before = target_devices(TPU, 1), target_devices(GPU, 1)
    monkeypatch.setattr(remat_guide.targets.importlib.util, "find_spec", find_spec)
    for cached in ("_devices", "_gpu_target_configs"):
        monkeypatch.setattr(remat_guide.targets, cached, getattr(remat_guide.targets, cached).__wrapped__)
    yield
    monkeypatch.undo()
    assert (target_devices(TPU, 1), target_devices(GPU, 1)) == before


@pytest.mark.parametrize("name, extra", [(TPU, "tpu"), (GPU, "gpu")])
def test_a_missing_compiler_is_an_import_error_naming_the_pip_install(no_compilers, name, extra):
    with pytest.raises(ImportError, match=rf"pip install '\.\[{extra}\]' in a clone of remat-guide"):
        target_devices(name)
    with pytest.raises(ImportError, match="pip install"):
        place(ARGS, name)
    with pytest.raises(ImportError, match="pip install"):
        compare_policies(tagged_loss_for, *ARGS, policies=["nothing_saveable"], target=name)


# --- rows and their tables ---------------------------------------------------------------


def row(**changes):
    fields = dict(name="p", policy=None, residual_bytes=1, temp_bytes=2, flops=3, reported_flops=3,
                  flops_ratio=1.0)
    fields.update(changes)
    return PolicyRow(**fields)


def test_a_row_names_its_target_by_name_and_fits_by_its_backends_figure():
    assert row(target=TARGETS[GPU]).target == GPU
    # A GPU: arguments + outputs + temp - aliased; a TPU: XLA's peak; the CPU: temp.
    gpu = row(target=GPU, peak_bytes=7, argument_bytes=10, output_bytes=5, alias_bytes=4)
    assert gpu.device_bytes == 10 + 5 + 2 - 4
    assert row(target=TPU, peak_bytes=7, argument_bytes=10).device_bytes == 7
    assert row(peak_bytes=7, argument_bytes=10).device_bytes == 2


@pytest.mark.parametrize("changes, error", [
    (dict(target="h1000"), ValueError),
    (dict(target=100), TypeError),
    (dict(peak_bytes=-1), ValueError),
    (dict(host_bytes=-1), ValueError),
    (dict(host_bytes=0.5), TypeError),
    (dict(alias_bytes=-1), ValueError),
    (dict(step_seconds=-1.0), ValueError),
    (dict(step_seconds="1"), TypeError),
    (dict(collective_seconds=-1.0), ValueError),
    (dict(collective_seconds=True), TypeError),
])
def test_bad_target_fields_are_refused(changes, error):
    with pytest.raises(error):
        row(**changes)


def test_target_columns_appear_only_with_a_target():
    local = Comparison([row(name="a"), row(name="b")])
    assert not {"target", "peak_bytes", "host_bytes", "device_bytes"} & set(local.to_pandas().columns)
    assert "XLA peak" not in str(local)
    rows = Comparison([row(name="a", target=TPU, peak_bytes=40, host_bytes=0),
                       row(name="b", target=TPU, peak_bytes=30, host_bytes=12)])
    frame = rows.to_pandas()
    assert list(frame["target"]) == [TPU, TPU]
    assert list(frame["peak_bytes"]) == [40, 30] and list(frame["host_bytes"]) == [0, 12]
    assert list(frame["device_bytes"]) == [40, 30] and "step_seconds" not in frame.columns
    text = str(rows)
    assert "device memory" in text and "XLA peak" in text and "host (offloaded)" in text
    assert "est. step time" not in text
    timed = Comparison([row(name="no checkpoint", target=GPU, step_seconds=0.002),
                        row(name="b", target=GPU, step_seconds=0.003)])
    table = timed.table()
    assert list(table.frame["time vs no checkpoint"]) == [1.0, 1.5]
    assert "est. step time (ms)" in str(timed)
    # A TPU's estimate is kept in the rows and the frame, but the table, like the picks, leaves it out.
    tpu_timed = Comparison([row(name="no checkpoint", target=TPU, step_seconds=0.002),
                            row(name="b", target=TPU, step_seconds=0.003)])
    assert list(tpu_timed.to_pandas()["step_seconds"]) == [0.002, 0.003]
    assert "est. step time" not in str(tpu_timed) and "time vs" not in str(tpu_timed)
    mixed = Comparison([row(name="a", target=TPU), row(name="b", target=GPU)])
    assert "target" in mixed.table().frame.columns
    # On several devices, the collectives' part of the estimate has a column of its own.
    assert "collective_seconds" not in timed.to_pandas().columns
    sharded = Comparison([row(name="no checkpoint", target=GPU, step_seconds=0.002, collective_seconds=0.0005),
                          row(name="b", target=GPU, step_seconds=0.003, collective_seconds=0.001)])
    assert list(sharded.to_pandas()["collective_seconds"]) == [0.0005, 0.001]
    assert "est. collectives (ms)" in str(sharded)


def test_placing_targets_accepts_a_target_object():
    chosen = TARGETS[TPU]
    assert isinstance(chosen, Target)
    assert place(ARGS, chosen)[1].sharding == place(ARGS, TPU)[1].sharding

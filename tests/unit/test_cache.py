"""REMAT_GUIDE_CACHE_DIR: figures measured once are read back, identical, by any later call or process."""

import json
import os
import subprocess
import sys

import jax
import pytest

from helpers import counting_compiles
from remat_guide import _store as store
from remat_guide import compare_policies, count_flops, plan_names
from remat_guide._cache import cached, compile_unrun
from remat_guide.models import mlp_args, mlp_scan_loss, transformer_args, transformer_loss

NAMES = ["dots_saveable", "nothing_saveable"]
ARGS = mlp_args(layers=3, n=64, d=32)


@pytest.fixture(autouse=True)
def no_figure_store(monkeypatch):
    """These tests are about REMAT_GUIDE_CACHE_DIR, which keeps a target's figures where no figure store is set."""
    monkeypatch.delenv("REMAT_GUIDE_FIGURES", raising=False)


@pytest.fixture
def compiles():
    """Counts jax.stages.Lowered.compile calls, from any thread."""
    with counting_compiles() as calls:
        yield calls


def figures(rows):
    return [(r.name, r.residual_bytes, r.temp_bytes, r.flops, r.reported_flops, r.peak_bytes, r.host_bytes)
            for r in rows]


@pytest.mark.parametrize("target", [None, "tpu-v5e"])
def test_a_cached_row_equals_a_compiled_one_and_compiles_nothing(tmp_path, monkeypatch, compiles, target):
    monkeypatch.delenv("REMAT_GUIDE_CACHE_DIR", raising=False)
    uncached = compare_policies(mlp_scan_loss, *ARGS, policies=NAMES, target=target)
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path / "cache"))
    first = compare_policies(mlp_scan_loss, *ARGS, policies=NAMES, target=target)
    before = len(compiles)
    again = compare_policies(mlp_scan_loss, *ARGS, policies=NAMES, target=target)
    assert len(compiles) == before and before > 0
    assert figures(uncached) == figures(first) == figures(again)
    assert any((tmp_path / "cache").rglob("*.json"))


def test_a_target_row_measured_before_is_traced_for_the_target_alone(tmp_path, monkeypatch):
    """The local trace only counts FLOPs: with them in the cache, a second call skips it."""
    traces = []

    def loss_for(policy):
        loss = mlp_scan_loss(policy)

        def counted(*args):
            traces.append(policy)
            return loss(*args)

        return counted

    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path))
    first = compare_policies(loss_for, *ARGS, policies=NAMES, target="tpu-v5e")
    traced_first = len(traces)
    again = compare_policies(loss_for, *ARGS, policies=NAMES, target="tpu-v5e")
    assert figures(again) == figures(first)
    # Per row: the target's trace, the residual listing's and, the first time only, the local one.
    assert traced_first == 3 * len(first) and len(traces) - traced_first == 2 * len(first)


def test_each_target_has_its_own_entries(tmp_path, monkeypatch):
    """One program on two targets, one cache: each target's memory is its own, as without a cache."""
    monkeypatch.delenv("REMAT_GUIDE_CACHE_DIR", raising=False)
    policies = []  # the baseline alone: one program
    alone = {t: figures(compare_policies(mlp_scan_loss, *ARGS, policies=policies, target=t))
             for t in ("tpu-v5e", "h100")}
    assert alone["tpu-v5e"] != alone["h100"]
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path))
    shared = {t: figures(compare_policies(mlp_scan_loss, *ARGS, policies=policies, target=t))
              for t in ("tpu-v5e", "h100")}
    assert shared == alone


def test_the_planner_reads_the_cache_and_counts_its_plans_the_same(tmp_path, monkeypatch, compiles):
    """A second plan from an empty measured dict compiles nothing, yet reports the same search."""
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path))
    args = transformer_args(layers=1, batch=1, seq=8, d_model=16, heads=2, mlp_dim=32)
    first = plan_names(transformer_loss, *args, budget_bytes=2**30, names=["mlp_hidden"])
    before = len(compiles)
    again = plan_names(transformer_loss, *args, budget_bytes=2**30, names=["mlp_hidden"])
    assert len(compiles) == before and first.compiled == 6  # no checkpoint, 4 standard, keep it
    assert (again.name, again.temp_bytes, again.flops, again.compiled, again.search) == (
        first.name, first.temp_bytes, first.flops, first.compiled, first.search)


def test_an_unreadable_entry_is_compiled_again(tmp_path, monkeypatch, compiles):
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path))
    first = compare_policies(mlp_scan_loss, *ARGS, policies=NAMES)
    for entry in tmp_path.rglob("*.json"):
        entry.write_text("{not json", encoding="utf-8")
    before = len(compiles)
    again = compare_policies(mlp_scan_loss, *ARGS, policies=NAMES)
    assert len(compiles) - before == len(first) and figures(again) == figures(first)


def test_an_empty_variable_means_no_cache(tmp_path, monkeypatch, compiles):
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", "")
    monkeypatch.chdir(tmp_path)
    compare_policies(mlp_scan_loss, *ARGS, policies=NAMES)
    before = len(compiles)
    compare_policies(mlp_scan_loss, *ARGS, policies=NAMES)
    assert len(compiles) - before == 3 and not any(tmp_path.iterdir())


def test_an_answer_is_read_back_by_its_parts(tmp_path, monkeypatch):
    # The command line's answers and the site's searches (what they read of the figure store: test_figure_store).
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path))
    computed = []

    def answer(value):
        computed.append(value)
        return {"pick": value}

    assert cached("fit", {"seq": 64}, lambda: answer("first")) == {"pick": "first"}
    assert cached("fit", {"seq": 64}, lambda: answer("second")) == {"pick": "first"}
    assert cached("fit", {"seq": 128}, lambda: answer("third")) == {"pick": "third"}
    assert cached("compare", {"seq": 64}, lambda: answer("fourth")) == {"pick": "fourth"}
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", "")
    assert cached("fit", {"seq": 64}, lambda: answer("fifth")) == {"pick": "fifth"}
    assert computed == ["first", "third", "fourth", "fifth"]
    # Computed or read back, with a cache or without, a result comes as JSON gives it back.
    assert cached("pair", {}, lambda: (1, 2)) == [1, 2]
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path))
    assert cached("pair", {}, lambda: (1, 2)) == [1, 2] == cached("pair", {}, lambda: (3, 4))


def test_an_answer_computed_from_a_kept_answer_keeps_the_entries_that_one_read(tmp_path, monkeypatch):
    # Read back, the inner answer must count as the figure store's entries it rests on, or the outer
    # answer, kept, would rest on none of them (and `make figures` could drop them).
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(store.LOG_VARIABLE, raising=False)
    monkeypatch.delenv(store.STORE_VARIABLE, raising=False)

    def inner():
        store.looked_up("an entry")
        return 1

    assert cached("inner", {}, inner) == 1
    assert cached("outer", {}, lambda: cached("inner", {}, lambda: 0) + 1) == 2
    with store.recording() as reads:
        assert cached("outer", {}, lambda: 0) == 2
    assert reads == {"an entry"}


def test_a_file_in_place_of_the_folder_is_refused_by_name(tmp_path, monkeypatch):
    path = tmp_path / "a-file"
    path.write_text("", encoding="utf-8")
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(path))
    with pytest.raises(ValueError, match=r"REMAT_GUIDE_CACHE_DIR must name a folder"):
        compare_policies(mlp_scan_loss, *ARGS, policies=NAMES)


CHILD = r"""
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 8)
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from remat_guide.models import mlp_args, mlp_scan_loss
from remat_guide.sharded import residual_shardings

params, x = mlp_args(layers=2, n=64, d=16)
compiled = []
original = jax.stages.Lowered.compile
jax.stages.Lowered.compile = lambda self, *a, **k: compiled.append(1) or original(self, *a, **k)
pieces = {}
for axis in ("data", "batch"):
    mesh = jax.make_mesh((8,), (axis,), axis_types=(AxisType.Auto,))
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P(axis)))
    loss = mlp_scan_loss(jax.checkpoint_policies.dots_saveable)
    pieces[axis] = [[p.spec, list(p.device_shape)] for p in residual_shardings(loss, params, spec)]
print(json.dumps({"pieces": pieces, "compiled": len(compiled)}))
"""


def test_residual_shardings_are_cached_per_mesh_and_read_back(tmp_path):
    """Two meshes of one shape, with other axis names: each run's specs name its own axis."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "REMAT_GUIDE_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                             timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        runs.append(json.loads(run.stdout.strip().splitlines()[-1]))
    assert runs[0]["pieces"] == runs[1]["pieces"]
    assert [runs[0]["compiled"], runs[1]["compiled"]] == [2, 0]
    for axis, pieces in runs[0]["pieces"].items():
        assert any(f"'{axis}'" in spec for spec, _ in pieces), pieces
        assert not any(f"'{other}'" in spec for spec, _ in pieces for other in {"data", "batch"} - {axis})


@pytest.mark.parametrize("policy", [None, "nothing_saveable"])
def test_compiling_to_measure_gives_a_default_compiles_program_and_figures(policy):
    """LLVM's optimizations off: the same optimized HLO, buffers and FLOPs as jax's own compile."""
    args = transformer_args(layers=2, batch=2, seq=16, d_model=32, heads=2, mlp_dim=64)
    loss = transformer_loss(policy and getattr(jax.checkpoint_policies, policy))
    lowered = jax.jit(jax.grad(loss)).lower(*args)
    fast, default = compile_unrun(lowered), lowered.compile()
    assert fast.as_text() == default.as_text()
    assert count_flops(fast) == count_flops(default)
    memory = [(m.temp_size_in_bytes, m.peak_memory_in_bytes, m.argument_size_in_bytes, m.output_size_in_bytes)
              for m in (fast.memory_analysis(), default.memory_analysis())]
    assert memory[0] == memory[1]

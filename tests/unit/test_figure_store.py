"""The figure store: programs compiled once, read back by key, recorded when missing, checked."""

import concurrent.futures
import copy
import importlib.metadata
import json
import os
import random
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from helpers import counting_compiles, lowered_splash_gradient
from remat_guide import _cache as cache
from remat_guide import _jax_internals as jax_internals
from remat_guide import _measure as measure
from remat_guide import _store as store
from remat_guide import compare_policies
from remat_guide._cache import target_figures
from remat_guide.models import mlp_args, mlp_scan_loss
from remat_guide.site import figure_store
from remat_guide.site.stored import compile_ahead
from remat_guide.targets import place, target_devices

ARGS = mlp_args(layers=2, n=32, d=16)
POLICIES = ["nothing_saveable"]
WORKER_PROCESSES = concurrent.futures.ProcessPoolExecutor


class _InProcess(concurrent.futures.ThreadPoolExecutor):
    """The worker pool of ``figure_store.recompile`` as one thread of this process: the same compiles from the
    kept programs, without a process per worker that imports JAX and starts the compilers."""

    def __init__(self, max_workers=None, mp_context=None, initializer=None, initargs=()):
        super().__init__(1)


@pytest.fixture(scope="module")
def compiled():
    """XLA's figures of each target program the module's tests compiled, by program, devices, options and log."""
    return {}


@pytest.fixture
def compile_once(compiled, monkeypatch):
    """A miss compiles each program once per module: the tests compile the same few programs for their stores.

    A compile that a test counts or watches (``counting_compiles`` wraps ``compile_text``) is always made.
    """
    compile_figures, compile_text = cache._compile_figures, jax_internals.compile_text

    def once(lowered, options, log=False, platform=""):
        if jax_internals.compile_text is not compile_text:
            return compile_figures(lowered, options, log, platform)
        key = (lowered.as_text(), lowered._lowering._device_list, json.dumps(jax_internals.compile_arguments(lowered)),
               json.dumps(options, sort_keys=True), log, platform)
        if key not in compiled:
            compiled[key] = compile_figures(lowered, options, log, platform)
        return copy.deepcopy(compiled[key])

    monkeypatch.setattr(cache, "_compile_figures", once)


@pytest.fixture
def site_store(tmp_path, monkeypatch, compile_once):
    """An empty store and build log, as the site's build sets them, for the page 'probe'; entries are compiled
    again in this process (``worker_processes`` restores the processes)."""
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _InProcess)
    monkeypatch.setenv(store.STORE_VARIABLE, str(tmp_path / "store"))
    monkeypatch.setenv(store.LOG_VARIABLE, str(tmp_path / "log"))
    monkeypatch.setenv(store.PAGE_VARIABLE, "probe")
    monkeypatch.delenv(store.REHEARSAL_VARIABLE, raising=False)
    monkeypatch.delenv("REMAT_GUIDE_PAGE_STARTED", raising=False)
    monkeypatch.delenv("REMAT_GUIDE_CACHE_DIR", raising=False)
    store.load.cache_clear()
    yield tmp_path
    store.load.cache_clear()


@pytest.fixture
def worker_processes(site_store, monkeypatch):
    """Entries compiled again as ``make verify-figures`` compiles them: in worker processes that each import JAX."""
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", WORKER_PROCESSES)


def lowered_for(target, scale=2.0):
    return jax.jit(lambda w, x: jnp.tanh(scale * x @ w).sum()).lower(
        *place((jnp.ones((64, 64)), jnp.ones((8, 64))), target))


def make_figures(tmp_path):
    assert figure_store.update(tmp_path / "store", store.Log(tmp_path / "log")) == 0
    store.load.cache_clear()


def test_a_miss_compiles_and_is_recorded_then_make_figures_stores_it_and_a_build_reads_it(site_store):
    rows = compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES, target="h100")
    log = store.Log(site_store / "log")
    missed = log.all_missed()
    # Each row's program for the H100, and its twin compiled on this machine's CPU to count its FLOPs.
    assert sorted(e["target"] for e in missed) == ["cpu"] * len(rows) + ["h100"] * len(rows)
    assert {e["where"] for e in missed} == {"probe"} and all(e["program"] == "jit_loss" for e in missed)
    make_figures(site_store)
    assert not log.all_missed()
    assert sorted(path.name for path in (site_store / "store").glob("*.jsonl")) == ["cpu.jsonl", "h100.jsonl"]
    with counting_compiles() as compiles:
        again = compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES, target="h100")
    assert [(r.peak_bytes, r.temp_bytes, r.host_bytes, r.flops) for r in again] == \
        [(r.peak_bytes, r.temp_bytes, r.host_bytes, r.flops) for r in rows]
    # The H100's figures came from the store (the CPU's FLOPs are kept in the process).
    assert not compiles and not log.all_missed()
    assert len(log.reads()["probe"]) == 2 * len(rows)


def test_a_build_records_the_cpu_programs_whose_flops_the_cache_answered(site_store, monkeypatch):
    # What a build records must not depend on what an earlier run left in the cache, or `make
    # figures` after a run with a warm cache drops entries that a build with an empty one reads.
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(site_store / "cache"))
    monkeypatch.setattr(measure, "_TARGET_FLOPS", {})  # as in a new process: the CPU programs are looked up
    compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES, target="h100")
    log, first = _stored_and_started_again(site_store)
    with counting_compiles() as compiles:
        compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES, target="h100")
    assert not compiles and log.reads()["probe"] == first


def _stored_and_started_again(site_store):
    """After a first run of the page 'probe': `make figures`, then the page's record emptied as it runs again.

    Returns the log and the keys the first run read (of the CPU's and the H100's programs).
    """
    make_figures(site_store)
    log = store.Log(site_store / "log")
    read = log.reads()["probe"]
    assert {store.load(site_store / "store")[key]["target"] for key in read} == {"cpu", "h100"}
    log.start("probe")
    return log, read


def test_an_answer_read_back_from_the_cache_records_the_entries_its_computation_read(site_store, monkeypatch):
    # A page's search, kept whole: read back, it must leave the same record as computing it, or
    # `make figures` after a build with a warm cache drops the entries it rests on.
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(site_store / "cache"))
    computed = []

    def answer():
        computed.append(1)
        monkeypatch.setattr(measure, "_TARGET_FLOPS", {})  # as in a new process: the CPU programs are looked up
        return compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES, target="h100")[0].temp_bytes

    first = cache.cached("probe answer", ["h100"], answer)
    log, read = _stored_and_started_again(site_store)
    with counting_compiles() as compiles:
        assert cache.cached("probe answer", ["h100"], answer) == first
    assert not compiles and computed == [1] and log.reads()["probe"] == read
    # A run without a build's log reads it back too; without the store, it is computed and kept apart.
    monkeypatch.delenv(store.LOG_VARIABLE)
    assert cache.cached("probe answer", ["h100"], answer) == first and computed == [1]
    monkeypatch.delenv(store.STORE_VARIABLE)
    assert cache.cached("probe answer", ["h100"], answer) == first and computed == [1, 1]
    monkeypatch.setenv(store.STORE_VARIABLE, str(site_store / "store"))
    monkeypatch.setenv(store.LOG_VARIABLE, str(site_store / "log"))
    # An entry gone from the store: the answer is computed again and the entry's program compiled, as a miss.
    held = store.load(site_store / "store")
    store.write(site_store / "store", [entry for key, entry in held.items() if key not in read])
    store.load.cache_clear()
    assert cache.cached("probe answer", ["h100"], answer) == first and computed == [1, 1, 1]
    # The H100's programs compiled again, as misses (the CPU's FLOPs may come from the cache).
    missed = {entry["key"]: entry["target"] for entry in log.all_missed()}
    assert set(missed) <= read and "h100" in missed.values()


def test_a_cpu_measurement_is_kept_with_its_flops_read_back_without_compiling_and_compiled_again_the_same(
        site_store, worker_processes, capsys):
    rows = compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES)
    log = store.Log(site_store / "log")
    missed = log.all_missed()
    assert [e["target"] for e in missed] == ["cpu"] * len(rows)
    assert {e["compiler"] for e in missed} == {f"jaxlib {importlib.metadata.version('jaxlib')}, {os.uname().machine}"}
    assert {e["options"]["xla_backend_optimization_level"] for e in missed} == {0}
    assert {e["flops"]["total"] for e in missed} == {r.flops for r in rows}
    make_figures(site_store)
    assert [path.name for path in (site_store / "store").glob("*.jsonl")] == ["cpu.jsonl"]
    with counting_compiles() as compiles:
        again = compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES)
    assert not compiles and not log.all_missed()
    assert [(r.flops, r.temp_bytes, r.peak_bytes) for r in again] == [(r.flops, r.temp_bytes, r.peak_bytes)
                                                                       for r in rows]
    # make verify-figures: each CPU entry compiled again in a worker process, the FLOPs counted again.
    assert figure_store.verify(site_store / "store") == 0
    assert f"all {len(rows)} entries compiled again to the same figures" in capsys.readouterr().out


SHARDED_CPU_MEASUREMENT = """
import jax, jax.numpy as jnp
jax.config.update("jax_num_cpu_devices", 4)
from jax.sharding import NamedSharding, PartitionSpec as P
from remat_guide import compare_policies
mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
x = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P("data")))
w = jnp.ones((8, 8))
def loss_for(policy):
    loss = lambda w, x: jnp.tanh(x @ w).sum()
    return loss if policy is None else jax.checkpoint(loss, policy=policy)
compare_policies(loss_for, w, x, policies=["nothing_saveable"])
"""


def test_a_sharded_cpu_entry_is_compiled_again_on_as_many_cpu_devices(site_store, worker_processes, capsys):
    # Measured in a process of its own, which starts with 4 CPU devices; this one has fewer.
    subprocess.run([sys.executable, "-c", SHARDED_CPU_MEASUREMENT], check=True, env=dict(os.environ))
    missed = store.Log(site_store / "log").all_missed()
    assert {e["target"] for e in missed} == {"cpu"} and {len(e["compile"]["devices"]) for e in missed} == {4}
    make_figures(site_store)
    assert figure_store.verify(site_store / "store") == 0
    assert f"all {len(missed)} entries compiled again to the same figures" in capsys.readouterr().out


def test_a_change_to_how_flops_are_counted_compiles_the_cpu_entries_again(site_store, monkeypatch):
    compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES)
    make_figures(site_store)
    monkeypatch.setattr(cache, "_flops_code", lambda: "another counter")
    rows = compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES)
    missed = store.Log(site_store / "log").all_missed()
    assert len(missed) == len(rows) and {e["options"]["count_flops"] for e in missed} == {"another counter"}


def test_the_refresh_leaves_a_cpu_entry_of_another_architecture_alone(site_store, capsys):
    compare_policies(mlp_scan_loss, *ARGS, policies=POLICIES)
    make_figures(site_store)
    elsewhere = [{**entry, "compiler": entry["compiler"].rsplit(", ", 1)[0] + ", another-machine"}
                 for entry in store.load(site_store / "store").values()]
    store.write(site_store / "store", elsewhere)
    store.load.cache_clear()
    capsys.readouterr()
    assert figure_store.refresh(site_store / "store", store.Log(site_store / "log")) == 0
    assert not store.Log(site_store / "log").all_replaced() and capsys.readouterr().out == ""


def test_stored_figures_are_the_compilers_own(site_store):
    lowered = lowered_for("tpu-v5e")
    compiled = lowered.compile()
    ahead = compile_ahead(lowered, "tpu-v5e")
    memory = compiled.memory_analysis()
    assert vars(ahead.memory_analysis()) == {
        name: getattr(memory, name) for name in dir(memory)
        if not name.startswith("_") and isinstance(getattr(memory, name), int)}
    assert ahead.cost_analysis() == pytest.approx(compiled.cost_analysis())
    assert ahead.instructions["convolution"] + ahead.instructions.get("dot", 0) >= 1
    gpu = compile_ahead(lowered_for("h100"), "h100")
    assert gpu.cost_analysis() is None  # XLA's GPU compiler gives no cost analysis


def test_a_miss_is_compiled_from_the_text_the_store_keeps(site_store, monkeypatch):
    # Compiled from the lowered module itself, with its source locations, XLA's TPU compiler
    # can plan another temp (a splash-attention step: 16.4 against 21.8 MB); verification
    # compiles the kept text, so the figures must come from that text.
    compiled_texts = []
    compile_text = jax_internals.compile_text
    monkeypatch.setattr(jax_internals, "compile_text",
                        lambda text, *rest: compiled_texts.append(text) or compile_text(text, *rest))
    lowered = lowered_for("tpu-v5e", scale=3.0)
    compile_ahead(lowered, "tpu-v5e")
    (entry,) = store.Log(site_store / "log").all_missed()
    assert compiled_texts == [lowered.as_text()]
    assert store.read_program(site_store / "log", entry["key"]) == compiled_texts[0]


def test_the_key_is_the_program_target_compiler_and_options_not_where_it_was_written(site_store):
    def keys():
        return set(store.Log(site_store / "log").reads()["probe"])

    spec = place(jax.ShapeDtypeStruct((8,), jnp.float32), "h100")
    compile_ahead(jax.jit(lambda x: 2.0 * x).lower(spec), "h100")
    compile_ahead(jax.jit(lambda x: 2.0 * x).lower(spec), "h100")  # the same program, another line
    assert len(keys()) == 1
    compile_ahead(lowered_for("h100"), "h100")
    compile_ahead(lowered_for("h100"), "h100", {"xla_gpu_autotune_level": 0})
    compile_ahead(lowered_for("h200"), "h200")
    compile_ahead(lowered_for("h100", scale=3.0), "h100")
    assert len(keys()) == 5


def test_a_number_changed_by_hand_fails_the_load_and_names_the_entry(site_store):
    compile_ahead(lowered_for("h100"), "h100")
    make_figures(site_store)
    path = site_store / "store" / "h100.jsonl"
    entry = json.loads(path.read_text())
    entry["memory"]["temp_size_in_bytes"] += 1
    path.write_text(json.dumps(entry) + "\n")
    with pytest.raises(store.StoreError, match=rf"entry {entry['key'][:16]} \(jit__lambda for h100\)"):
        store.load(site_store / "store")


def test_a_recompile_that_differs_fails_verification_and_names_the_entry(site_store, capsys):
    """Figures that no longer match the compiler (here: forged with a valid digest) fail the recompile."""
    compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e")
    make_figures(site_store)
    (key,) = store.load(site_store / "store")
    entry = dict(store.load(site_store / "store")[key])
    entry["memory"] = {**entry["memory"], "temp_size_in_bytes": entry["memory"]["temp_size_in_bytes"] + 4096}
    store.write(site_store / "store", [entry])
    store.load.cache_clear()
    sample = site_store / "sample.txt"
    assert figure_store.draw_sample(site_store / "store", store.Log(site_store / "log"), 7, sample) == 0
    assert sample.read_text().split() == [key]
    assert "seed 7" in capsys.readouterr().out
    assert figure_store.verify(site_store / "store", sample.read_text().split(), jobs=1) == 1
    err = capsys.readouterr().err
    assert f"entry {key[:16]} (jit__lambda for tpu-v5e" in err and "differs from a fresh compile in its memory" in err
    assert f"'temp_size_in_bytes': {entry['memory']['temp_size_in_bytes']}" in err


def test_an_honest_store_passes_verification_and_the_check(site_store, worker_processes, capsys):
    compile_ahead(lowered_for("h100"), "h100")
    compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e", log=True)
    make_figures(site_store)
    assert figure_store.verify(site_store / "store", jobs=2) == 0
    assert "all 2 entries compiled again to the same figures" in capsys.readouterr().out
    assert figure_store.check(site_store / "store", [store.Log(site_store / "log")]) == 0


def test_each_entry_keeps_its_program_and_how_it_was_compiled(site_store):
    """Enough to compile it again alone: the lowered text and the arguments of compile, here of a sharded step."""
    mesh = jax.sharding.Mesh(np.array(target_devices("tpu-v5p", 8)).reshape(4, 2), ("data", "model"))
    w = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    step = jax.jit(lambda w, x: w - 0.1 * jax.grad(lambda w: jnp.tanh(x @ w).sum())(w), donate_argnums=0)
    lowered = step.lower(w, x)
    compile_ahead(lowered, "tpu-v5p")
    make_figures(site_store)
    (entry,) = store.load(site_store / "store").values()
    assert store.read_program(site_store / "store", entry["key"]) == lowered.as_text()
    assert sorted(entry["compile"]["devices"]) == list(range(8))
    assert entry["compile"]["propagate_to_outputs"] == [True]
    program = site_store / "store" / "programs" / f"{entry['key']}.mlir.xz"
    assert program.stat().st_size < len(lowered.as_text())
    assert figure_store.verify(site_store / "store", jobs=1) == 0


def kept_before_and_refreshed(site_store, capsys, key, old, platform):
    """Keeps ``old`` in place of the entry under ``key``, as an older store did; the refresh compiles it again
    and ``make figures`` stores what it compiled."""
    store.write(site_store / "store", [{**old, "check": store.digest(old)}])
    store.load.cache_clear()
    kept = site_store / "store"
    assert store.outdated(store.load(kept)[key], platform, store.read_program(kept, key))
    assert figure_store.refresh(site_store / "store", store.Log(site_store / "log"), jobs=1) == 0
    assert "1 lack a figure the pages now read" in capsys.readouterr().out
    make_figures(site_store)


def test_a_sharded_entry_kept_before_the_store_held_its_collectives_is_compiled_again(site_store, capsys):
    mesh = jax.sharding.Mesh(np.array(target_devices("tpu-v5p", 8)).reshape(4, 2), ("data", "model"))
    w = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    lowered = jax.jit(lambda w: w.sum(0), out_shardings=NamedSharding(mesh, P())).lower(w)
    compile_ahead(lowered, "tpu-v5p")
    make_figures(site_store)
    (key, entry), = store.load(site_store / "store").items()
    assert entry["kernels"]["collectives"] and "schedule" in entry["kernels"]
    # As the store kept it before collectives were read: they were kernels then.
    old = {**entry, "kernels": {k: v for k, v in entry["kernels"].items() if k not in ("collectives", "schedule")}}
    kept_before_and_refreshed(site_store, capsys, key, old, "tpu")
    assert store.load(site_store / "store")[key] == entry and not store.outdated(entry, "tpu")


def test_a_tpu_entry_kept_before_its_pallas_calls_were_counted_is_compiled_again(site_store, capsys):
    """At a batch of one the splash kernels' operands lose their batch dimension; entries read before that
    was understood counted no FLOPs for them, and their kept program is what tells them apart."""
    compile_ahead(lowered_splash_gradient(1), "tpu-v5e")
    make_figures(site_store)
    (key, entry), = store.load(site_store / "store").items()
    assert entry["kernels"]["pallas_calls"] > 0
    old = {**entry, "kernels": {k: v for k, v in entry["kernels"].items() if k != "pallas_calls"}}
    assert not store.outdated(old, "tpu")  # without its program, nothing says it calls Pallas kernels
    kept_before_and_refreshed(site_store, capsys, key, old, "tpu")
    assert store.load(site_store / "store")[key] == entry


def test_a_kept_program_that_is_not_the_keyed_one_fails_verification(site_store, capsys):
    compile_ahead(lowered_for("h100"), "h100")
    compile_ahead(lowered_for("h100", scale=3.0), "h100")
    make_figures(site_store)
    first, second = sorted(store.load(site_store / "store"))
    programs = site_store / "store" / "programs"
    (programs / f"{second}.mlir.xz").write_bytes((programs / f"{first}.mlir.xz").read_bytes())
    assert figure_store.verify(site_store / "store", jobs=1) == 1
    assert f"entry {second[:16]} (jit__lambda for h100" in capsys.readouterr().err


def test_an_entry_read_without_its_program_fails_the_check_until_make_figures_completes_it(site_store, capsys):
    compile_ahead(lowered_for("h100"), "h100")
    make_figures(site_store)
    (key,) = store.load(site_store / "store")
    (site_store / "store" / "programs" / f"{key}.mlir.xz").unlink()
    assert figure_store.verify(site_store / "store", jobs=1) == 1
    assert "keeps no program to compile again" in capsys.readouterr().err
    with counting_compiles() as compiles:
        compile_ahead(lowered_for("h100"), "h100")
    assert not compiles
    assert figure_store.check(site_store / "store", [store.Log(site_store / "log")]) == 1
    assert "probe read jit__lambda for h100" in capsys.readouterr().err
    make_figures(site_store)
    assert store.has_program(site_store / "store", key)
    assert figure_store.check(site_store / "store", [store.Log(site_store / "log")]) == 0


def test_an_upgrade_rehearsal_misses_every_entry_and_the_refresh_compiles_them_before_the_pages(
        site_store, monkeypatch, capsys):
    compile_ahead(lowered_for("h100"), "h100")
    compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e", log=True)
    make_figures(site_store)
    old = set(store.load(site_store / "store"))
    monkeypatch.setenv(store.REHEARSAL_VARIABLE, "upgrade")
    assert figure_store.verify(site_store / "store", jobs=1) == 1  # the installed compiler 'is' another
    assert "was compiled by another compiler" in capsys.readouterr().err
    log = store.Log(site_store / "log")
    assert figure_store.refresh(site_store / "store", log, jobs=2) == 0
    out = capsys.readouterr().out
    assert "2 entries were compiled by another compiler" in out
    assert "2 gave the same figures as the entries they replace, 0 changed" in out  # the same compiler, in truth
    assert {e["compiler"].endswith("rehearsal upgrade") for e in log.all_missed()} == {True}
    with counting_compiles() as compiles:  # the pages read what the refresh compiled
        compile_ahead(lowered_for("h100"), "h100")
        compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e", log=True)
    assert not compiles
    assert figure_store.refresh(site_store / "store", log, jobs=2) == 0  # done already: nothing to do
    assert capsys.readouterr().out == ""
    make_figures(site_store)
    new = set(store.load(site_store / "store"))
    assert len(new) == 2 and not new & old
    assert sorted(p.name for p in (site_store / "store" / "programs").iterdir()) == sorted(f"{k}.mlir.xz" for k in new)
    assert figure_store.verify(site_store / "store", jobs=2) == 0


def offloading_lowered():
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["h"], offload_src="device",
        offload_dst="pinned_host")

    def loss(w, x):
        def layer(h, w_layer):
            return jnp.tanh(jax.ad_checkpoint.checkpoint_name(h @ w_layer, "h")), None
        return jax.lax.scan(jax.checkpoint(layer, policy=policy), x, w)[0].sum()
    return jax.jit(jax.grad(loss)).lower(*place((jnp.ones((4, 64, 64)), jnp.ones((8, 64))), "h100"))


def test_an_entry_kept_before_the_store_held_its_transfers_schedule_is_compiled_again(site_store, capsys):
    compile_ahead(offloading_lowered(), "h100")
    make_figures(site_store)
    (key, entry), = store.load(site_store / "store").items()
    assert entry["kernels"]["host_out"] > 0 and "schedule" in entry["kernels"]
    # The entry as the store kept it before schedules: its kernels without one.
    old = {**entry, "kernels": {k: v for k, v in entry["kernels"].items() if k != "schedule"}}
    store.write(site_store / "store", [{**old, "check": store.digest(old)}])
    store.load.cache_clear()
    assert store.outdated(store.load(site_store / "store")[key], "cuda")
    log = store.Log(site_store / "log")
    assert figure_store.refresh(site_store / "store", log, jobs=1) == 0
    assert "0 entries were compiled by another compiler than the installed one (" in capsys.readouterr().out
    with counting_compiles() as compiles:  # the page reads what the refresh compiled
        compile_ahead(offloading_lowered(), "h100")
    assert not compiles
    make_figures(site_store)
    assert store.load(site_store / "store")[key] == entry
    assert not store.outdated(entry, "cuda")


def test_a_gpu_entry_kept_before_its_kernels_held_their_shapes_or_strided_bytes_is_compiled_again(
        site_store, capsys):
    compile_ahead(offloading_lowered(), "h100")
    make_figures(site_store)
    (key, entry), = store.load(site_store / "store").items()
    assert all(len(row) == 5 for row in entry["kernels"]["kernels"])
    assert any(row[3] for row in entry["kernels"]["kernels"])  # the matmuls' shapes
    # The entry as the store kept it before shapes (three figures per kernel) and before
    # strided reads (four): both are compiled again.
    older = {**entry, "kernels": {**entry["kernels"], "kernels": [row[:3] for row in entry["kernels"]["kernels"]]}}
    assert store.outdated(older, "cuda")
    kernels = {**entry["kernels"], "kernels": [row[:4] for row in entry["kernels"]["kernels"]]}
    kept_before_and_refreshed(site_store, capsys, key, {**entry, "kernels": kernels}, "cuda")
    assert store.load(site_store / "store")[key] == entry


def test_a_tpu_entry_kept_before_the_store_held_its_kernels_is_compiled_again(site_store, capsys):
    compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e")
    make_figures(site_store)
    (key, entry), = store.load(site_store / "store").items()
    assert entry["kernels"]["matmul_flops_once"] == 2 * 8 * 64 * 64 and entry["kernels"]["loops_counted_once"] == 0
    old = {k: v for k, v in entry.items() if k != "kernels"}  # as TPU entries were kept before
    store.write(site_store / "store", [{**old, "check": store.digest(old)}])
    store.load.cache_clear()
    assert store.outdated(store.load(site_store / "store")[key], "tpu")
    assert figure_store.refresh(site_store / "store", store.Log(site_store / "log"), jobs=1) == 0
    assert "1 lack a figure the pages now read" in capsys.readouterr().out
    with counting_compiles() as compiles:
        compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e")
    assert not compiles
    make_figures(site_store)
    assert store.load(site_store / "store")[key] == entry and not store.outdated(entry, "tpu")


def test_a_program_the_store_lacks_fails_the_check_naming_the_page(site_store, capsys):
    compile_ahead(lowered_for("h100"), "h100")
    make_figures(site_store)
    compile_ahead(lowered_for("h100", scale=5.0), "h100")
    code = figure_store.check(site_store / "store", [store.Log(site_store / "log"), store.Log(site_store / "repro")])
    assert code == 1
    assert "probe compiled jit__lambda for h100" in capsys.readouterr().err


def test_make_figures_drops_what_no_page_read(site_store, monkeypatch):
    compile_ahead(lowered_for("h100"), "h100")
    compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e")
    make_figures(site_store)
    assert len(store.load(site_store / "store")) == 2
    monkeypatch.setenv(store.LOG_VARIABLE, str(site_store / "next"))
    compile_ahead(lowered_for("h100"), "h100")
    # A log of the pages alone may lack what only the tests read: nothing is dropped.
    assert figure_store.update(site_store / "store", store.Log(site_store / "next")) == 0
    store.load.cache_clear()
    assert len(store.load(site_store / "store")) == 2
    monkeypatch.setenv(store.PAGE_VARIABLE, "tests/unit/test_probe.py")
    compile_ahead(lowered_for("h100"), "h100")
    assert figure_store.update(site_store / "store", store.Log(site_store / "next")) == 0
    store.load.cache_clear()
    assert [e["target"] for e in store.load(site_store / "store").values()] == ["h100"]
    assert not (site_store / "store" / "tpu-v5e.jsonl").exists()
    assert [p.name for p in (site_store / "store" / "programs").iterdir()] == [
        f"{key}.mlir.xz" for key in store.load(site_store / "store")]


def test_the_store_is_sorted_and_written_the_same_every_time(site_store):
    for scale in (1.0, 2.0, 3.0):
        compile_ahead(lowered_for("h100", scale), "h100")
    make_figures(site_store)
    path = site_store / "store" / "h100.jsonl"
    text = path.read_text()
    keys = [json.loads(line)["key"] for line in text.splitlines()]
    assert keys == sorted(keys) and len(keys) == 3
    store.write(site_store / "store", store.load(site_store / "store").values())
    assert path.read_text() == text


def test_a_refused_program_is_stored_and_raises_as_the_compiler_did(site_store, capsys):
    huge = jax.ShapeDtypeStruct((1 << 17, 1 << 17), jnp.float32)
    lowered = jax.jit(lambda a: (a @ a).sum()).lower(place(huge, "tpu-v5e"))
    with pytest.raises(jax.errors.JaxRuntimeError) as direct:
        lowered.compile()
    with pytest.raises(jax.errors.JaxRuntimeError) as first:
        compile_ahead(lowered, "tpu-v5e")
    make_figures(site_store)
    with counting_compiles() as compiles, pytest.raises(jax.errors.JaxRuntimeError) as stored:
        compile_ahead(lowered, "tpu-v5e")
    assert not compiles
    assert str(direct.value) == str(first.value) == str(stored.value)
    assert figure_store.verify(site_store / "store", jobs=1) == 0  # refused again, with the same figure
    assert "1 of them refusals" in capsys.readouterr().out
    # The figure is the message's first line; the allocations listed below it are named after source
    # metadata that the kept program lacks, so only the first line must match.
    (entry,) = store.load(site_store / "store").values()
    first, *rest = entry["error"].splitlines()
    for error, code in (("\n".join([first, "  1. Size: 64.00G, op_name=\"elsewhere\""]), 0),
                        ("\n".join([first.replace("64.00G", "64.01G", 1), *rest]), 1)):
        store.write(site_store / "store", [{**entry, "error": error}])
        store.load.cache_clear()
        assert figure_store.verify(site_store / "store", jobs=1) == code


def test_without_a_store_target_figures_compile(tmp_path, monkeypatch):
    monkeypatch.delenv(store.STORE_VARIABLE, raising=False)
    monkeypatch.delenv("REMAT_GUIDE_CACHE_DIR", raising=False)
    lowered = lowered_for("h100")
    with counting_compiles() as compiles:
        figures = target_figures(lowered, "h100", "cuda")
    assert len(compiles) == 1
    assert figures["memory"]["peak_memory_in_bytes"] == lowered.compile().memory_analysis().peak_memory_in_bytes


def test_a_page_and_the_processes_it_starts_share_its_record(site_store):
    """A child process (as a test starts one) adds to the page's record; only the page's start empties it."""
    store.start_page()
    # The child starts 'its' page too, as a notebook's kernel does: the record is the parent's.
    child = "from remat_guide import _store as s; s.start_page(); s.log().read('b' * 64, 'probe')"
    subprocess.run([sys.executable, "-c", child], env=os.environ, check=True)
    store.log().read("a" * 64, "probe")
    assert store.Log(site_store / "log").reads() == {"probe": {"a" * 64, "b" * 64}}
    store.start_page()  # the same page, still running
    assert store.Log(site_store / "log").reads() == {"probe": {"a" * 64, "b" * 64}}
    os.environ["REMAT_GUIDE_PAGE"] = "another"
    store.start_page()
    os.environ["REMAT_GUIDE_PAGE"] = "probe"
    store.start_page()  # the page runs again
    assert store.Log(site_store / "log").reads() == {}


def test_log_lines_are_kept_when_asked_for_and_keyed_apart(site_store):
    plain = compile_ahead(lowered_for("h100"), "h100")
    logged = compile_ahead(lowered_for("h100"), "h100", log=True)
    assert plain.log == [] and isinstance(logged.log, list)
    assert vars(plain.memory_analysis()) == vars(logged.memory_analysis())
    assert len(store.Log(site_store / "log").reads()["probe"]) == 2


def test_without_a_store_the_cache_keeps_each_setting_apart(tmp_path, monkeypatch, compile_once):
    """REMAT_GUIDE_CACHE_DIR keys a target's figures by the options and the log too, as the store does."""
    monkeypatch.delenv(store.STORE_VARIABLE, raising=False)
    monkeypatch.setenv("REMAT_GUIDE_CACHE_DIR", str(tmp_path))
    lowered = lowered_for("h100")
    assert "log" not in target_figures(lowered, "h100", "cuda")
    assert isinstance(target_figures(lowered, "h100", "cuda", log=True)["log"], list)
    with counting_compiles() as compiles:
        target_figures(lowered, "h100", "cuda", {"xla_gpu_autotune_level": 0})
        target_figures(lowered, "h100", "cuda", log=True)
    assert len(compiles) == 1  # the new options compile; the log's entry is read back


def test_the_sample_is_drawn_from_what_pages_read_not_tests_or_doctests(site_store, monkeypatch):
    compile_ahead(lowered_for("h100"), "h100")  # read by the page 'probe'
    for reader, scale in (("tests/unit/test_probe.py", 3.0), ("src/remat_guide/probe.py", 4.0)):
        monkeypatch.setenv(store.PAGE_VARIABLE, reader)
        compile_ahead(lowered_for("h100", scale), "h100")
    make_figures(site_store)
    assert len(store.load(site_store / "store")) == 3
    sample = site_store / "sample.txt"
    assert figure_store.draw_sample(site_store / "store", store.Log(site_store / "log"), 1, sample,
                                    per_compiler=3) == 0
    assert sample.read_text().split() == sorted(store.Log(site_store / "log").reads()["probe"])


def test_the_sample_goes_by_rounds_and_a_spent_budget_leaves_all_but_each_compilers_first(site_store, capsys):
    for scale in (2.0, 3.0):
        compile_ahead(lowered_for("h100", scale), "h100")
    compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e")
    make_figures(site_store)
    entries = store.load(site_store / "store")
    sample = site_store / "sample.txt"
    assert figure_store.draw_sample(site_store / "store", store.Log(site_store / "log"), 5, sample,
                                    per_compiler=2) == 0
    drawn = sample.read_text().split()
    assert [figure_store.compiler_family(entries[key]) for key in drawn] == ["gpu", "tpu", "gpu"]
    capsys.readouterr()
    assert figure_store.verify(site_store / "store", drawn, jobs=1, budget=0) == 0
    out = capsys.readouterr().out
    assert "all 2 entries compiled again to the same figures" in out
    left = "1 drawn entries left for another run, the compiles having taken the budget of 0 s:"
    assert f"{left}\n  {drawn[2][:16]}" in out
    assert figure_store.main(["verify", "--store", str(site_store / "store"), "--sample", str(sample),
                              "--jobs", "1", "--budget", "600"]) == 0
    out = capsys.readouterr().out
    assert "all 3 entries compiled again to the same figures" in out and "left for another run" not in out


def test_one_entry_is_reproduced_alone_by_the_start_of_its_key(site_store, capsys):
    compile_ahead(lowered_for("h100"), "h100")
    compile_ahead(lowered_for("tpu-v5e"), "tpu-v5e")
    make_figures(site_store)
    keys = sorted(store.load(site_store / "store"))
    assert figure_store.main(["reproduce", keys[0][:12], "--store", str(site_store / "store")]) == 0
    out = capsys.readouterr().out
    assert "compiling 1 entries again" in out and "all 1 entries compiled again to the same figures" in out
    assert figure_store.main(["reproduce", "", "--store", str(site_store / "store")]) == 2
    assert "2 entries have a key starting with ''" in capsys.readouterr().err


def test_the_sample_can_draw_every_entry_and_draws_small_programs_more_often():
    keys = ["small", "middle", "large"]
    weights = [1 / 1_000, 1 / 10_000, 1 / 100_000]
    drawn = {key: 0 for key in keys}
    for seed in range(3_000):
        (key,) = figure_store._weighted_draw(keys, weights, 1, random.Random(seed))
        drawn[key] += 1
    assert drawn["small"] > drawn["middle"] > drawn["large"] > 0
    assert figure_store._weighted_draw(keys, weights, 3, random.Random(0)) == keys  # all, in their order


def test_the_samples_odds_fall_with_the_square_of_a_programs_size():
    assert figure_store._sample_odds(1_000) / figure_store._sample_odds(10_000) == pytest.approx(100)
    assert figure_store._sample_odds(0) == figure_store._sample_odds(1) == 1  # no program kept: as one byte

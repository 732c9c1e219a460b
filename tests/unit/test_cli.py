"""The ``remat-guide`` command, run as users run it: in a subprocess, on small configs."""

import functools
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import ROOT
from remat_guide import cli, compare_policies, recommend_policy
from remat_guide.fit import recommend_batch
from remat_guide.models import MAXTEXT_PRESETS, decoder_args, decoder_step

# A Llama-style config of two small layers; at 64 tokens and an 8 MiB budget the programs
# are those the package's doctests compile for an H100 (docs/_figures holds them).
TINY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "hidden_act": "silu",
        "rope_theta": 500000.0, "tie_word_embeddings": False, "_name_or_path": "tiny-llama"}
FIT = ["--target", "h100", "--seq", "64", "--budget", "0.0078125", "--policies", "minimal",
       "--attention", "xla"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(TINY), encoding="utf-8")
    return path


def _env(cache, logged=False):
    """This environment with the repository's figure store and the test's own cache.

    The command reads its answer from the cache when an earlier run kept it there (the cache
    is the test's, new each run, so that no answer comes from an earlier run's). With
    ``logged``, the run keeps the build's record of what the store gave out: each entry read
    (or, for an answer read back, each entry its computation read) and each program the
    store lacks, named as missing.
    """
    env = dict(os.environ)
    if not logged:
        env.pop("REMAT_GUIDE_FIGURES_LOG", None)
    env.update(JAX_PLATFORMS="cpu", REMAT_GUIDE_FIGURES=str(ROOT / "docs" / "_figures"),
               REMAT_GUIDE_CACHE_DIR=str(cache))
    return env


def _run(cache, *args, module=False, logged=False, platforms=True):
    command = [sys.executable, "-m", "remat_guide"] if module else [os.path.join(os.path.dirname(sys.executable),
                                                                                 "remat-guide")]
    env = _env(cache, logged)
    if not platforms:  # as a user runs it: the command puts JAX on the CPU itself
        del env["JAX_PLATFORMS"]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def fitted(cache, config):
    """The JSON answer and the table for the tiny config, each from its own run.

    The first run records what it reads from the figure store (the programs the package's
    doctests compile for an H100 and this machine's programs whose FLOPs it counts) and
    keeps its answer in the test's cache, from which the second reads it.
    """
    as_text = _run(cache, "fit", config, *FIT, logged=True)
    as_json = _run(cache, "fit", config, *FIT, "--json")
    return as_json, as_text


def test_fit_prints_the_table_the_pick_and_where_its_memory_goes(fitted):
    as_json, as_text = fitted
    assert as_text.returncode == 0, as_text.stderr
    answer = json.loads(as_json.stdout)
    lines = as_text.stdout.splitlines()
    header = next(line for line in lines if line.startswith("policy"))
    assert header.split()[:4] == ["policy", "memory", "fits", "batch"] and "tokens/s" in header
    for row in answer["rows"]:
        line = next(line for line in lines if line.startswith(row["policy"] + "  "))
        assert f"{row['device_bytes'] / 2**30:.1f} GiB" in line and str(row["batch"]) in line.split()
    pick = answer["pick"]
    assert f"Pick: {pick['policy']} at a global batch of {pick['global_batch']}" in as_text.stdout
    assert "not a run" in as_text.stdout and not as_text.stderr
    # The parts of the pick's memory add up to what its program needs on the device.
    assert sum(part["bytes"] for part in answer["memory"]) == pick["device_bytes"]


def test_fit_json_is_the_answer_of_recommend_batch(fitted, cache, monkeypatch):
    as_json, _ = fitted
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    for name, value in _env(cache, logged=True).items():
        monkeypatch.setenv(name, value)
    config = cli.read_config(TINY)
    plan = recommend_batch(functools.partial(decoder_step, config), lambda b: decoder_args(config, b, 64),
                           policies={"minimal": MAXTEXT_PRESETS["minimal"]}, target="h100",
                           tokens_per_example=64, budget_bytes=2**23, limit=64)
    assert [(r["policy"], r["batch"], r["device_bytes"]) for r in answer["rows"]] == [
        (row.name, row.batch, row.device_bytes) for row in plan.rows]
    assert answer["pick"]["policy"] == plan.pick.name and answer["pick"]["global_batch"] == plan.pick.batch
    assert answer["pick"]["tokens_per_second"] == pytest.approx(plan.pick.tokens_per_second)


def test_a_second_run_reads_its_answer_from_the_cache(fitted, cache, config):
    _, first = fitted
    files = {path: path.stat().st_mtime_ns for path in cache.rglob("*.json")}
    started = time.perf_counter()
    again = _run(cache, "fit", config, *FIT, module=True)  # python -m remat_guide, too
    seconds = time.perf_counter() - started
    assert again.returncode == 0 and again.stdout == first.stdout
    assert {path: path.stat().st_mtime_ns for path in cache.rglob("*.json")} == files  # nothing new written
    assert seconds < 10


def test_nothing_fits_exits_1(cache, config):
    done = _run(cache, "fit", config, "--target", "h100", "--seq", "64", "--budget", "0.0001", "--policies", "minimal",
                "--attention", "xla", "--global-batch", "1", "--json", logged=True, platforms=False)
    assert done.returncode == cli.NOTHING_FITS, done.stderr
    answer = json.loads(done.stdout)
    assert answer["pick"] is None and not any(row["fits"] for row in answer["rows"])
    assert all(row["device_bytes"] > 0.0001 * 2**30 for row in answer["rows"])


@pytest.mark.parametrize("change, named", [
    ({"model_type": "gemma"}, "'model_type'"),
    ({"hidden_act": "gelu"}, "'hidden_act'"),
    ({"head_dim": 32}, "'head_dim'"),
    ({"hidden_size": None}, "'hidden_size'"),
    ({"num_key_value_heads": 3}, "'num_key_value_heads'"),
    ({"vocab_size": "256"}, "'vocab_size'"),
    ({"sliding_window": 32, "use_sliding_window": True}, "'sliding_window'"),
])
def test_a_config_the_package_does_not_model_is_refused_naming_the_field(tmp_path, capsys, change, named):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**TINY, **change}.items() if v is not None}), encoding="utf-8")
    assert cli.main(["fit", str(path), *FIT]) == cli.BAD_INPUT
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and named in err and str(path) in err


@pytest.mark.parametrize("flags, named", [
    (["--target", "h1000"], "--target"),
    (["--target", "h100", "--devices", "2", "--mesh", "fsdp=3"], "--mesh"),
    (["--target", "h100", "--devices", "2", "--mesh", "pipeline=2"], "--mesh"),
    (["--target", "h100", "--devices", "2", "--global-batch", "3"], "--global-batch"),
    (["--target", "h100", "--policies", "full,sometimes"], "--policies"),
    (["--target", "h100", "--attention", "flash"], "--attention"),
    (["--target", "h100", "--seq", "0"], "--seq"),
    (["--target", "h100", "--budget", "-1"], "--budget"),
    (["--target", "h100", "--dtype", "f16"], "--dtype"),
    (["--target", "h100", "--batch", "1", "--global-batch", "2"], "--global-batch"),
])
def test_a_bad_flag_is_refused_in_one_line_naming_it(config, capsys, flags, named):
    assert cli.main(["fit", str(config), *flags]) == cli.BAD_INPUT
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and named in err and "Traceback" not in err


def test_bad_input_from_the_real_command_is_one_line_and_status_2(cache, tmp_path):
    broken = tmp_path / "config.json"
    broken.write_text("{not json", encoding="utf-8")
    for args in (["fit", broken, "--target", "h100"], ["fit", "llama3-8b", "--target", "h1000"],
                 ["compare", "no_such_module:measure", "--target", "h100"]):
        done = _run(cache, *args)
        assert done.returncode == cli.BAD_INPUT and not done.stdout
        assert done.stderr.startswith("remat-guide: error: ") and done.stderr.count("\n") == 1, done.stderr


def test_targets_lists_every_target_with_its_memory(cache):
    done = _run(cache, "targets", "--json")
    assert done.returncode == 0
    listed = json.loads(done.stdout)
    from remat_guide.targets import TARGETS

    assert [(t["name"], t["memory_bytes"]) for t in listed] == [(t.name, t.memory_bytes) for t in TARGETS.values()]
    assert all(t["bf16_flops"] > 0 and t["source"] for t in listed)
    assert all((t["host_bandwidth"] is None) == t["name"].startswith("tpu") for t in listed)


USER_MODULE = '''
import jax
import jax.numpy as jnp
from flax import nnx

LAYERS, WIDTH, HEADS, MLP, VOCAB, BATCH, SEQ = 2, 64, 4, 128, 256, 2, 32
BF16 = jnp.bfloat16


class Block(nnx.Module):
    def __init__(self, rngs):
        bf16 = dict(dtype=BF16, param_dtype=BF16, rngs=rngs)
        self.norm = nnx.RMSNorm(WIDTH, **bf16)
        self.up = nnx.Linear(WIDTH, MLP, use_bias=False, **bf16)
        self.down = nnx.Linear(MLP, WIDTH, use_bias=False, **bf16)

    def __call__(self, x):
        return x + self.down(jax.nn.gelu(self.up(self.norm(x))))


class Model(nnx.Module):
    def __init__(self, rngs):
        @nnx.split_rngs(splits=LAYERS)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make_blocks(rngs):
            return Block(rngs)

        self.embed = nnx.Embed(VOCAB, WIDTH, dtype=BF16, param_dtype=BF16, rngs=rngs)
        self.blocks = make_blocks(rngs)

    def __call__(self, tokens, policy=None):
        def step(x, block):
            return block(x)

        if policy is not None:
            step = nnx.remat(step, policy=policy, prevent_cse=False)
        x = nnx.scan(step, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(self.embed(tokens), self.blocks)
        return self.embed.attend(x)


def measure():
    graphdef, params = nnx.split(nnx.eval_shape(lambda: Model(nnx.Rngs(0))), nnx.Param)

    def loss_for(policy):
        def loss(params, tokens):
            logits = nnx.merge(graphdef, params)(tokens, policy).astype(jnp.float32)
            return jnp.mean(jax.nn.logsumexp(logits, axis=-1))
        return loss

    return loss_for, (params, jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32))
'''


def test_compare_runs_a_users_nnx_model_and_prints_compare_policies_table(cache, tmp_path, monkeypatch):
    (tmp_path / "my_model.py").write_text(textwrap.dedent(USER_MODULE), encoding="utf-8")
    policies = "nothing_saveable,dots_with_no_batch_dims_saveable"
    done = subprocess.run([sys.executable, "-m", "remat_guide", "compare", "my_model:measure", "--target", "h100",
                           "--policies", policies], capture_output=True, text=True, env=_env(cache, logged=True),
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    for name, value in _env(cache, logged=True).items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_model

    loss_for, args = my_model.measure()
    rows = compare_policies(loss_for, *args, target="h100", policies=policies.split(","))
    assert done.stdout.startswith(str(rows) + "\n")
    pick = recommend_policy(rows=rows, budget_bytes=cli.default_budget("h100"))
    assert f"Pick: {pick.name} (the least estimated step time of those that fit)." in done.stdout

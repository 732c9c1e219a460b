"""Whole training steps: their memory adds up to memory_analysis(), donation counts once, the fit tools."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from remat_guide import compare_policies, recommend_policy
from remat_guide._measure import refused_bytes
from remat_guide.fit import device_nbytes, largest_batch, recommend_batch, step_memory
from remat_guide.models import DECODER_NAMES, LLAMA3, MAXTEXT_PRESETS, decoder_args, decoder_loss, decoder_step
from remat_guide.planner import pick
from remat_guide.targets import target, target_devices, usable_bytes

SMALL = LLAMA3["8b"].smaller(layers=2, d_model=64, heads=4, kv_heads=2, mlp_dim=128, vocab=256)
NOTHING = ["nothing_saveable"]


def _tuple_table(params, opt_state):
    """XLA counts the output tuple's table of buffer pointers too: 8 bytes per output (the loss included)."""
    return 8 * (len(jax.tree.leaves((params, opt_state))) + 1)


def _step_for(config=SMALL):
    return functools.partial(decoder_step, config)


@functools.cache
def _step(policy):
    """SMALL's step under ``policy``, one function per policy: JAX traces a program that a search repeats once."""
    return decoder_step(SMALL, policy)


@pytest.fixture(scope="module")
def h100_rows():
    """SMALL's donated step at batch 2 and 16 tokens for an H100: no checkpoint, nothing_saveable, dots_saveable."""
    args = decoder_args(SMALL, batch=2, seq=16)
    return args, compare_policies(_step_for(), *args, step=True, target="h100",
                                  policies=["nothing_saveable", "dots_saveable"])


@pytest.mark.parametrize("target", [None, "h100"])
def test_a_donated_steps_arguments_outputs_and_aliases_add_up_to_memory_analysis(target, h100_rows):
    (params, opt_state, batch), rows = h100_rows
    if target is None:
        rows = compare_policies(_step_for(), params, opt_state, batch, step=True, policies=NOTHING)
    state = device_nbytes(params) + device_nbytes(opt_state)
    table = _tuple_table(params, opt_state)
    for row in rows:
        assert row.argument_bytes == state + device_nbytes(batch)
        assert row.alias_bytes == state  # the new parameters and state reuse the donated buffers
        assert row.output_bytes == state + 4 + table  # ... and the loss, a float32 scalar
        assert row.residual_bytes is None
    # Adam's two moments are float32 copies of the parameters, plus its step count.
    assert device_nbytes(opt_state) == 2 * device_nbytes(params) + 4


def test_a_step_without_donation_holds_its_outputs_beside_its_arguments(h100_rows):
    args, rows = h100_rows
    donated = rows[1]
    kept = compare_policies(_step_for(), *args, step=True, target="h100", policies=NOTHING, donate_argnums=())[1]
    assert kept.alias_bytes == 0 and kept.output_bytes == donated.output_bytes
    assert donated.device_bytes == (donated.argument_bytes + donated.temp_bytes
                                    + donated.output_bytes - donated.alias_bytes)
    # Counted once: the donated step's outputs add only the loss (and the tuple's table) to its arguments.
    assert donated.device_bytes - donated.temp_bytes == donated.argument_bytes + 4 + _tuple_table(*args[:2])
    assert kept.device_bytes - kept.temp_bytes == kept.argument_bytes + kept.output_bytes


def test_the_memory_breakdown_adds_up_to_the_rows_device_memory():
    args = decoder_args(SMALL, batch=2, seq=16)
    rows = compare_policies(_step_for(), *args, step=True, target="h100",
                            policies={"keep q": jax.checkpoint_policies.save_only_these_names("query_proj")})
    memory = step_memory(rows[1], decoder_loss(SMALL, rows[1].policy), *args)
    parts = dict((part, nbytes) for part, nbytes, _ in memory.parts)
    assert memory.total_bytes == rows[1].device_bytes
    assert parts["parameters"] == device_nbytes(args[0])
    assert parts["gradients"] == device_nbytes(args[0])
    # The kept projection, one per layer: (layers, batch, seq, heads, head_dim) in bfloat16.
    assert parts["residual query_proj"] == 2 * 2 * 16 * 4 * 16 * 2
    assert [name for name, layers, _ in memory.residuals if name == "query_proj"] == ["query_proj"]


def test_a_negative_rest_of_temp_says_why_and_the_parts_still_add_up(h100_rows):
    # Without a checkpoint, this small step's residuals and gradients add up to more than
    # XLA's temporary memory: it frees some values before it makes others.
    args, rows = h100_rows
    row = rows[0]
    memory = step_memory(row, decoder_loss(SMALL, row.policy), *args)
    (name, rest, _), = [part for part in memory.parts if part[0].startswith("rest of temp")]
    assert rest < 0 and name.startswith("rest of temp, negative: the parts are sizes, not lifetimes")
    assert memory.total_bytes == row.device_bytes
    assert f"{name}  " in str(memory)  # the table shows the name that says why


def test_an_offloaded_residual_is_listed_on_the_host_not_the_device():
    args = decoder_args(SMALL, batch=2, seq=16)
    policy = MAXTEXT_PRESETS["qkv_proj_offloaded"]
    rows = compare_policies(_step_for(), *args, step=True, target="h100", policies={"qkv off": policy})
    memory = step_memory(rows[1], decoder_loss(SMALL, policy), *args)
    assert {name for name, _, _ in memory.host_residuals} == {"query_proj", "key_proj", "value_proj"}
    assert not {"query_proj", "key_proj", "value_proj"} & {name for name, _, _ in memory.residuals}
    assert rows[1].host_bytes > 0


def test_recommend_policy_and_the_tables_take_step_rows(h100_rows):
    _, rows = h100_rows
    best = recommend_policy(rows=rows, budget_bytes=max(row.device_bytes for row in rows))
    assert best.step_seconds == min(row.step_seconds for row in rows)
    assert "residuals" not in rows.table().frame.columns


def test_a_step_that_ignores_no_policy_measures_each_policy_differently():
    args = decoder_args(SMALL, batch=2, seq=64)
    rows = compare_policies(_step_for(), *args, step=True, policies=["nothing_saveable", "dots_saveable"])
    by_name = {row.name: row for row in rows}
    assert by_name["nothing_saveable"].flops > by_name["dots_saveable"].flops


@pytest.mark.parametrize(("keywords", "error", "match"), [
    ({"donate_argnums": (0,)}, ValueError, "donate_argnums applies to a training step"),
    ({"step": True, "argnums": 1}, ValueError, "argnums applies to a loss"),
    ({"step": True, "has_aux": True}, ValueError, "has_aux applies to a loss"),
    ({"step": True, "donate_argnums": 3}, ValueError, "donate_argnums 3 is out of range"),
    ({"step": True, "donate_argnums": (0, 0)}, ValueError, "donate_argnums names an argument twice"),
    ({"step": True, "donate_argnums": "0"}, TypeError, "donate_argnums must be None"),
    ({"step": "yes"}, TypeError, "step must be"),
])
def test_bad_step_arguments_are_refused_by_name(keywords, error, match):
    args = decoder_args(SMALL, batch=2, seq=16)
    with pytest.raises(error, match=match):
        compare_policies(_step_for(), *args, policies=NOTHING, **keywords)


def test_a_step_for_that_returns_no_function_is_refused():
    with pytest.raises(TypeError, match="step_for\\(policy\\) must return a training step function"):
        compare_policies(lambda policy: 3, *decoder_args(SMALL, 2, 16), step=True, policies=NOTHING)


def test_a_program_the_tpu_compiler_refuses_is_a_row_that_does_not_fit():
    def loss_for(policy):
        def loss(w):
            return jnp.sum(jnp.tanh(w @ w))
        return loss if policy is None else jax.checkpoint(loss, policy=policy)

    w = jax.ShapeDtypeStruct((80_000, 80_000), jnp.float32)  # 25.6 GB, above a v5e chip's 16 GiB
    rows = compare_policies(loss_for, w, target="tpu-v5e", policies=NOTHING)
    assert all(row.refused and "RESOURCE_EXHAUSTED" in row.refused for row in rows)
    assert all(row.device_bytes > 16 * 2**30 for row in rows)
    assert "compiled" in rows.table().frame.columns
    with pytest.raises(ValueError, match="no policy fits"):
        recommend_policy(rows=rows, budget_bytes=16 * 2**30)


def test_refused_bytes_reads_both_forms_of_the_tpu_message():
    assert refused_bytes("RESOURCE_EXHAUSTED: x: the total memory required for HLO temporaries (1.50G) "
                         "exceeds available HBM (15.75G)") == round(1.5 * 2**30)
    assert refused_bytes("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory "
                         "space hbm. Used 215.17G of 31.25G hbm.") == round(215.17 * 2**30)
    assert refused_bytes("RESOURCE_EXHAUSTED: out of host memory") is None


def test_largest_batch_stops_at_a_batch_that_fits_next_to_one_that_does_not():
    policy = jax.checkpoint_policies.nothing_saveable
    budget = 3 * 2**21
    fit = largest_batch(_step, lambda b: decoder_args(SMALL, b, 64), policy=policy, budget_bytes=budget,
                        target="h100", multiple=2, step=True)
    compiled = dict(fit.compiled)
    assert fit.batch % 2 == 0 and compiled[fit.batch] <= budget < compiled[fit.batch + 2]
    assert fit.device_bytes == compiled[fit.batch]
    assert len(compiled) <= 8


def test_largest_batch_asks_step_for_for_its_step_once_and_traces_it_at_every_batch():
    asked = []

    def step_for(policy):
        asked.append(policy)
        return _step(policy)

    policy = jax.checkpoint_policies.nothing_saveable
    fit = largest_batch(step_for, lambda b: decoder_args(SMALL, b, 64), policy=policy, budget_bytes=3 * 2**21,
                        target="h100", multiple=2, step=True)
    assert asked == [policy] and len(fit.compiled) > 1


TWO = {"full": MAXTEXT_PRESETS["full"], "minimal": MAXTEXT_PRESETS["minimal"]}


def test_recommend_batch_picks_the_most_tokens_per_second_each_policy_at_its_largest_batch():
    budget = 3 * 2**21
    plan = recommend_batch(_step, lambda b: decoder_args(SMALL, b, 64), policies=TWO, target="h100",
                           tokens_per_example=64, budget_bytes=budget, multiple=2)
    assert [row.name for row in plan.rows] == ["no checkpoint", "full", "minimal"]
    for row in plan.rows:
        alone = largest_batch(_step, lambda b: decoder_args(SMALL, b, 64), policy=row.policy,
                              budget_bytes=budget, target="h100", multiple=2, step=True)
        assert (row.batch, row.device_bytes) == (alone.batch, alone.device_bytes) and row.fit == alone
        assert row.tokens_per_second == pytest.approx(row.batch * 64 / row.step_seconds)
    assert plan.pick.tokens_per_second == max(row.tokens_per_second for row in plan.rows)
    assert "tokens per second" in plan.basis
    frame = plan.to_pandas()
    assert list(frame["picked"]) == [row is plan.pick for row in plan.rows] and frame["picked"].sum() == 1


def test_recommend_batch_at_a_global_batch_picks_the_fastest_that_fits_it():
    args_for = functools.partial(decoder_args, SMALL, seq=64)
    plan = recommend_batch(_step, lambda b: args_for(b), policies=TWO, target="h100", tokens_per_example=64,
                           budget_bytes=3 * 2**21, global_batch=8, include_none=False)
    rows = compare_policies(_step_for(), *args_for(8), step=True, target="h100", policies=TWO)
    by_name = {row.name: row for row in rows}
    for row in plan.rows:
        fits = by_name[row.name].device_bytes <= 3 * 2**21
        assert row.batch == (8 if fits else 0) and row.fit is None
        assert row.device_bytes == by_name[row.name].device_bytes
    fitting = [row for row in plan.rows if row.batch]
    assert fitting and plan.pick.step_seconds == min(row.step_seconds for row in fitting)


def test_on_a_tpu_recommend_batch_shows_the_estimate_but_picks_the_largest_batch():
    plan = recommend_batch(_rows_loss_for, _rows, policies=NOTHING, target="tpu-v5e", tokens_per_example=1,
                           multiple=8, step=False, limit=512)
    assert all(row.step_seconds > 0 and row.tokens_per_second > 0 for row in plan.rows)
    alone = largest_batch(_rows_loss_for, _rows, policy=None, target="tpu-v5e", multiple=8, limit=512)
    assert plan.pick.batch == max(row.batch for row in plan.rows) == alone.batch > 0
    assert "not ranked on" in plan.basis


@pytest.mark.parametrize("keywords, error, match", [
    ({"tokens_per_example": 0}, ValueError, "tokens_per_example"),
    ({"tokens_per_example": 64, "global_batch": 3, "multiple": 2}, ValueError, "global_batch \\(3\\) must"),
    ({"tokens_per_example": 64, "include_none": "yes"}, TypeError, "include_none"),
    ({"tokens_per_example": 64, "target": None}, TypeError, "target must name an accelerator"),
])
def test_recommend_batch_refuses_bad_arguments_by_name(keywords, error, match):
    arguments = {"policies": TWO, "target": "h100", "budget_bytes": 2**20, **keywords}
    with pytest.raises(error, match=match):
        recommend_batch(_step_for(), lambda b: decoder_args(SMALL, b, 64), **arguments)


def test_largest_batch_is_zero_when_nothing_fits():
    fit = largest_batch(_step_for(), lambda b: decoder_args(SMALL, b, 16),
                        policy=jax.checkpoint_policies.nothing_saveable, budget_bytes=1024, target="h100",
                        step=True)
    assert fit.batch == 0 and fit.device_bytes > 1024


def test_largest_batch_needs_a_target():
    with pytest.raises(TypeError, match="target must name an accelerator"):
        largest_batch(_step_for(), lambda b: decoder_args(SMALL, b, 16), policy=None, budget_bytes=1,
                      target=None, step=True)


def _rows_loss_for(policy):
    """A loss whose program holds its argument, 64 MiB a row, and little else."""
    def loss(scale, x):
        return jnp.sum(jnp.tanh(x * scale) ** 2)
    return loss if policy is None else jax.checkpoint(loss, policy=policy)


def _rows(batch):
    return jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((batch, 2**24), jnp.float32)


def test_the_tpu_compilers_usable_hbm_is_below_the_chips_memory():
    usable = usable_bytes("tpu-v5e")
    assert usable == round(15.75 * 2**30) < target("tpu-v5e").memory_bytes
    assert usable_bytes(target("tpu-v5e")) == usable
    with pytest.raises(ValueError, match="name: h100 is a GPU"):
        usable_bytes("h100")


def test_a_refused_batch_never_fits_even_when_its_figure_is_within_the_budget():
    # Issue 49's case: on a TPU v5e, a refusal's figure (15.92G) under the chip's 16 GiB was
    # returned as fitting. Here the compiler pads the batch to tiles of 8 rows, so batches 249
    # to 256 all need 16.00 GiB: refused (it allows 15.75 GiB), yet within a 16 GiB budget.
    chip = target("tpu-v5e").memory_bytes
    fit = largest_batch(_rows_loss_for, _rows, policy=None, budget_bytes=chip, target="tpu-v5e", limit=512)
    compiled = dict(fit.compiled)
    assert any(compiled[batch] <= chip for batch in fit.refused)  # the old code's false fit was compiled
    assert fit.batch not in fit.refused and fit.batch + 1 in fit.refused
    assert compiled[fit.batch] <= usable_bytes("tpu-v5e") < compiled[fit.batch + 1] <= chip
    by_default = largest_batch(_rows_loss_for, _rows, policy=None, target="tpu-v5e", limit=512)
    assert by_default.budget_bytes == usable_bytes("tpu-v5e") and by_default.batch == fit.batch


def test_recommend_policy_and_the_planners_pick_never_take_a_refused_program():
    chip = target("tpu-v5e").memory_bytes
    rows = compare_policies(_rows_loss_for, *_rows(254), target="tpu-v5e", policies=NOTHING)
    assert all(row.refused and row.device_bytes <= chip for row in rows)
    with pytest.raises(ValueError, match="refused 2 of the 2 programs"):
        recommend_policy(rows=rows, budget_bytes=chip)
    with pytest.raises(ValueError, match="no policy fits budget_bytes=16911433728"):
        recommend_policy(rows=rows)  # the default budget: the compiler's usable HBM
    assert pick(rows, chip) is None
    with pytest.raises(TypeError, match="budget_bytes is required"):
        recommend_policy(rows=compare_policies(_rows_loss_for, *_rows(1), target="h100", policies=NOTHING))


def test_the_llama_configs_have_their_published_sizes():
    sizes = {key: (c.layers, c.d_model, c.heads, c.kv_heads, c.mlp_dim, c.vocab) for key, c in LLAMA3.items()}
    assert sizes == {"1b": (16, 2048, 32, 8, 8192, 128_256), "8b": (32, 4096, 32, 8, 14_336, 128_256),
                     "70b": (80, 8192, 64, 8, 28_672, 128_256)}
    for config in LLAMA3.values():
        params, _, _ = decoder_args(config, batch=1, seq=8)
        assert sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params)) == config.parameters
    assert "unembed" not in decoder_args(LLAMA3["1b"], 1, 8)[0]  # Llama 3.2 1B ties its embeddings


def test_every_tag_is_in_the_decoders_program():
    from remat_guide._validation import tagged_names

    params, _, batch = decoder_args(SMALL, batch=1, seq=8)
    jaxpr = jax.make_jaxpr(jax.grad(decoder_loss(SMALL, jax.checkpoint_policies.nothing_saveable)))(params, batch)
    assert set(tagged_names(jaxpr.jaxpr)) == set(DECODER_NAMES)


def test_fsdp_and_tensor_parallel_shardings_split_every_matrix():
    mesh = jax.sharding.Mesh(np.array(target_devices("h100", 8)).reshape(4, 2), ("fsdp", "tensor"))
    params, opt_state, batch = decoder_args(SMALL, batch=8, seq=16, mesh=mesh)
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        pieces = 8 if leaf.ndim > 2 or "embed" in jax.tree_util.keystr(path) else 1
        assert device_nbytes(leaf) * pieces == np.prod(leaf.shape) * 4, jax.tree_util.keystr(path)
    assert device_nbytes(opt_state) == 2 * device_nbytes(params) + 4
    assert batch["inputs"].sharding.shard_shape((8, 16)) == (2, 16)


def test_bad_decoder_arguments_are_refused_by_name():
    mesh = jax.sharding.Mesh(np.array(target_devices("h100", 8)).reshape(8, 1), ("fsdp", "tensor"))
    with pytest.raises(ValueError, match="batch\\['inputs'\\] of shape \\(3, 16\\) cannot be split"):
        decoder_args(SMALL, batch=3, seq=16, mesh=mesh)
    with pytest.raises(TypeError, match="param_dtype must be"):
        decoder_args(SMALL, batch=1, seq=16, param_dtype=jnp.int8)
    with pytest.raises(TypeError, match="config must be a DecoderConfig"):
        decoder_loss("8b", None)
    with pytest.raises(ValueError, match="heads \\(4\\) must be a multiple of kv_heads \\(3\\)"):
        SMALL.smaller(kv_heads=3)
    with pytest.raises(TypeError, match="optimizer must be an optax"):
        decoder_step(SMALL, None, optimizer=object())


def test_bfloat16_parameters_keep_float32_moments():
    params, opt_state, batch = decoder_args(SMALL, 2, 16, param_dtype=jnp.bfloat16)
    assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}
    assert {leaf.dtype for leaf in jax.tree.leaves(opt_state[0].mu)} == {jnp.dtype(jnp.float32)}
    new_params, new_state, _ = jax.eval_shape(decoder_step(SMALL, None), params, opt_state, batch)
    assert jax.tree.map(lambda a: a.dtype, new_params) == jax.tree.map(lambda a: a.dtype, params)
    assert jax.tree.map(lambda a: a.dtype, new_state) == jax.tree.map(lambda a: a.dtype, opt_state)


def test_the_step_trains():
    params_spec, _, _ = decoder_args(SMALL, 2, 16)
    # Drawn with NumPy: JAX would compile a program for each draw.
    rng = np.random.default_rng(0)
    params = jax.device_put(jax.tree_util.tree_map_with_path(
        lambda path, s: np.ones(s.shape, s.dtype) if "norm" in jax.tree_util.keystr(path)
        else (0.02 * rng.standard_normal(s.shape)).astype(s.dtype), params_spec))
    optimizer = optax.adamw(1e-2)
    state = optimizer.init(params)
    tokens = rng.integers(0, SMALL.vocab, (2, 16), dtype=np.int32)
    batch = {"inputs": tokens, "targets": np.roll(tokens, -1, axis=1)}
    # LLVM's optimizations shape only the machine code, not what the step computes.
    step = jax.jit(decoder_step(SMALL, jax.checkpoint_policies.nothing_saveable, optimizer=optimizer),
                   compiler_options={"xla_backend_optimization_level": 0})
    losses = []
    for _ in range(5):
        params, state, loss = step(params, state, batch)
        losses.append(float(loss))
    assert losses[-1] < losses[0]

"""compare_policies and recommend_policy on the reference models, measured by compilation."""

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

from remat_guide import checkpoint_dot_policy, compare_policies, count_flops, recommend_policy
from remat_guide.models import (
    TRANSFORMER_NAMES,
    exercise_args,
    exercise_loss,
    mlp_args,
    mlp_scan_loss,
    transformer_args,
    transformer_loss,
    transformer_matmul_flops,
)

P = jax.checkpoint_policies
CONFIG = dict(layers=3, batch=2, seq=32, d_model=64, heads=4, mlp_dim=256)


@pytest.fixture(scope="module")
def transformer_rows():
    policies = ["dots_with_no_batch_dims_saveable", "nothing_saveable"]
    rows = compare_policies(transformer_loss, *transformer_args(**CONFIG), policies=policies)
    return {row.name: row for row in rows}


def _tagged_loss_for(policy):
    def loss(x):
        a = checkpoint_name(jnp.sin(x), "first")
        b = checkpoint_name(jnp.sin(a) * a, "second")
        return jnp.sum(jnp.cos(b))

    return loss if policy is None else jax.checkpoint(loss, policy=policy)


def test_default_rows_are_baseline_standard_and_name_policies():
    rows = compare_policies(_tagged_loss_for, jnp.ones(8))
    assert [row.name for row in rows] == [
        "no checkpoint", "everything_saveable", "dots_saveable",
        "dots_with_no_batch_dims_saveable", "nothing_saveable",
        "save_only_these_names('first')", "save_only_these_names('second')",
        "save_only_these_names('first', 'second')"]
    assert rows[0].policy is None and rows[2].policy is P.dots_saveable
    residual = {row.name: row.residual_bytes for row in rows}
    assert residual["save_only_these_names('first')"] > residual["nothing_saveable"]


def test_transformer_tags_become_name_policies():
    rows = compare_policies(transformer_loss, *transformer_args(**CONFIG), policies=[])
    assert len(rows) == 1  # explicit policies: only the baseline is added
    from remat_guide._measure import check_inputs, default_policies, trace_baseline

    inputs = check_inputs(transformer_args(**CONFIG), 0)
    _, tags = trace_baseline(transformer_loss, inputs)  # what compare_policies reads
    labels = list(default_policies(tags))
    assert labels[4:] == [f"save_only_these_names({t!r})" for t in TRANSFORMER_NAMES] + [
        "save_only_these_names(" + ", ".join(repr(t) for t in TRANSFORMER_NAMES) + ")"]


def test_scanned_flops_count_every_layer(transformer_rows):
    baseline = transformer_rows["no checkpoint"]
    grad_matmuls = 3 * transformer_matmul_flops(**CONFIG)
    assert grad_matmuls <= baseline.flops <= 1.1 * grad_matmuls
    assert baseline.reported_flops < baseline.flops / 2
    assert baseline.flops_ratio == 1.0


def test_memory_order_on_a_scanned_model(transformer_rows):
    temp = {name: row.temp_bytes for name, row in transformer_rows.items()}
    assert temp["nothing_saveable"] < temp["dots_with_no_batch_dims_saveable"] < temp["no checkpoint"]
    residual = {name: row.residual_bytes for name, row in transformer_rows.items()}
    assert residual["nothing_saveable"] < residual["dots_with_no_batch_dims_saveable"]
    assert residual["dots_with_no_batch_dims_saveable"] < residual["no checkpoint"]


def test_recomputing_everything_costs_about_one_more_forward_pass(transformer_rows):
    ratio = transformer_rows["nothing_saveable"].flops_ratio
    assert 1.2 < ratio < 1.4  # 4 forward-pass equivalents instead of 3


N, D = 128, 64
# One elementwise pass over an (N, D) activation costs N * D FLOPs, one matmul 2 * N * D * D:
# a few recomputed elementwise passes stay far below one recomputed matmul.
ELEMENTWISE_PASSES = 8


def test_whole_function_checkpoint_recomputes_no_matmul_and_grows_no_memory_under_jit():
    rows = compare_policies(exercise_loss, *exercise_args(N, D), argnums=(0, 1, 2))
    assert all(row.temp_bytes <= rows[0].temp_bytes for row in rows)
    base = rows[0].flops
    assert all(0 <= row.flops - base <= ELEMENTWISE_PASSES * N * D for row in rows)
    assert len({row.residual_bytes for row in rows}) > 1  # the jaxpr-level residuals differ


def test_exercise_solution_recomputes_no_matmul():
    args = (jnp.ones((D, D)), jnp.ones((D, D)), jnp.ones((N, D)))

    def flops(f):
        return count_flops(jax.jit(jax.grad(f, argnums=(0, 1, 2))).lower(*args).compile()).total

    extra = flops(checkpoint_dot_policy) - flops(exercise_loss(None))
    assert 0 <= extra <= ELEMENTWISE_PASSES * N * D < 2 * N * D * D


def test_shape_dtype_structs_are_compiled_never_run():
    huge = mlp_args(layers=2, n=2**15, d=2**14)  # 2 GiB of activations per layer, never allocated
    rows = compare_policies(mlp_scan_loss, *huge, policies=["nothing_saveable"])
    assert [row.name for row in rows] == ["no checkpoint", "nothing_saveable"]
    assert rows[0].temp_bytes > 2**32


MLP = mlp_args(layers=6, n=64, d=32)
MLP_POLICIES = ["dots_with_no_batch_dims_saveable", "nothing_saveable"]


def test_policies_as_a_mapping_keep_their_labels_and_objects():
    # The programs of MLP's rows below: each is compiled once, then read from REMAT_GUIDE_CACHE_DIR.
    policy = P.save_from_both_policies(P.dots_saveable, P.nothing_saveable)
    rows = compare_policies(mlp_scan_loss, *MLP, policies={"mine": policy})
    assert [(row.name, row.policy) for row in rows] == [("no checkpoint", None), ("mine", policy)]


@pytest.fixture(scope="module")
def mlp_rows():
    return compare_policies(mlp_scan_loss, *MLP, policies=MLP_POLICIES)


def test_recommend_picks_the_fewest_flops_that_fit(mlp_rows):
    by_name = {row.name: row for row in mlp_rows}
    roomy = recommend_policy(mlp_scan_loss, *MLP, budget_bytes=by_name["no checkpoint"].temp_bytes,
                             policies=MLP_POLICIES)
    assert roomy.policy is None
    budget = by_name["dots_with_no_batch_dims_saveable"].temp_bytes
    tight = recommend_policy(mlp_scan_loss, *MLP, budget_bytes=budget, policies=MLP_POLICIES)
    fitting = [row for row in mlp_rows if row.temp_bytes <= budget]
    assert tight.temp_bytes <= budget
    assert all(tight.flops <= row.flops for row in fitting)
    assert tight.flops < by_name["nothing_saveable"].flops  # the cheaper of the two that fit


def test_recommend_names_the_smallest_memory_when_nothing_fits(mlp_rows):
    smallest = min(row.temp_bytes for row in mlp_rows)
    with pytest.raises(ValueError, match=f"the smallest temporary memory is {smallest} bytes"):
        recommend_policy(mlp_scan_loss, *MLP, budget_bytes=smallest - 1, policies=MLP_POLICIES)


@pytest.mark.parametrize(("budget", "error", "message"), [
    (1.5e6, TypeError, "budget_bytes must be an int, got float"),
    (True, TypeError, "budget_bytes must be an int, got bool"),
    (0, ValueError, "budget_bytes must be positive, got 0"),
])
def test_recommend_rejects_bad_budgets(budget, error, message):
    with pytest.raises(error, match=message):
        recommend_policy(mlp_scan_loss, *mlp_args(2, 4, 4), budget_bytes=budget)


@pytest.mark.parametrize(("policies", "error", "message"), [
    (["dots_savable"], ValueError, "unknown policy name 'dots_savable'"),
    (["save_only_these_names"], ValueError, "'save_only_these_names' needs arguments"),
    ("nothing_saveable", TypeError, "policies must be None, a sequence .* got str"),
    ({"x": "nothing_saveable"}, TypeError, r"policies\['x'\] must be a jax.checkpoint policy"),
    ({"no checkpoint": P.nothing_saveable}, ValueError, "is the baseline row"),
])
def test_rejects_bad_policies(policies, error, message):
    with pytest.raises(error, match=message):
        compare_policies(mlp_scan_loss, *mlp_args(2, 4, 4), policies=policies)


def test_rejects_bad_loss_for():
    with pytest.raises(TypeError, match="loss_for must be callable, got str"):
        compare_policies("mlp", *mlp_args(2, 4, 4))
    with pytest.raises(TypeError, match="must return a loss function, got int"):
        compare_policies(lambda policy: 3, jnp.ones(3), policies=[])
    with pytest.raises(ValueError, match=r"scalar output, got shape \(3,\)"):
        compare_policies(lambda policy: jnp.sin, jnp.ones(3), policies=[])

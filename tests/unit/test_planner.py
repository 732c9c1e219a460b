"""plan_names on the reference transformer: never worse than a standard policy, always within budget."""

import itertools

import jax
import pytest

from remat_guide import compare_policies, plan_names
from remat_guide._labels import names_label as _label
from remat_guide.compare import STANDARD_POLICIES
from remat_guide.models import TRANSFORMER_NAMES, transformer_args, transformer_loss

CONFIG = dict(layers=2, batch=1, seq=16, d_model=32, heads=2, mlp_dim=64)
ARGS = transformer_args(**CONFIG)


@pytest.fixture(scope="module")
def sweep():
    """plan_names for a sweep of budgets, loosest first, sharing one measured dict."""
    standard = {row.name: row for row in compare_policies(
        transformer_loss, *ARGS, policies=list(STANDARD_POLICIES))}
    measured = dict(standard)  # rows of compare_policies for the same model are reused
    low = standard["nothing_saveable"].temp_bytes
    mid = standard["dots_with_no_batch_dims_saveable"].temp_bytes
    high = standard["no checkpoint"].temp_bytes
    budgets = [high, (mid + high) // 2, mid, (low + mid) // 2, low]
    chosen = {budget: plan_names(transformer_loss, *ARGS, budget_bytes=budget, measured=measured)
              for budget in budgets}
    # Every subset of the names, compiled, to check the planner against all of them.
    missing = {}
    for size in range(1, len(TRANSFORMER_NAMES) + 1):
        for subset in itertools.combinations(TRANSFORMER_NAMES, size):
            if _label(subset) not in measured:
                missing[_label(subset)] = jax.checkpoint_policies.save_only_these_names(*subset)
    if missing:
        for row in compare_policies(transformer_loss, *ARGS, policies=missing)[1:]:
            measured[row.name] = row
    return standard, chosen, measured


def test_every_budget_fits_and_beats_the_best_standard_policy(sweep):
    standard, chosen, _ = sweep
    for budget, row in chosen.items():
        assert row.temp_bytes <= budget, (budget, row)
        fitting = [s for s in standard.values() if s.temp_bytes <= budget]
        assert fitting, budget
        assert row.flops <= min(s.flops for s in fitting), (budget, row)


def test_the_choice_is_the_cheapest_fitting_set_of_all(sweep):
    _, chosen, measured = sweep
    rows = [row for key, row in measured.items() if isinstance(key, str)]
    sets = [row for row in rows if row.name.startswith("save_only_these_names(")]
    assert len(sets) == 2 ** len(TRANSFORMER_NAMES) - 1  # every non-empty subset
    for budget, row in chosen.items():
        assert row.flops == min(r.flops for r in rows if r.temp_bytes <= budget), budget


def test_a_tight_budget_is_met_by_a_set_of_names_a_loose_one_by_no_checkpoint(sweep):
    standard, chosen, _ = sweep
    budgets = sorted(chosen)
    assert chosen[budgets[-1]].name == "no checkpoint" and chosen[budgets[-1]].policy is None
    tight = chosen[budgets[0]]
    assert tight.name.startswith("save_only_these_names(")
    assert tight.flops < standard["nothing_saveable"].flops
    names = [n for n in TRANSFORMER_NAMES if repr(n) in tight.name]
    assert tight.name == _label(names)
    same = jax.checkpoint_policies.save_only_these_names(*names)
    assert tight.policy is not None and type(tight.policy) is type(same)


def test_compile_counts(sweep):
    _, chosen, _ = sweep
    counts = [row.compiled for row in chosen.values()]
    # The standard rows were given; the first call compiles each name alone, then the set
    # of all names, which fits the loosest budget. No set is compiled twice.
    assert counts[0] == len(TRANSFORMER_NAMES) + 1
    assert sum(counts) <= 2 ** len(TRANSFORMER_NAMES) - 1
    budget = min(chosen)
    again = plan_names(transformer_loss, *ARGS, budget_bytes=budget, measured=sweep[2])
    assert again.compiled == 0 and again.name == chosen[budget].name


def test_names_restrict_the_choice(sweep):
    standard, _, measured = sweep
    budget = standard["nothing_saveable"].temp_bytes
    row = plan_names(transformer_loss, *ARGS, budget_bytes=budget,
                     names=["attn_out", "mlp_hidden"], measured=measured)
    assert row.temp_bytes <= budget
    assert "query_proj" not in row.name and row.compiled == 0


def test_nothing_fits_names_the_smallest_memory(sweep):
    standard, _, measured = sweep
    smallest = min(row.temp_bytes for key, row in measured.items() if isinstance(key, str))
    with pytest.raises(ValueError, match=f"smallest temporary memory reached is {smallest} bytes"):
        plan_names(transformer_loss, *ARGS, budget_bytes=smallest - 1, measured=measured)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(budget_bytes=1.5), TypeError, "budget_bytes must be an int, got float"),
    (dict(budget_bytes=0), ValueError, "budget_bytes must be positive"),
    (dict(budget_bytes=10, names="mlp_hidden"), TypeError, "names must be None or an iterable"),
    (dict(budget_bytes=10, names=[]), ValueError, "names must not be empty"),
    (dict(budget_bytes=10, names=["mlp_hidden", "mlp_hidden"]), ValueError, "must not repeat"),
    (dict(budget_bytes=10, names=["mlp_in"]), ValueError, r"\['mlp_in'\] are not tagged"),
    (dict(budget_bytes=10, measured=[]), TypeError, "measured must be None or a dict, got list"),
])
def test_arguments_are_checked(kwargs, error, message):
    with pytest.raises(error, match=message):
        plan_names(transformer_loss, *ARGS, **kwargs)


def test_a_measured_dict_belongs_to_one_model(sweep):
    measured = sweep[2]
    other = transformer_args(**{**CONFIG, "seq": 8})
    with pytest.raises(ValueError, match="measured holds rows of another"):
        plan_names(transformer_loss, *other, budget_bytes=10, measured=measured)


def test_loss_for_must_be_callable():
    with pytest.raises(TypeError, match="loss_for must be callable"):
        plan_names("transformer", *ARGS, budget_bytes=10)

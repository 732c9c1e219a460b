"""plan_names: keep, offload or recompute each name; the answer of compiling every plan, in fewer compiles.

The CPU part plans the reference transformer's five names (keep or recompute: this
machine has no host memory to offload to) and checks every budget against all 32 sets.
The target part plans three names of a scanned MLP for a TPU v5e and for an H100, three
answers each, and checks every budget of a dense sweep, with and without a host budget,
against all 27 plans compiled for the same target.
"""

import contextlib
import itertools
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

import remat_guide.compare
import remat_guide.planner
from helpers import scanned_loss_for
from remat_guide import compare_policies, plan_names
from remat_guide.compare import STANDARD_POLICIES
from remat_guide.models import TRANSFORMER_NAMES, mlp_args, transformer_args, transformer_loss
from remat_guide.planner import KEEP, OFFLOAD, RECOMPUTE, NamePlan, cost, pick, plan_label, plan_policy

CONFIG = dict(layers=2, batch=1, seq=16, d_model=32, heads=2, mlp_dim=64)
ARGS = transformer_args(**CONFIG)
TOLERANCE = 5e-3


def equally_good(row, other):
    """The same row, or one that ties with it on every figure of the objective."""
    return row.name == other.name or (
        row.host_bytes == other.host_bytes and row.device_bytes == other.device_bytes
        and abs(cost(row) - cost(other)) <= TOLERANCE * min(cost(row), cost(other)))


def least_cost_fitting(rows, budget, host_budget=None):
    """The least cost (estimated time on a GPU, FLOPs elsewhere) of the rows that fit, within the tolerance."""
    fitting = [row for row in rows if row.device_bytes <= budget
               and (host_budget is None or row.host_bytes <= host_budget)]
    return min(cost(row) for row in fitting) * (1 + TOLERANCE)


@pytest.fixture(scope="module", autouse=True)
def traced_once():
    """Each program of this module traced and measured once, by plan_names or compare_policies.

    A fresh measured dict still makes the search compile, and count, each plan it needs;
    the program and its figures are those of the first time, as the cache folder gives them.
    """
    programs, figures = {}, {}

    def once(label, loss_for, inputs, trace):
        # The model is kept with its program: its repr names its address, which no other may take.
        key = (label, repr(remat_guide.planner._fingerprint(loss_for, inputs)))
        if key not in programs:
            programs[key] = trace(), loss_for
        return programs[key][0]

    def baseline(loss_for, inputs):
        return once(None, loss_for, inputs, lambda: trace_baseline(loss_for, inputs))

    def policy(loss_for, label, policy, inputs, tags):
        return once(label, loss_for, inputs, lambda: trace_policy(loss_for, label, policy, inputs, tags))

    def measured(batch, inputs):
        new = [program for program in batch if id(program) not in figures]
        for program, result in zip(new, measure(new, inputs)):
            figures[id(program)] = program, result
        return [figures[id(program)][1] for program in batch]

    trace_baseline, trace_policy, measure = (
        remat_guide.planner.trace_baseline, remat_guide.planner.trace_policy, remat_guide.planner.measure)
    with pytest.MonkeyPatch.context() as patch:
        for module in (remat_guide.planner, remat_guide.compare):
            patch.setattr(module, "trace_baseline", baseline)
            patch.setattr(module, "trace_policy", policy)
            patch.setattr(module, "measure", measured)
        yield


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
    compiled_by_sweep = sum(1 for key in measured if isinstance(key, str)) - len(standard)
    # Every subset of the names, compiled, to check the planner against all of them.
    missing = {}
    for size in range(1, len(TRANSFORMER_NAMES) + 1):
        for subset in itertools.combinations(TRANSFORMER_NAMES, size):
            if plan_label(subset) not in measured:
                missing[plan_label(subset)] = jax.checkpoint_policies.save_only_these_names(*subset)
    if missing:
        for row in compare_policies(transformer_loss, *ARGS, policies=missing)[1:]:
            measured[row.name] = row
    return standard, chosen, measured, compiled_by_sweep


def test_every_budget_fits_and_beats_the_best_standard_policy(sweep):
    standard, chosen, _, _ = sweep
    for budget, row in chosen.items():
        assert row.temp_bytes <= budget, (budget, row)
        assert cost(row) <= least_cost_fitting(standard.values(), budget), (budget, row)


def test_the_choice_is_that_of_compiling_every_set(sweep):
    _, chosen, measured, _ = sweep
    rows = [row for key, row in measured.items() if isinstance(key, str)]
    sets = [row for row in rows if row.name.startswith("save_only_these_names(")]
    assert len(sets) == 2 ** len(TRANSFORMER_NAMES) - 1  # every non-empty subset
    for budget, row in chosen.items():
        assert equally_good(row, pick(rows, budget)), budget
        assert cost(row) <= least_cost_fitting(rows, budget), budget


def test_a_tight_budget_is_met_by_a_set_of_names_a_loose_one_by_no_checkpoint(sweep):
    standard, chosen, _, _ = sweep
    budgets = sorted(chosen)
    loose, tight = chosen[budgets[-1]], chosen[budgets[0]]
    assert loose.name == "no checkpoint" and loose.policy is None and loose.choices == {}
    assert isinstance(tight, NamePlan) and tight.name.startswith("save_only_these_names(")
    assert tight.flops < standard["nothing_saveable"].flops
    assert list(tight.choices) == list(TRANSFORMER_NAMES)
    assert set(tight.choices.values()) <= {KEEP, RECOMPUTE} and tight.offloaded == ()
    assert tight.name == plan_label(tight.kept)
    same = jax.checkpoint_policies.save_only_these_names(*tight.kept)
    assert tight.policy is not None and type(tight.policy) is type(same)


def test_compile_counts(sweep):
    _, chosen, measured, compiled_by_sweep = sweep
    counts = [row.compiled for row in chosen.values()]
    # The standard rows were given; the first call compiles each name kept alone and all
    # names kept, and the baseline fits the loosest budget. Later budgets share them.
    assert counts[0] == len(TRANSFORMER_NAMES) + 1
    assert sum(counts) == compiled_by_sweep < 2 ** len(TRANSFORMER_NAMES) - 1
    assert all(f"of {2 ** len(TRANSFORMER_NAMES)} plans compiled" in row.search for row in chosen.values())
    budget = min(chosen)
    again = plan_names(transformer_loss, *ARGS, budget_bytes=budget, measured=measured)
    assert again.compiled == 0 and again.name == chosen[budget].name


def test_names_restrict_the_choice(sweep):
    standard, _, measured, _ = sweep
    budget = standard["nothing_saveable"].temp_bytes
    row = plan_names(transformer_loss, *ARGS, budget_bytes=budget,
                     names=["attn_out", "mlp_hidden"], measured=measured)
    assert row.temp_bytes <= budget
    assert "query_proj" not in row.name and row.compiled == 0
    assert set(row.choices) <= {"attn_out", "mlp_hidden"}


def test_nothing_fits_names_the_smallest_memory(sweep):
    _, _, measured, _ = sweep
    smallest = min(row.temp_bytes for key, row in measured.items() if isinstance(key, str))
    with pytest.raises(ValueError, match=f"smallest temporary memory reached is {smallest} bytes"):
        plan_names(transformer_loss, *ARGS, budget_bytes=smallest - 1, measured=measured)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(budget_bytes=1.5), TypeError, "budget_bytes must be an int, got float"),
    (dict(budget_bytes=0), ValueError, "budget_bytes must be positive"),
    (dict(budget_bytes=10, host_budget_bytes=-1), ValueError, "host_budget_bytes must be at least 0"),
    (dict(budget_bytes=10, host_budget_bytes="1"), TypeError, "host_budget_bytes must be an int"),
    (dict(budget_bytes=10, offload=True), ValueError, "offload=True needs a target"),
    (dict(budget_bytes=10, offload=1), TypeError, "offload must be True or False"),
    (dict(budget_bytes=10, exact="yes"), TypeError, "exact must be True or False"),
    (dict(budget_bytes=10, flops_tolerance=1.0), ValueError, "flops_tolerance must be at least 0"),
    (dict(budget_bytes=10, flops_tolerance="0"), TypeError, "flops_tolerance must be a number"),
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


# The target part: three names, three answers each, on a TPU v5e and an H100 compiled ahead
# of time (XLA's TPU compiler and its GPU compiler: two different memory planners).
TARGETS = ("tpu-v5e", "h100")
NAMES = ("up", "act", "down")
# d = 128: XLA's TPU layouts tile the last dimension by 128 lanes, so host bytes are nbytes.
MLP = mlp_args(layers=3, n=32, d=128)


def three_layer(x, w):
    """A scanned MLP layer that tags three values: up, act and down."""
    up = checkpoint_name(x @ w["w_in"], "up")
    act = checkpoint_name(jnp.sin(up) * up, "act")
    return jnp.tanh(checkpoint_name(act @ w["w_out"], "down"))


three_names_loss_for = scanned_loss_for(three_layer)


def every_plan():
    """Every plan of the three names, as (choices, label, policy); all recompute is nothing_saveable."""
    for answers in itertools.product((KEEP, OFFLOAD, RECOMPUTE), repeat=len(NAMES)):
        keep = [n for n, a in zip(NAMES, answers) if a == KEEP]
        offload = [n for n, a in zip(NAMES, answers) if a == OFFLOAD]
        if keep or offload:
            yield dict(zip(NAMES, answers)), plan_label(keep, offload), plan_policy(keep, offload)


@pytest.fixture(scope="module", params=TARGETS)
def three_answers(request):
    """Dense sweeps planned on a target, then every plan compiled for it to check them."""
    target = request.param
    measured = {}
    first = plan_names(three_names_loss_for, *MLP, budget_bytes=2**40, measured=measured, target=target)
    missing = {label: policy for _, label, policy in every_plan() if label not in measured}
    rows = {row.name: row for row in compare_policies(three_names_loss_for, *MLP, policies=missing,
                                                      target=target)}
    table = {**{k: v for k, v in measured.items() if isinstance(k, str)}, **rows}
    assert len(table) == 27 + len(STANDARD_POLICIES)  # 26 plans, nothing_saveable, 4 more rows
    budgets = sorted({row.device_bytes for row in table.values()})
    budgets += [(a + b) // 2 for a, b in zip(budgets, budgets[1:])]
    hosts = sorted({row.host_bytes for row in table.values()})
    sweeps = {}
    for host_budget in [None, *hosts[:-1]]:
        shared = {}
        plans = {}
        for budget in sorted(budgets):
            if budget < min(row.device_bytes for row in table.values()
                            if host_budget is None or row.host_bytes <= host_budget):
                continue
            plans[budget] = plan_names(three_names_loss_for, *MLP, budget_bytes=budget,
                                       host_budget_bytes=host_budget, measured=shared, target=target)
        sweeps[host_budget] = (plans, sum(1 for k in shared if isinstance(k, str)))
    shared = {}
    exact = {budget: plan_names(three_names_loss_for, *MLP, budget_bytes=budget, measured=shared,
                                target=target, exact=True)
             for budget in sorted(budgets)}
    sweeps["exact"] = (exact, sum(1 for k in shared if isinstance(k, str)))
    return first, table, sweeps


def test_every_budget_gets_the_answer_of_compiling_all_27_plans(three_answers):
    _, table, sweeps = three_answers
    checked = 0
    for host_budget, (plans, _) in sweeps.items():
        if host_budget == "exact":
            continue
        for budget, row in plans.items():
            truth = pick(table.values(), budget, host_budget)
            assert equally_good(row, truth), (budget, host_budget, row.name, truth.name)
            assert row.device_bytes <= budget and (host_budget is None or row.host_bytes <= host_budget)
            assert cost(row) <= least_cost_fitting(table.values(), budget, host_budget)
            checked += 1
    assert checked >= 20


def test_exact_gets_the_answer_of_compiling_all_27_plans_in_fewer(three_answers):
    _, table, sweeps = three_answers
    plans, compiled = sweeps["exact"]
    for budget, row in plans.items():
        truth = pick(table.values(), budget)
        assert equally_good(row, truth), (budget, row.name, truth.name)
        assert "(exact)" in row.search
    assert len(plans) >= 10
    assert compiled == sum(row.compiled for row in plans.values()) < len(table)


def test_offloading_wins_where_keeping_does_not_fit(three_answers):
    _, table, sweeps = three_answers
    plans, _ = sweeps[None]
    offloading = [row for row in plans.values() if row.offloaded]
    assert offloading  # some budget is met best by offloading
    for budget, row in plans.items():
        if row.offloaded:
            # Every plan that keeps or recomputes only, and every standard row, that fits
            # takes more FLOPs.
            others = [r for r in table.values() if r.host_bytes == 0 and r.device_bytes <= budget]
            assert all(r.flops > row.flops * (1 + TOLERANCE) for r in others), budget
            assert row.host_bytes > 0 and row.policy is not None
            assert row.name == plan_label(row.kept, row.offloaded)


def test_a_host_budget_of_zero_forbids_offloading(three_answers):
    _, _, sweeps = three_answers
    plans, _ = sweeps[0]
    assert plans and all(row.host_bytes == 0 and not row.offloaded for row in plans.values())


def test_the_sweeps_compile_fewer_plans_than_all(three_answers):
    first, table, sweeps = three_answers
    # Baseline, 4 standard policies, each name kept alone and offloaded alone, all names
    # kept and all offloaded; then what could still beat the best of them.
    assert 1 + len(STANDARD_POLICIES) + 2 * len(NAMES) + 2 <= first.compiled < len(table)
    assert first.flops <= table["no checkpoint"].flops * (1 + TOLERANCE)
    for host_budget, (plans, compiled) in sweeps.items():
        assert compiled == sum(row.compiled for row in plans.values())
        assert compiled < len(table), (host_budget, compiled)


def additive_figures(label):
    """Figures that the single names' effects predict exactly: (FLOPs, device bytes, host bytes).

    Recomputing everything: 2000 FLOPs, 100 bytes. Keeping a name saves 300 FLOPs and adds
    30 device bytes; offloading it saves 301 FLOPs (within the tolerance of keeping) and
    adds 1 device byte and 30 host bytes.
    """
    fixed = {"no checkpoint": (1000, 400, 0), "everything_saveable": (1004, 400, 0),
             "dots_saveable": (1010, 380, 0), "dots_with_no_batch_dims_saveable": (1020, 370, 0),
             "nothing_saveable": (2000, 100, 0)}
    if label in fixed:
        return fixed[label]
    choices = next(choices for choices, name, _ in every_plan() if name == label)
    kept = sum(answer == KEEP for answer in choices.values())
    offloaded = sum(answer == OFFLOAD for answer in choices.values())
    return 2000 - 300 * kept - 301 * offloaded, 100 + 30 * kept + offloaded, 30 * offloaded


def test_when_the_predictions_hold_the_search_compiles_only_the_answer(monkeypatch):
    compiled = []

    def answered(programs, inputs):
        compiled.extend(program.label for program in programs)
        return [SimpleNamespace(residual_bytes=0, temp_bytes=device, flops=flops, reported_flops=flops,
                                peak_bytes=device, host_bytes=host, argument_bytes=0,
                                output_bytes=0, alias_bytes=0, step_seconds=None, refused=None,
                                collective_seconds=None)
                for flops, device, host in map(additive_figures, (p.label for p in programs))]

    monkeypatch.setattr(remat_guide.planner, "measure", answered)
    row = plan_names(three_names_loss_for, *MLP, budget_bytes=165, measured={}, target="tpu-v5e")
    # Every name saved is within the FLOPs tolerance whether kept or offloaded; of those
    # plans, keeping all three does not fit (190 bytes), and keeping two while offloading
    # one fits with the fewest host bytes. The search's first plan is that one, and the
    # plans with slightly fewer FLOPs but more host bytes are never compiled.
    assert sorted(row.choices.values()) == [KEEP, KEEP, OFFLOAD]
    assert (row.device_bytes, row.host_bytes) == (161, 30)
    fixed = 1 + len(STANDARD_POLICIES) + 2 * len(NAMES) + 2  # baseline, standard, single, every
    assert row.compiled == len(compiled) == fixed + 1, compiled[fixed:]
    assert "widened" not in row.search


def test_exact_finds_a_plan_that_fits_far_below_its_prediction(monkeypatch):
    # As on XLA's TPU compiler for the reference transformer: offloading two names plans a
    # peak below recomputing everything, though each offloaded alone adds to it.
    def quirky(label):
        flops, device, host = additive_figures(label)
        return (flops, 90, host) if label == plan_label([], ["up", "act"]) else (flops, device, host)

    def answered(programs, inputs):
        return [SimpleNamespace(residual_bytes=0, temp_bytes=device, flops=flops, reported_flops=flops,
                                peak_bytes=device, host_bytes=host, argument_bytes=0,
                                output_bytes=0, alias_bytes=0, step_seconds=None, refused=None,
                                collective_seconds=None)
                for flops, device, host in map(quirky, (p.label for p in programs))]

    monkeypatch.setattr(remat_guide.planner, "measure", answered)
    every = {"no checkpoint": quirky("no checkpoint"), **{name: quirky(name) for name in STANDARD_POLICIES}}
    every |= {label: quirky(label) for _, label, _ in every_plan()}
    rows = [SimpleNamespace(name=name, flops=f, device_bytes=d, host_bytes=h, step_seconds=None, refused=None)
            for name, (f, d, h) in every.items()]
    odd = plan_label([], ["up", "act"])
    # At 95 bytes only that plan fits; at 101 the single offloads fit too, with more FLOPs.
    for budget in (95, 101):
        assert pick(rows, budget).name == odd
        with pytest.raises(ValueError) if budget == 95 else contextlib.nullcontext():
            quick = plan_names(three_names_loss_for, *MLP, budget_bytes=budget, measured={}, target="tpu-v5e")
            assert quick.name != odd and quick.flops > every[odd][0]
        exact = plan_names(three_names_loss_for, *MLP, budget_bytes=budget, measured={}, target="tpu-v5e",
                           exact=True)
        assert exact.name == odd and exact.device_bytes == 90
    with pytest.raises(ValueError, match=r"were not compiled, their predictions over the budget: exact=True"):
        plan_names(three_names_loss_for, *MLP, budget_bytes=95, measured={}, target="tpu-v5e")
    # Nothing fits: exact compiles every plan (the baseline, 4 standard policies, 26 more) first.
    with pytest.raises(ValueError, match=r"\(31 policies compiled\)$"):
        plan_names(three_names_loss_for, *MLP, budget_bytes=89, measured={}, target="tpu-v5e", exact=True)
    # With no host memory, only the plans that offload nothing could fit, and host bytes add
    # up name by name: exact compiles the 16 programs with the plans that keep or recompute.
    with pytest.raises(ValueError, match=r"\(16 policies compiled\); 15 of the 27 plans were not compiled, "
                                         r"their predicted host bytes over the host budget$"):
        plan_names(three_names_loss_for, *MLP, budget_bytes=95, host_budget_bytes=0, measured={},
                   target="tpu-v5e", exact=True)

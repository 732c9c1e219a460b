"""The shared policy model: each kind of value is classified, kept, offloaded or not as JAX decides."""

import jax
import numpy as np
import pytest

from remat_guide import Residual, policy_label, saved_residuals
from remat_guide.site.policy_matrix import (
    COLUMNS,
    LINK_CLASS,
    classify,
    example_inputs,
    example_model,
    example_policies,
    keeps,
    matrix_table,
)

P = jax.checkpoint_policies


def test_every_kind_of_value_appears_under_some_policy():
    seen = set()
    for policy in [None, *example_policies().values()]:
        seen |= {classify(r) for r in keeps(policy)[0]}
    seen |= {classify(r) for r in keeps(None, checkpointed=False)[0]}
    assert seen == set(COLUMNS)


def test_batched_and_unbatched_products_are_told_apart():
    residuals, row = keeps(P.dots_saveable)
    products = sorted(r.shape for r in residuals if r.name == "dot_general")
    assert len(products) == 2
    assert row["matmul"] == row["batched matmul"] == row["convolution"] == "saved"
    assert keeps(P.dots_with_no_batch_dims_saveable)[1]["batched matmul"] == "not kept"


def test_offloaded_values_are_reported_in_host_memory():
    residuals, row = keeps(example_policies()["save_and_offload_only_these_names"])
    by_name = {r.name: r for r in residuals if r.kind == "named"}
    assert by_name["'proj'"].memory == "host" and by_name["'act'"].memory == "device"
    assert by_name["'proj'"].type_str.startswith("f32<host>[")
    assert row["named 'proj'"] == "offloaded" and row["named 'act'"] == "saved"


def test_no_checkpoint_keeps_what_everything_saveable_keeps():
    assert keeps(None, checkpointed=False)[0] == keeps(P.everything_saveable)[0]
    assert keeps(None, checkpointed=False)[0] == saved_residuals(example_model, *example_inputs())


def test_names_are_found_under_the_remat3_flag():
    jax.config.update("jax_remat3", True)
    try:
        residuals, row = keeps(P.save_only_these_names("act"))
    finally:
        jax.config.update("jax_remat3", False)
    assert [r.name for r in residuals if r.kind == "named"] == ["'act'"]
    # Arguments are named by the model's parameters under the flag too, as without it.
    assert [r.name for r in residuals if r.kind == "argument"] == ["w", "kernel", "x"]
    assert residuals == keeps(P.save_only_these_names("act"))[0]
    assert row["named 'act'"] == "saved" and row["other intermediates"] == "not kept"


def test_an_always_true_policy_differs_from_everything_saveable_only_under_remat3():
    always = example_policies()["save_anything_except_these_names"]
    assert keeps(always)[0] == keeps(P.everything_saveable)[0]
    jax.config.update("jax_remat3", True)
    try:
        flagged, flagged_row = keeps(always)
        everything = keeps(P.everything_saveable)[0]
    finally:
        jax.config.update("jax_remat3", False)
    assert everything == keeps(P.everything_saveable)[0]
    assert flagged != everything
    assert flagged_row["named 'act'"] == "saved" and flagged_row["other intermediates"] == "not kept"


def test_policy_labels_are_deterministic_names():
    labels = {name: policy_label(policy) for name, policy in example_policies().items()}
    assert labels["checkpoint_dots"] == labels["dots_saveable"] == "dots_saveable / checkpoint_dots"
    assert labels["everything_saveable"] == "everything_saveable"
    assert labels["save_anything_except_these_names"] == "save_anything_except_these_names(...)"
    assert labels["save_and_offload_only_these_names"] == "save_and_offload_only_these_names(...)"
    assert not any("0x" in label or "<" in label for label in labels.values())
    with pytest.raises(TypeError, match="policy must be callable, got str"):
        policy_label("dots_saveable")


def test_example_policies_cover_the_namespace_and_aliases_share_rows():
    policies = example_policies()
    assert set(policies) == set(vars(P))
    assert keeps(policies["checkpoint_dots"])[1] == keeps(policies["dots_saveable"])[1]


@pytest.mark.parametrize("kind, name, shape, column", [
    ("argument", "x", (2,), "inputs"),
    ("named", "'act'", (2,), "named 'act'"),
    ("primitive", "dot_general", (2, 2), "matmul"),
    ("primitive", "conv_general_dilated", (1, 1, 2, 2), "convolution"),
    ("primitive", "tanh", (2,), "other intermediates"),
])
def test_classify(kind, name, shape, column):
    assert classify(Residual(shape, np.dtype("float32"), kind, name)) == column


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="residual must be"):
        classify("dot_general")
    with pytest.raises(TypeError, match="policy must be callable"):
        keeps("dots_saveable")
    with pytest.raises(ValueError, match="policy must be None"):
        keeps(P.dots_saveable, checkpointed=False)
    with pytest.raises(ValueError, match=r"rows\['p'\] lacks"):
        matrix_table({"p": {"inputs": "saved"}}, dict.fromkeys(COLUMNS, "saved"))


def test_matrix_has_one_line_per_row():
    rows = {name: keeps(policy)[1] for name, policy in list(example_policies().items())[:3]}
    lines = str(matrix_table(rows, keeps(None, checkpointed=False)[1])).splitlines()
    assert len(lines) == 1 + 2 + 3  # the key, the header and its rule, one line per policy
    assert lines[3].split()[:2] == ["everything_saveable", "kept"]


def test_policy_names_link_to_their_sections_in_code_that_breaks_at_underscores():
    rows = {"no jax.checkpoint": keeps(None, checkpointed=False)[1],
            "dots_with_no_batch_dims_saveable": keeps(P.dots_with_no_batch_dims_saveable)[1]}
    baseline = rows["no jax.checkpoint"]
    page = matrix_table(rows, baseline, links="policies.html")._repr_html_()
    assert (f'<a class="{LINK_CLASS}" href="policies.html#policy-dots-with-no-batch-dims-saveable">'
            "<code>dots_<wbr>with_<wbr>no_<wbr>batch_<wbr>dims_<wbr>saveable</code></a>") in page
    assert ">no jax.checkpoint<" in page  # not a policy name: shown as it is
    # Without links the labels are shown as they are; in plain text the tags are dropped.
    assert "<a " not in matrix_table(rows, baseline)._repr_html_()
    text = str(matrix_table(rows, baseline, links=""))
    assert text.splitlines()[-1].split()[:3] == ["dots_with_no_batch_dims_saveable", "kept", "kept"]
    with pytest.raises(TypeError, match="links must be a str or None, got bool"):
        matrix_table(rows, baseline, links=True)


def test_cells_not_a_residual_are_a_dash_so_rows_stay_one_line():
    baseline = keeps(None, checkpointed=False)[1]
    frame = matrix_table({"nothing_saveable": keeps(P.nothing_saveable)[1]}, baseline).frame
    assert frame.loc[0, "matmul"] == "\u2014" and frame.loc[0, "other intermediates"] == "recomputed"
    assert max(len(cell) for cell in frame.iloc[0, 1:]) <= len("recomputed")

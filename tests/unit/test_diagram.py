"""policy_diagram: what each policy keeps, offloads and recomputes, as data and as an SVG figure."""

import xml.etree.ElementTree as ET

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

import remat_guide
from remat_guide import PolicyDiagram, policy_diagram
from remat_guide.diagram import FATES, KEPT, NOT_NEEDED, OFFLOADED, RECOMPUTED

P = jax.checkpoint_policies
SVG = "{http://www.w3.org/2000/svg}"
W, X = jnp.ones((4, 4)), jnp.ones((2, 4))


def layer(w, x):
    return jnp.sum(jnp.tanh(jnp.sin(x) @ w))


def named_layer(params, x, *, scale):
    hidden = checkpoint_name(jnp.sin(x) @ params["w"], "hidden")
    return scale * jnp.sum(jnp.tanh(hidden))


OFFLOAD_HIDDEN = P.save_and_offload_only_these_names(
    names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"],
    offload_src="device", offload_dst="pinned_host")


@pytest.fixture(scope="module")
def diagram():
    return policy_diagram(layer, W, X)


def cells(svg):
    root = ET.fromstring(svg)
    return [g for g in root.iter(f"{SVG}g") if "cell" in g.get("class", "").split()]


def test_it_is_exported():
    assert remat_guide.policy_diagram is policy_diagram
    assert remat_guide.PolicyDiagram is PolicyDiagram


def test_the_default_lanes_and_the_values_in_program_order(diagram):
    assert [lane.label for lane in diagram.lanes] == [
        "no checkpoint", "nothing_saveable", "dots_saveable", "offload_dot_with_no_batch_dims"]
    assert [v.label for v in diagram.values] == ["w", "x", "sin", "cos", "dot", "tanh", "1−x²"]
    assert [v.kind for v in diagram.values] == ["argument"] * 2 + ["primitive"] * 5
    dot = diagram.values[4]
    assert (dot.name, dot.type, dot.nbytes) == ("dot_general", "f32[2,4]", 32)
    assert diagram.omitted == ("sum",)  # the output: no policy needs it


def test_no_checkpoint_keeps_what_the_derivatives_need(diagram):
    assert diagram.fates("no checkpoint") == {
        "w": KEPT, "x": NOT_NEEDED, "sin": KEPT, "cos": KEPT, "dot": NOT_NEEDED, "tanh": NOT_NEEDED,
        "1−x²": KEPT}
    assert all(diagram.lanes[0].in_forward)


def test_nothing_saveable_keeps_the_inputs_and_recomputes_the_rest(diagram):
    fates = diagram.fates("nothing_saveable")
    assert fates["w"] == fates["x"] == KEPT
    assert {fates[v] for v in ("sin", "cos", "dot", "tanh", "1−x²")} == {RECOMPUTED}


def test_dots_saveable_keeps_the_dot_and_recomputes_sin(diagram):
    assert diagram.fate("dots_saveable", "dot") == KEPT
    assert diagram.fate("dots_saveable", "sin") == RECOMPUTED
    assert diagram.fate("dots_saveable", "tanh") == RECOMPUTED


def test_with_checkpoint_the_forward_pass_skips_what_only_the_derivative_needs(diagram):
    lane = {lane.label: lane for lane in diagram.lanes}["dots_saveable"]
    forward = dict(zip([v.label for v in diagram.values], lane.in_forward))
    assert forward == {"w": True, "x": True, "sin": True, "cos": False, "dot": True, "tanh": True,
                       "1−x²": False}


def test_an_offloading_policy_marks_the_dot_offloaded(diagram):
    assert diagram.fate("offload_dot_with_no_batch_dims", "dot") == OFFLOADED
    lane = diagram.lanes[3]
    assert lane.host_bytes == 32 and lane.device_bytes == 64 + 32  # w and x stay on the device


def test_the_bytes_are_those_of_saved_residuals(diagram):
    for lane, policy in zip(diagram.lanes, [None, P.nothing_saveable, P.dots_saveable]):
        f = layer if policy is None else jax.checkpoint(layer, policy=policy)
        assert lane.device_bytes == remat_guide.saved_residuals(f, W, X).total_bytes


def test_a_named_value_offloaded_by_name_with_pytrees_keywords_and_bfloat16():
    params = {"w": jnp.ones((4, 4), jnp.bfloat16)}
    x = jnp.ones((2, 4), jnp.bfloat16)
    diagram = policy_diagram(named_layer, params, x, scale=2.0, policies={
        "none": None, "save hidden": P.save_only_these_names("hidden"), "offload hidden": OFFLOAD_HIDDEN,
        "nothing": "nothing_saveable"})
    labels = [v.label for v in diagram.values]
    assert labels[:3] == ["params['w']", "x", "scale"]
    hidden = diagram.values[labels.index("hidden")]
    assert (hidden.kind, hidden.name, hidden.type) == ("named", "'hidden'", "bf16[2,4]")
    assert "dot" not in labels  # the tag names the dot's output
    assert [diagram.fate(lane, "hidden") for lane in ("none", "save hidden", "offload hidden", "nothing")] == [
        NOT_NEEDED, KEPT, OFFLOADED, RECOMPUTED]


def test_argnums_differentiates_only_the_chosen_arguments():
    diagram = policy_diagram(layer, W, X, policies=["dots_saveable"], argnums=0)
    # The gradient for w alone needs sin(x) (recomputed from x) and the dot, not w nor cos.
    assert diagram.fates("dots_saveable") == {
        "x": KEPT, "sin": RECOMPUTED, "dot": KEPT, "tanh": RECOMPUTED, "1−x²": RECOMPUTED}


def test_abstract_arguments_are_enough():
    diagram = policy_diagram(layer, jax.ShapeDtypeStruct((4, 4), jnp.float16),
                             jax.ShapeDtypeStruct((2, 4), jnp.float16), policies={"none": None})
    assert diagram.values[0].type == "f16[4,4]"


def test_the_svg_is_xml_with_one_cell_per_policy_and_value(diagram):
    svg = diagram.svg
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    width = float(root.get("width"))
    assert width <= 760
    found = cells(svg)
    assert len(found) == len(diagram.lanes) * len(diagram.values)
    for g, (lane, value, fate) in zip(found, [(lane, v, f) for lane in diagram.lanes
                                              for v, f in zip(diagram.values, lane.fates)]):
        assert (g.get("data-policy"), g.get("data-value"), g.get("data-fate")) == (lane.label, value.label, fate)
        assert f"fate-{fate.replace(' ', '-')}" in g.get("class").split()
    assert {g.get("data-fate") for g in found} == set(FATES)


def test_the_svg_text_is_legible_and_letters_tell_the_fates_apart(diagram):
    root = ET.fromstring(diagram.svg)
    texts = list(root.iter(f"{SVG}text"))
    assert min(float(t.get("font-size")) for t in texts) >= 12
    letter = {KEPT: "K", OFFLOADED: "O", RECOMPUTED: "R", NOT_NEEDED: "–"}
    for g in cells(diagram.svg):
        value, fate = g.get("data-value"), g.get("data-fate")
        # The forward box names the value; the backward one gives the fate's letter first.
        shown = [t.text for t in g.iter(f"{SVG}text") if t.text != "host"]
        assert shown[0] == value and shown[-1].split()[0] == letter[fate], shown


def test_the_output_is_the_same_on_every_call(diagram, tmp_path):
    again = policy_diagram(layer, W, X)
    assert again.svg == diagram.svg == diagram.to_svg() == diagram._repr_svg_()
    assert str(again) == str(diagram)
    path = tmp_path / "layer.svg"
    diagram.save(path)
    assert path.read_text(encoding="utf-8") == diagram.svg
    assert "id=" not in diagram.svg.replace('id="remat-host"', "")


def test_to_pandas_has_a_row_per_policy_and_value(diagram):
    frame = diagram.to_pandas()
    assert len(frame) == len(diagram.lanes) * len(diagram.values)
    row = frame[(frame.policy == "dots_saveable") & (frame.value == "dot")].iloc[0]
    assert (row["name"], row["fate"], row["bytes"], bool(row["in_forward"])) == ("dot_general", KEPT, 32, True)


def test_unknown_labels_are_key_errors(diagram):
    with pytest.raises(KeyError, match="no lane 'dots'"):
        diagram.fate("dots", "dot")
    with pytest.raises(KeyError, match="no value 'dot_general'"):
        diagram.fate("dots_saveable", "dot_general")

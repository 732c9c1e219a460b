"""fwd_bwd: forward and backward jaxprs side by side, with residuals and recomputation marked."""

import re

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

from remat_guide import FwdBwd, fwd_bwd, saved_residuals

P = jax.checkpoint_policies


def _sin_chain(x):
    return jnp.sin(jnp.sin(x))


def _layers(w1, w2, x):
    return jnp.sum(jnp.tanh(jax.nn.relu(x @ w1) @ w2))


def _eqn_count(lines, primitive):
    return sum(line.primitive == primitive for line in lines)


def test_without_checkpoint_nothing_is_recomputed():
    view = fwd_bwd(_sin_chain, jnp.ones(3))
    assert view.recomputed == ()
    assert view.saved == ("cos", "cos")
    assert _eqn_count(view.backward, "sin") == 0 and _eqn_count(view.backward, "cos") == 0


def test_checkpoint_recomputes_what_it_did_not_save():
    view = fwd_bwd(jax.checkpoint(_sin_chain), jnp.ones(3))
    assert view.saved == ()
    assert sorted(view.recomputed) == ["cos", "cos", "sin"]
    # The cotangent side of the backward pass (the two multiplications) is not marked.
    assert [line.mark for line in view.backward if line.primitive == "mul"] == ["", ""]


def test_dots_policy_saves_matmuls_and_recomputes_the_rest():
    w, x = jnp.ones((4, 4)), jnp.ones((2, 4))
    plain = fwd_bwd(_layers, w, w, x)
    policy = fwd_bwd(jax.checkpoint(_layers, policy=P.dots_with_no_batch_dims_saveable), w, w, x)
    assert plain.recomputed == ()
    assert "dot_general" not in policy.recomputed
    assert "tanh" in policy.recomputed
    # Each saved matmul output shows up as a marked forward equation.
    assert len(policy.saved) == 2


def test_recomputation_inside_scan_is_marked():
    def step(carry, w):
        return jnp.tanh(carry @ w), None

    def loss(ws, x, body):
        return jnp.sum(jax.lax.scan(body, x, ws)[0])

    ws, x = jnp.ones((3, 4, 4)), jnp.ones((2, 4))
    assert fwd_bwd(lambda ws, x: loss(ws, x, step), ws, x).recomputed == ()
    view = fwd_bwd(lambda ws, x: loss(ws, x, jax.checkpoint(step)), ws, x)
    assert "tanh" in view.recomputed and "dot_general" in view.recomputed
    marked = [line for line in view.backward if line.mark == "recomputed"]
    assert all(line.depth >= 2 for line in marked)  # inside the scan body


def test_pytree_arguments_and_keyword_arguments():
    def loss(params, x, *, scale):
        return scale * jnp.sum(jnp.sin(x @ params["w"][0]) @ params["w"][1])

    params = {"w": (jnp.ones((3, 4)), jnp.ones((4, 2)))}
    view = fwd_bwd(jax.checkpoint(loss), params, jnp.ones((5, 3)), scale=jnp.float32(2.0))
    # Four leaves in, so the forward jaxpr has four inputs; the backward recomputes sin.
    assert re.fullmatch(r"\{ lambda ; a:f32\[3,4\] b:f32\[4,2\] c:f32\[5,3\] d:f32\[\]\. let",
                        view.forward[0].text)
    assert "sin" in view.recomputed


def test_pytree_output_gets_one_cotangent_per_leaf():
    def f(x):
        return {"s": jnp.sin(x), "c": jnp.cos(x)}

    header = fwd_bwd(f, jnp.ones(3)).backward[0].text
    invars = header.removeprefix("{ lambda ; ").removesuffix(". let").split()
    # The backward computation takes the residuals, then one cotangent per output leaf.
    assert len(invars) == len(saved_residuals(f, jnp.ones(3))) + 2
    assert all(v.endswith(":f32[3]") for v in invars[-2:])


def test_function_with_no_residuals():
    view = fwd_bwd(lambda x: 2.0 * x, jnp.ones(3))
    assert view.saved == () and view.recomputed == ()
    assert "S " not in "\n".join(line.text for line in view.forward)


def test_shape_dtype_structs_are_enough():
    spec = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
    view = fwd_bwd(jax.checkpoint(_sin_chain), spec)
    assert view.forward[0].text == "{ lambda ; a:f32[1024,1024]. let"


def test_plain_text_is_side_by_side_and_marks_lines():
    text = str(fwd_bwd(jax.checkpoint(_sin_chain), jnp.ones(3)))
    rows = text.splitlines()
    assert rows[0].startswith("S = kept") and "R = recomputed" in rows[0]
    assert "forward computation:" in rows[2] and "backward computation:" in rows[2]
    recomputed_rows = [r for r in rows if "|  R " in r]
    assert len(recomputed_rows) == 3
    assert repr(fwd_bwd(_sin_chain, jnp.ones(3))) == str(fwd_bwd(_sin_chain, jnp.ones(3)))


def test_html_is_deterministic_and_marks_lines():
    policy = P.save_only_these_names("a")

    def named(x):
        return jnp.sum(jnp.sin(checkpoint_name(jnp.sin(x), "a")))

    # A policy that is a plain function prints with its memory address: it must not show.
    def custom_policy(prim, *avals, **params):
        return False

    first = fwd_bwd(jax.checkpoint(named, policy=policy), jnp.ones(3))._repr_html_()
    second = fwd_bwd(jax.checkpoint(named, policy=policy), jnp.ones(3))._repr_html_()
    assert first == second
    # cos(x) and cos('a'), the derivatives of the two sines, are computed again from x and 'a'.
    assert first.count('title="recomputed"') == 2
    assert first.count('title="saved"') == 1
    view = fwd_bwd(jax.checkpoint(named, policy=policy), jnp.ones(3))
    assert view.recomputed == ("cos", "cos") and view.saved == ("reduce_precision",)
    custom = fwd_bwd(jax.checkpoint(named, policy=custom_policy), jnp.ones(3))
    assert "0x" not in custom._repr_html_() and "0x" not in str(custom)
    assert not re.search(r'\bid="', first)


def test_rich_renders_both_columns():
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    console.print(fwd_bwd(jax.checkpoint(_sin_chain), jnp.ones(3)))
    out = console.export_text()
    assert "forward computation" in out and "backward computation" in out
    assert len(re.findall(r"│ R ", out)) == 3


def test_returns_fwdbwd_with_lines():
    view = fwd_bwd(_sin_chain, jnp.ones(3))
    assert isinstance(view, FwdBwd)
    assert view.forward[0].depth == 0 and view.forward[1].depth == 1


def test_rejects_bad_input_by_name():
    with pytest.raises(TypeError, match="f must be callable, got int"):
        fwd_bwd(3, jnp.ones(3))
    with pytest.raises(TypeError, match=r"argument params\['w'\] must be an array.*got str"):
        fwd_bwd(lambda params: params["w"], {"w": "abc"})

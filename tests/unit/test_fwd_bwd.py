"""fwd_bwd: forward and backward jaxprs side by side, with residuals and recomputation marked."""

import re

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from remat_guide import FwdBwd, fwd_bwd, saved_residuals
from remat_guide.fwd_bwd import SUMMARY_ABOVE, Line

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


# --- a real model: the summary, the wrapped listing, the folded HTML ----------------------

class _Block(nnx.Module):
    def __init__(self, d: int, heads: int, rngs: nnx.Rngs) -> None:
        self.norm1 = nnx.LayerNorm(d, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(d, 4 * d, rngs=rngs)
        self.down = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h)
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


class _Transformer(nnx.Module):
    def __init__(self, d: int, heads: int, layers: int, rngs: nnx.Rngs) -> None:
        self.blocks = nnx.List([_Block(d, heads, rngs) for _ in range(layers)])

    def __call__(self, x):
        for block in self.blocks:
            x = nnx.remat(lambda b, x: b(x))(block, x)
        return x


@pytest.fixture(scope="module")
def nnx_model():
    """A 2-layer Flax NNX transformer, each layer under nnx.remat, its parameters an nnx.State."""
    graphdef, state = nnx.split(_Transformer(d=16, heads=2, layers=2, rngs=nnx.Rngs(0)))

    def loss(state, x):
        return jnp.mean(nnx.merge(graphdef, state)(x) ** 2)

    x = jnp.ones((2, 8, 16))
    return loss, state, x, fwd_bwd(loss, state, x)


def test_nnx_model_prints_a_summary_not_its_listing(nnx_model):
    loss, state, x, view = nnx_model
    assert view.is_large and len(view.backward) > 4 * SUMMARY_ABOVE
    rows = str(view).splitlines()
    # The summary is at most 12 primitive rows plus (inputs), the folded rest and the total.
    assert len(rows) <= 15 + 6 and max(map(len, rows)) <= 100
    assert rows[-1].endswith("its listing() method gives it as text.")
    assert f"{len(view.forward)} lines forward, {len(view.backward)} backward" in rows[-1]
    frame = view.summary().frame.set_index("primitive")
    assert frame.loc["total", "bytes saved"] == view.saved_bytes == saved_residuals(loss, state, x).total_bytes
    # Each nnx.remat keeps its inputs (the layer's parameters and activations) and recomputes the rest.
    arguments = saved_residuals(loss, state, x).by_kind("argument")
    assert frame.loc["(inputs)", "saved"] == len(arguments) and frame.loc["(inputs)", "bytes saved"] == sum(
        r.nbytes for r in arguments)
    assert frame.loc["total", "recomputed"] == len(view.recomputed) > frame.loc["total", "forward"]
    assert frame.loc["dot_general", "recomputed"] == _eqn_count(view.forward, "dot_general") - 2


def test_summary_counts_add_up(nnx_model):
    *_, view = nnx_model
    full = view.summary(max_rows=None).frame.set_index("primitive")
    short = view.summary(max_rows=3).frame.set_index("primitive")
    primitives = {line.primitive for line in view.forward if line.primitive} | set(view.recomputed)
    for column in ("forward", "saved", "recomputed"):
        assert full[column].drop("total").sum() == full.loc["total", column] == short[column].drop("total").sum()
    assert full.loc["total", "forward"] == sum(bool(line.primitive) for line in view.forward)
    assert len(short) == 1 + 3 + 1 + 1  # (inputs), three primitives, the others, the total
    folded = [p for p in full.index if p not in short.index and p != "total"]
    assert short.index[-2] == f"{len(primitives) - 3} others"
    assert short.iloc[-2]["recomputed"] == full.loc[folded, "recomputed"].sum()
    # Rows are ordered by bytes saved, then by the number recomputed.
    ranked = full.drop(["(inputs)", "total"])
    keys = list(zip(-ranked["bytes saved"].fillna(0), -ranked["saved"], -ranked["recomputed"]))
    assert keys == sorted(keys)


def test_listing_of_nnx_model_is_wrapped_and_complete(nnx_model):
    *_, view = nnx_model
    unwrapped = "\n".join(line.indented() for line in view.forward + view.backward)
    assert max(map(len, unwrapped.splitlines())) > 300  # the header of the backward computation
    for width in (100, 60):
        text = view.listing(width=width)
        assert max(map(len, text.splitlines())) <= width
        # Joined up again, the wrapped lines are the lines of the two computations.
        assert " ".join(text.split()).count(" ".join(view.backward[0].text.split())) == 1
        assert " ".join(text.split()).endswith(" ".join(view.backward[-1].text.split()))
    assert "|" not in view.listing()  # too wide to stand side by side


def test_html_of_large_view_folds_the_listing(nnx_model):
    *_, view = nnx_model
    page = view._repr_html_()
    table, rest = page.split("<details>")
    assert 'class="remat-table"' in table and '<div class="remat-fb-columns">' not in table
    assert rest.startswith(f"<summary>The listing: {len(view.forward)} lines forward")
    assert rest.count('title="recomputed"') == len(view.recomputed)
    assert page == fwd_bwd(*nnx_model[:3])._repr_html_()
    small = fwd_bwd(jax.checkpoint(_sin_chain), jnp.ones(3))._repr_html_()
    assert "<details>" not in small and 'class="remat-table"' not in small


def test_rich_shows_the_summary_of_a_large_view(nnx_model):
    from rich.console import Console

    *_, view = nnx_model
    console = Console(width=100, record=True, color_system=None)
    console.print(view)
    assert console.export_text().strip() == str(view).strip()


def test_the_summary_threshold():
    line = Line("b:f32[] = sin a", 1, "sin")
    assert not FwdBwd([line] * SUMMARY_ABOVE, [line]).is_large
    assert FwdBwd([line], [line] * (SUMMARY_ABOVE + 1)).is_large
    assert str(FwdBwd([line] * SUMMARY_ABOVE, [])).startswith("S = kept")
    assert str(FwdBwd([line] * (SUMMARY_ABOVE + 1), [])).startswith("equations by primitive")


def test_residuals_computed_in_a_scan_body_are_marked_there():
    policy = P.save_only_these_names("h")

    def step(carry, w):
        h = checkpoint_name(jnp.tanh(carry @ w), "h")
        return jnp.sin(h), None

    def loss(ws, x):
        return jnp.sum(jax.lax.scan(jax.checkpoint(step, policy=policy), x, ws)[0])

    ws, x = jnp.ones((3, 4, 4)), jnp.ones((2, 4))
    view = fwd_bwd(loss, ws, x)
    inner = [line for line in view.forward if line.mark == "saved" and line.depth > 1]
    # 'h' is saved for each of the 3 steps; the scan itself keeps each step's input carry.
    assert [(line.primitive, line.saved_bytes) for line in inner] == [("reduce_precision", 3 * x.nbytes)]
    scan = [line for line in view.forward if line.primitive == "scan"]
    assert scan[0].mark == "saved" and scan[0].saved_bytes == 3 * x.nbytes
    assert view.saved_bytes == saved_residuals(loss, ws, x).total_bytes
    assert "cos" in view.recomputed and "reduce_precision" not in view.recomputed


def test_captured_constants_are_declared_and_counted():
    c = jnp.arange(3.0)
    view = fwd_bwd(lambda x: jnp.sin(x * c), jnp.ones(3))
    assert view.forward[0].text == "{ lambda a:f32[3]; b:f32[3]. let"
    assert view.saved_inputs == (c.nbytes,)
    assert view.saved_bytes == saved_residuals(lambda x: jnp.sin(x * c), jnp.ones(3)).total_bytes


def test_listing_side_by_side_only_when_it_fits():
    view = fwd_bwd(jax.checkpoint(_sin_chain), jnp.ones(3))
    side = view.listing()
    assert side == str(view) and "|  R " in side
    stacked = view.listing(width=40)
    assert "|" not in stacked and max(map(len, stacked.splitlines())) <= 40
    listed = stacked.split("forward computation:")[1].splitlines()
    assert [row[:2] for row in listed if row[:2] in ("S ", "R ")] == ["R "] * 3


def test_bad_arguments_of_the_view_are_refused_by_name():
    view = fwd_bwd(_sin_chain, jnp.ones(3))
    with pytest.raises(TypeError, match="width must be an int"):
        view.listing(width="wide")
    with pytest.raises(ValueError, match="width"):
        view.listing(width=39)
    with pytest.raises(TypeError, match="max_rows"):
        view.summary(max_rows=2.5)
    with pytest.raises(ValueError, match="max_rows"):
        view.summary(max_rows=0)
    with pytest.raises(ValueError, match="Line.saved_bytes"):
        Line("b:f32[] = sin a", 1, "sin", "", 4)
    with pytest.raises(ValueError, match="Line.saved_bytes"):
        Line("b:f32[] = cos a", 1, "cos", "saved", -4)
    with pytest.raises(TypeError, match="saved_inputs"):
        FwdBwd([], [], saved_inputs=4)
    with pytest.raises(ValueError, match="saved_inputs"):
        FwdBwd([], [], saved_inputs=[-1])

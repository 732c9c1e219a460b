"""saved_residuals inside scans over layers: each stacked value named by what the body keeps, at the user's line."""

import inspect
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name

from remat_guide import Residual, Residuals, saved_residuals

HERE = os.path.basename(__file__)
SAVE_ATTN = jax.checkpoint_policies.save_only_these_names("attn_out")
LAYERS, ROWS, WIDTH = 4, 2, 8


def _line_of(function, text, qualname=None):
    """The location ``saved_residuals`` gives to the line of ``function`` that holds ``text``
    (in ``qualname``, a function defined on that line, if given)."""
    lines, first = inspect.getsourcelines(function)
    (offset,) = [i for i, line in enumerate(lines) if text in line]
    return f"{HERE}:{first + offset} ({qualname or function.__qualname__})"


def _jax_listing(f, *args):
    """JAX's own flat listing: one aval per residual, each scan's stacked output as one value."""
    from jax._src.ad_checkpoint import saved_residuals as jax_saved_residuals

    return [aval for aval, _ in jax_saved_residuals(f, *args)]


def _layer(x, w):
    attn_out = checkpoint_name(jnp.sin(x @ w), "attn_out")
    return jnp.tanh(attn_out @ w)


def _scanned(ws, x):
    body = jax.checkpoint(_layer, policy=SAVE_ATTN)
    return jnp.sum(jax.lax.scan(lambda c, w: (body(c, w), None), x, ws)[0])


def _nested(ws, x):
    def group(c, g):
        return jax.lax.scan(lambda c2, w: (jnp.sin(c2 @ w), None), c, g)[0], None

    return jnp.sum(jax.lax.scan(group, x, ws)[0])


WS, X = jnp.ones((LAYERS, WIDTH, WIDTH)), jnp.ones((ROWS, WIDTH))


def test_a_named_value_kept_by_a_plain_scan_is_named_at_the_line_that_names_it():
    res = saved_residuals(_scanned, WS, X)
    named = res.by_kind("named")
    assert [(r.name, r.stacked, r.per_iteration_shape, r.shape) for r in named] == [
        ("'attn_out'", (LAYERS,), (ROWS, WIDTH), (LAYERS, ROWS, WIDTH))]
    assert named[0].location == _line_of(_layer, "checkpoint_name(")
    assert named[0].within == (_line_of(_scanned, "jax.lax.scan("),)
    assert named[0].nbytes == LAYERS * ROWS * WIDTH * 4


def test_the_carry_each_iteration_receives_is_a_carry_row_at_the_scan():
    (carry,) = saved_residuals(_scanned, WS, X).by_kind("carry")
    scan_line = _line_of(_scanned, "jax.lax.scan(")
    assert (carry.name, carry.location, carry.within, carry.stacked) == ("carry", "", (scan_line,), (LAYERS,))
    assert carry.source == "carry"


def test_an_argument_passed_as_xs_is_the_argument_itself_not_a_stacked_copy():
    (weights,) = saved_residuals(_scanned, WS, X).by_kind("argument")
    assert (weights.name, weights.shape, weights.stacked, weights.within) == ("ws", WS.shape, (), ())


def test_nested_scans_stack_over_both_lengths_outermost_first():
    ws = jnp.ones((2, 3, WIDTH, WIDTH))
    res = saved_residuals(_nested, ws, X)
    computed = [r for r in res if r.kind != "argument"]
    assert sorted(r.kind for r in computed) == ["carry", "primitive"]
    (cos,) = [r for r in computed if r.kind == "primitive"]
    assert (cos.name, cos.stacked, cos.per_iteration_shape) == ("cos", (2, 3), (ROWS, WIDTH))
    assert cos.location == _line_of(_nested, "jnp.sin(c2 @ w)", "_nested.<locals>.group.<locals>.<lambda>")
    assert cos.within == (_line_of(_nested, "return jnp.sum(jax.lax.scan("),
                          _line_of(_nested, "return jax.lax.scan(", "_nested.<locals>.group"))
    assert all(r.stacked == (2, 3) and len(r.within) == 2 for r in computed)


def test_a_carry_independent_value_is_kept_once_outside_the_loop():
    table = np.arange(float(WIDTH), dtype=np.float32)  # a NumPy constant the body captures

    def loss(w, x):
        def body(c, _):
            return c * jnp.sin(w) * table, None

        return jnp.sum(jax.lax.scan(body, x, None, length=LAYERS)[0])

    res = saved_residuals(loss, jnp.ones(WIDTH), jnp.ones(WIDTH))
    unstacked = [(r.kind, r.name, r.shape) for r in res if not r.stacked]
    # sin(w) does not depend on the carry: JAX computes it once, before the loop.
    assert ("primitive", "sin", (WIDTH,)) in unstacked and ("constant", "captured", (WIDTH,)) in unstacked
    (sin,) = [r for r in res if r.name == "sin"]
    assert sin.location == _line_of(loss, "c * jnp.sin(w)", loss.__qualname__ + ".<locals>.body")
    assert [(r.kind, r.stacked) for r in res if r.stacked] == [("carry", (LAYERS,))]


def test_values_found_through_jit_and_custom_vjp_inside_the_body():
    @jax.jit
    def inner(c, w):
        return checkpoint_name(jnp.sin(c @ w), "h")

    @jax.custom_vjp
    def square(x):
        return x * x

    square.defvjp(lambda x: (x * x, 2 * x), lambda twice_x, g: (g * twice_x,))

    def loss(ws, x):
        return jnp.sum(jax.lax.scan(lambda c, w: (square(inner(c, w)), None), x, ws)[0])

    res = saved_residuals(loss, WS, X)
    stacked = {(r.kind, r.name) for r in res if r.stacked == (LAYERS,)}
    assert ("primitive", "cos") in stacked and ("primitive", "mul") in stacked
    (cos,) = [r for r in res if r.name == "cos"]
    assert cos.location == _line_of(inner, "checkpoint_name(")
    assert not any(r.name.startswith("jit(") or r.name == "scan" for r in res)


def test_an_offloaded_named_value_in_a_reversed_scan_is_on_the_host():
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["attn_out"],
        offload_src="device", offload_dst="pinned_host")

    def loss(ws, x):
        body = jax.checkpoint(_layer, policy=policy)
        return jnp.sum(jax.lax.scan(lambda c, w: (body(c, w), None), x, ws, reverse=True)[0])

    (named,) = saved_residuals(loss, WS, X).by_kind("named")
    assert (named.name, named.memory, named.stacked) == ("'attn_out'", "host", (LAYERS,))
    assert named.stacked_type_str == f"{LAYERS} × f32<host>[{ROWS},{WIDTH}]"


def test_bfloat16_values_keep_their_dtype_when_stacked():
    ws, x = WS.astype(jnp.bfloat16), X.astype(jnp.bfloat16)
    (named,) = saved_residuals(_scanned, ws, x).by_kind("named")
    assert named.dtype == jnp.bfloat16 and named.stacked_type_str == f"{LAYERS} × bf16[{ROWS},{WIDTH}]"
    assert named.nbytes == LAYERS * ROWS * WIDTH * 2


class _NnxModel:
    """Built lazily: Flax is a test dependency, imported only by the tests that use it."""

    @staticmethod
    def build():
        from flax import nnx

        class Block(nnx.Module):
            def __init__(self, rngs):
                self.attn = nnx.Linear(WIDTH, WIDTH, rngs=rngs)
                self.mlp = nnx.Linear(WIDTH, WIDTH, rngs=rngs)

            def __call__(self, x):
                attn_out = checkpoint_name(jnp.tanh(self.attn(x)), "attn_out")
                return x + self.mlp(jax.nn.relu(attn_out))

        class Model(nnx.Module):
            def __init__(self, rngs):
                @nnx.split_rngs(splits=LAYERS)
                @nnx.vmap(in_axes=(0,), out_axes=0)
                def make(rngs):
                    return Block(rngs)

                self.blocks = make(rngs)

            def __call__(self, x):
                @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
                @nnx.remat(policy=SAVE_ATTN)
                def step(x, block):
                    return block(x)

                return step(x, self.blocks)

        graphdef, state = nnx.split(Model(nnx.Rngs(0)))

        def loss(state, x):
            return jnp.sum(nnx.merge(graphdef, state)(x))

        return loss, state, Block, Model


def test_an_nnx_model_scanned_over_layers_shows_its_named_value_at_the_model_line():
    loss, state, block, model = _NnxModel.build()
    res = saved_residuals(loss, state, X)
    (named,) = res.by_kind("named")
    assert (named.name, named.stacked, named.per_iteration_shape) == ("'attn_out'", (LAYERS,), (ROWS, WIDTH))
    assert named.location == _line_of(block.__call__, "checkpoint_name(")
    assert named.within == (_line_of(model.__call__, "return step(x, self.blocks)"),)
    # Nothing is located in Flax's own code any more (iteration.py, axes_scan.py).
    assert all(text.startswith(HERE) for r in res for text in (r.location, *r.within) if text)


def test_a_linen_scan_shows_its_named_value_at_the_module_line():
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            attn_out = checkpoint_name(jnp.tanh(nn.Dense(WIDTH)(x)), "attn_out")
            return x + nn.Dense(WIDTH)(attn_out), None

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            layers = nn.scan(nn.remat(Block, policy=SAVE_ATTN), variable_axes={"params": 0},
                             split_rngs={"params": True}, length=LAYERS)
            return layers()(x, None)[0]

    model = Model()
    params = model.init(jax.random.key(0), X)
    (named,) = saved_residuals(lambda p, x: jnp.sum(model.apply(p, x)), params, X).by_kind("named")
    assert (named.stacked, named.location) == ((LAYERS,), _line_of(Block.__call__, "checkpoint_name("))
    assert named.within == (_line_of(Model.__call__, "return layers()(x, None)[0]"),)


@pytest.mark.parametrize("model", ["plain", "nested", "nnx"])
def test_the_breakdown_keeps_jax_flat_listing_row_for_row(model):
    if model == "nnx":
        loss, state, *_ = _NnxModel.build()
        args = (state, X)
    else:
        loss, args = (_scanned, (WS, X)) if model == "plain" else (_nested, (jnp.ones((2, 3, WIDTH, WIDTH)), X))
    ours, theirs = saved_residuals(loss, *args), _jax_listing(loss, *args)
    assert [r.type_str for r in ours] == [a.str_short(short_dtypes=True) for a in theirs]
    assert ours.total_bytes == sum(a.size * a.dtype.itemsize for a in theirs)
    assert any(r.stacked for r in ours)


def test_the_table_shows_the_stacking_and_the_scan_column_only_for_scans():
    text = str(saved_residuals(_scanned, WS, X))
    header = text.splitlines()[1].split()
    assert header == ["type", "bytes", "kind", "scan", "source"]
    assert f"{LAYERS} × f32[{ROWS},{WIDTH}]" in text
    scan_line = _line_of(_scanned, "jax.lax.scan(").split(" (")[0]
    assert text.count(scan_line) == 2  # in the scan column of the two stacked rows
    flat = str(saved_residuals(_layer, X, WS[0]))
    assert flat.splitlines()[1].split() == ["type", "bytes", "kind", "source"]


def test_to_pandas_has_the_stacking_columns():
    frame = saved_residuals(_scanned, WS, X).to_pandas()
    assert list(frame.columns) == ["type", "bytes", "kind", "name", "location", "memory", "stacked", "within"]
    named = frame[frame.kind == "named"].iloc[0]
    assert (named["type"], named["stacked"]) == (f"f32[{LAYERS},{ROWS},{WIDTH}]", (LAYERS,))


def test_a_residual_is_constructible_as_before_and_checks_its_stacking():
    plain = Residual((4, 3), np.float32, "primitive", "sin", "f.py:1 (f)", "device")
    assert (plain.stacked, plain.within, plain.per_iteration_shape, plain.stacked_type_str) == (
        (), (), (4, 3), "f32[4,3]")
    stacked = Residual((4, 3), np.float32, "carry", "carry", stacked=[4], within=["f.py:2 (f)"])
    assert (stacked.stacked, stacked.within, stacked.stacked_type_str) == ((4,), ("f.py:2 (f)",), "4 × f32[3]")
    assert Residuals([plain, stacked]).total_bytes == 2 * 48
    with pytest.raises(ValueError, match="Residual.stacked must be the leading dimensions"):
        Residual((4, 3), np.float32, "carry", "carry", stacked=(3,), within=("f.py:2 (f)",))
    with pytest.raises(ValueError, match="Residual.within must name one scan per entry"):
        Residual((4, 3), np.float32, "carry", "carry", stacked=(4,))
    with pytest.raises(TypeError, match="Residual.within must be an iterable of strings, got str"):
        Residual((4, 3), np.float32, "carry", "carry", stacked=(4,), within="f.py:2 (f)")
    with pytest.raises(TypeError, match="Residual.stacked must be an int"):
        Residual((4, 3), np.float32, "carry", "carry", stacked=(4.0,), within=("f.py:2 (f)",))


def test_a_jitted_function_is_looked_through_at_the_top_level_too():
    @jax.jit
    def f(x):
        return jnp.sum(jnp.sin(checkpoint_name(jnp.cos(x), "c")))

    res = saved_residuals(jax.checkpoint(f, policy=jax.checkpoint_policies.save_only_these_names("c")), X)
    assert [(r.kind, r.name) for r in res] == [("argument", "x"), ("named", "'c'")]
    assert res[1].location == _line_of(f, "checkpoint_name(")


def _frames(*files):
    frames = [types.SimpleNamespace(file_name=f, function_name=f"fn{i}", line_num=i) for i, f in enumerate(files)]
    return types.SimpleNamespace(traceback=types.SimpleNamespace(frames=frames))


def test_locations_skip_the_frames_of_jax_flax_equinox_and_remat_guide_but_not_its_example_models():
    import equinox
    import flax
    import jaxlib

    import remat_guide.models
    from remat_guide._provenance import user_location
    from remat_guide.site import policy_matrix

    def inside(module, name):
        return os.path.join(os.path.dirname(module.__file__), name)

    machinery = [inside(jax, "_src/core.py"), inside(jaxlib, "xla_client.py"), inside(flax, "nnx/iteration.py"),
                 inside(equinox, "_ad.py"), inside(remat_guide, "_tracing.py"), inspect.__file__]
    assert user_location(_frames(*machinery, "/home/me/model.py")) == f"model.py:{len(machinery)} (fn{len(machinery)})"
    assert user_location(_frames(*machinery, "/tmp/ipykernel_4242/123.py")) == "<cell>:6 (fn6)"
    assert user_location(_frames(*machinery, remat_guide.models.__file__)) == "models.py:6 (fn6)"
    assert user_location(_frames(*machinery, policy_matrix.__file__)) == "policy_matrix.py:6 (fn6)"
    assert user_location(_frames(*machinery)) == ""
    assert user_location(types.SimpleNamespace(traceback=None)) == ""


def test_the_package_example_models_keep_their_own_locations():
    from remat_guide import checkpoint_dot_policy

    w, x = jnp.ones((WIDTH, WIDTH)), jnp.ones((ROWS, WIDTH))
    dots = saved_residuals(checkpoint_dot_policy, w, w, x).by_kind("primitive")
    assert [r.location.split(":")[0] for r in dots] == ["exercise.py", "exercise.py"]


def test_a_scan_inside_a_checkpoint_with_a_policy_is_attributed_to_its_operation():
    # A checkpoint with a policy traces its body through eval_jaxpr: the residual is still the
    # scan's matmul output, stacked over the iterations, not an eval_jaxpr at the scan's line.
    def f(ws, x):
        return jnp.sum(jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)[0])

    kept = saved_residuals(jax.checkpoint(f, policy=jax.checkpoint_policies.dots_saveable),
                           jnp.ones((3, 4, 4)), jnp.ones((2, 4)))
    computed = [(r.name, r.stacked_type_str) for r in kept if r.kind == "primitive"]
    assert computed == [("dot_general", "3 × f32[2,4]")]

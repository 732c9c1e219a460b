"""argnums, keyword arguments and has_aux as jax.grad takes them: the residuals counted are the compiled gradient's."""

import jax
import jax.numpy as jnp
import pytest
from jax._src.ad_checkpoint import saved_residuals as jax_saved_residuals

from helpers import counting_compiles
from remat_guide import compare_policies, fwd_bwd, plan_names, policy_table, recommend_policy, saved_residuals
from remat_guide.models import mlp_args, mlp_scan_loss

P = jax.checkpoint_policies
W = jnp.ones((256, 256))
X = jnp.ones((8, 256))
TANH_DERIVATIVE_BYTES = 8 * 256 * 4  # one (8, 256) float32 value: 1 - tanh(x @ w) ** 2


def layer(w, x):
    return jnp.sum(jnp.tanh(x @ w))


def layer_loss_for(policy):
    return layer if policy is None else jax.checkpoint(layer, policy=policy)


def jax_bytes(listing):
    return sum(aval.size * aval.dtype.itemsize for aval, _ in listing)


def test_the_gradient_with_respect_to_w_keeps_x_and_the_tanh_derivative():
    # jax.grad(layer)(w, x) is jax.vjp of the closure w -> layer(w, x): JAX's own listing of it.
    expected = X.nbytes + TANH_DERIVATIVE_BYTES
    assert expected == 16_384 == jax_bytes(jax_saved_residuals(lambda w: layer(w, X), W))
    res = saved_residuals(layer, W, X, argnums=0)
    assert res.total_bytes == expected
    assert [(r.kind, r.name, r.nbytes) for r in res] == [
        ("argument", "x", X.nbytes), ("primitive", "one_minus_square", TANH_DERIVATIVE_BYTES)]
    rows = compare_policies(layer_loss_for, W, X, argnums=0, policies=["nothing_saveable"])
    assert rows[0].name == "no checkpoint" and rows[0].residual_bytes == expected  # was 278,528


def test_each_choice_of_argnums_matches_jax():
    everything = W.nbytes + X.nbytes + TANH_DERIVATIVE_BYTES
    assert everything == 278_528 == jax_bytes(jax_saved_residuals(layer, W, X))
    assert saved_residuals(layer, W, X).total_bytes == everything  # the default: every argument
    assert saved_residuals(layer, W, X, argnums=(0, 1)).total_bytes == everything
    only_x = jax_bytes(jax_saved_residuals(lambda x: layer(W, x), X))
    assert saved_residuals(layer, W, X, argnums=1).total_bytes == only_x == W.nbytes + TANH_DERIVATIVE_BYTES
    assert saved_residuals(layer, W, X, argnums=-1) == saved_residuals(layer, W, X, argnums=1)
    rows = compare_policies(layer_loss_for, W, X, argnums=(0, 1), policies=[])
    assert rows[0].residual_bytes == everything


def test_the_compiled_gradient_is_the_one_whose_residuals_are_counted():
    rows = compare_policies(layer_loss_for, W, X, argnums=1, policies=[])
    compiled = jax.jit(jax.grad(layer, argnums=1)).lower(W, X).compile()
    assert rows[0].temp_bytes == compiled.memory_analysis().temp_size_in_bytes
    assert rows[0].residual_bytes == saved_residuals(layer, W, X, argnums=1).total_bytes


def test_keyword_arguments_are_traced_but_never_differentiated_with_argnums():
    def scaled(w, x, *, scale):
        return scale * jnp.sum(jnp.sin(x @ w))

    scale = jnp.float32(2.0)
    res = saved_residuals(scaled, W, X, argnums=0, scale=scale)
    # The backward pass multiplies the cotangent by scale: read, so listed, by name.
    assert [(r.kind, r.name) for r in res] == [("argument", "x"), ("argument", "scale"), ("primitive", "cos")]
    every = saved_residuals(scaled, W, X, scale=scale)  # scale differentiated too: its factor is kept
    assert [r.name for r in every] == ["w", "x", "scale", "cos", "reduce_sum"]
    assert fwd_bwd(scaled, W, X, argnums=0, scale=scale).saved == ("cos",)
    assert fwd_bwd(scaled, W, X, scale=scale).saved == ("cos", "reduce_sum")


def test_arguments_outside_argnums_may_be_integers_or_keys():
    def dropout(w, key, n, x):
        keep = jax.random.bernoulli(key, 0.5, (8, 256))
        return jnp.sum(jnp.tanh(x @ w) * keep) / n

    key = jax.random.key(0)
    res = saved_residuals(dropout, W, key, 3, X, argnums=(0,))
    # The mask made from the key is kept (as float32), and 1/n: not the key itself.
    assert [r.name for r in res] == ["x", "one_minus_square", "convert_element_type", "convert_element_type"]
    recomputed = saved_residuals(jax.checkpoint(dropout), W, key, 3, X, argnums=0)
    assert [(r.name, r.type_str) for r in recomputed] == [
        ("w", "f32[256,256]"), ("key", "key<fry>[]"), ("n", "i32[]"), ("x", "f32[8,256]")]
    rows = compare_policies(lambda p: dropout if p is None else jax.checkpoint(dropout, policy=p),
                            W, key, 3, X, policies=["nothing_saveable"])
    assert [row.residual_bytes for row in rows] == [res.total_bytes, recomputed.total_bytes]


def test_a_bfloat16_argument_may_be_differentiated():
    w = jnp.ones((4, 4), jnp.bfloat16)
    res = saved_residuals(layer, w, jnp.ones((2, 4), jnp.bfloat16), argnums=0)
    assert [(r.name, r.dtype) for r in res] == [("x", jnp.dtype(jnp.bfloat16)),
                                                ("one_minus_square", jnp.dtype(jnp.bfloat16))]


def aux_loss_for(policy):
    def loss(w, x, *, scale):
        y = jnp.tanh(x @ w)
        return scale * jnp.sum(y), {"norm": jnp.sum(y ** 2), "count": jnp.int32(y.size)}

    return loss if policy is None else jax.checkpoint(loss, policy=policy)


def test_has_aux_and_kwargs_compile_what_jax_grad_compiles():
    scale = jax.ShapeDtypeStruct((), jnp.float32)  # keyword arguments may be abstract too
    rows = compare_policies(aux_loss_for, W, X, has_aux=True, kwargs={"scale": scale},
                            policies=["nothing_saveable"])
    assert [row.name for row in rows] == ["no checkpoint", "nothing_saveable"]
    for row in rows:
        loss = aux_loss_for(row.policy)
        compiled = jax.jit(jax.grad(loss, has_aux=True)).lower(W, X, scale=scale).compile()
        assert row.temp_bytes == compiled.memory_analysis().temp_size_in_bytes
        without_aux = saved_residuals(lambda w, x, scale: loss(w, x, scale=scale)[0], W, X, scale, argnums=0)
        assert row.residual_bytes == without_aux.total_bytes


def test_a_keyword_named_like_one_of_ours_reaches_the_loss():
    def loss_for(policy):
        def loss(w, *, policies, budget_bytes):
            return jnp.sum(jnp.sin(w) * policies * budget_bytes)

        return loss if policy is None else jax.checkpoint(loss, policy=policy)

    kwargs = {"policies": jnp.float32(2.0), "budget_bytes": jnp.float32(3.0)}
    rows = compare_policies(loss_for, W, kwargs=kwargs, policies=["nothing_saveable"])
    best = recommend_policy(loss_for, W, budget_bytes=2**40, kwargs=kwargs, policies=["nothing_saveable"])
    assert best.name == "no checkpoint" and best.temp_bytes == rows[0].temp_bytes


def test_each_loss_is_built_once_and_compiled_once(monkeypatch):
    # A program cached or kept in the figure store is not compiled.
    monkeypatch.delenv("REMAT_GUIDE_CACHE_DIR", raising=False)
    monkeypatch.delenv("REMAT_GUIDE_FIGURES", raising=False)
    built, traced = [], []

    def loss_for(policy):
        built.append(policy)

        def loss(w, x):
            traced.append(1)
            return layer(w, x)

        return loss if policy is None else jax.checkpoint(loss, policy=policy)

    with counting_compiles() as compiled:
        rows = compare_policies(loss_for, W, X, policies=["dots_saveable", "nothing_saveable"])
    assert len(built) == len(compiled) == len(rows) == 3
    # At most two traces of each loss: the gradient that is compiled, and the residual listing
    # (jax.checkpoint caches its trace, so a checkpointed loss may be traced once).
    assert len(rows) <= len(traced) <= 2 * len(rows)


def always_checkpointed(policy):
    """A model with a built-in checkpoint: loss_for(None) is nothing_saveable, not the plain loss."""
    return jax.checkpoint(layer, policy=P.nothing_saveable if policy is None else policy)


def test_a_baseline_that_checkpoints_is_never_called_no_checkpoint():
    with pytest.warns(UserWarning, match=r"labelled 'loss_for\(None\)', not 'no checkpoint'"):
        rows = compare_policies(always_checkpointed, W, X, policies=["dots_saveable"])
    assert [row.name for row in rows] == ["loss_for(None)", "dots_saveable"]
    assert "FLOPs vs loss_for(None)" in str(policy_table(rows))
    checkpointed = jax.jit(jax.grad(always_checkpointed(None))).lower(W, X).compile()
    assert rows[0].temp_bytes == checkpointed.memory_analysis().temp_size_in_bytes
    # What the recommendation names is the program it measured: the checkpointed loss_for(None).
    best = recommend_policy(rows=rows, budget_bytes=rows[0].temp_bytes)
    assert best.policy is None and best.name == "loss_for(None)"
    with pytest.warns(UserWarning, match="loss_for"):
        again = recommend_policy(always_checkpointed, W, X, budget_bytes=rows[0].temp_bytes, policies=[])
    assert again.name == "loss_for(None)"


def test_recommend_policy_reuses_rows_without_compiling():
    args = mlp_args(layers=4, n=32, d=16)
    names = ["dots_saveable", "nothing_saveable"]
    rows = compare_policies(mlp_scan_loss, *args, policies=names)
    budget = min(row.temp_bytes for row in rows)
    with counting_compiles() as compiled:
        best = recommend_policy(rows=(row for row in rows), budget_bytes=budget)
    assert compiled == []
    assert best == min((r for r in rows if r.temp_bytes <= budget), key=lambda r: (r.flops, r.temp_bytes))
    assert best == recommend_policy(mlp_scan_loss, *args, budget_bytes=budget, policies=names)


def test_plan_names_takes_argnums_kwargs_and_has_aux():
    def loss_for(policy):
        def loss(x, w, *, scale):
            h = jax.ad_checkpoint.checkpoint_name(jnp.sin(x @ w), "h")
            g = jax.ad_checkpoint.checkpoint_name(jnp.sin(h @ w), "g")
            return scale * jnp.sum(jnp.sin(g)), jnp.mean(g)

        return loss if policy is None else jax.checkpoint(loss, policy=policy)

    calls = []

    def counting(policy):
        calls.append(policy)
        return loss_for(policy)

    x, w = jnp.ones((8, 16)), jnp.ones((16, 16))
    options = dict(argnums=1, has_aux=True, kwargs={"scale": 2.0})
    measured = {}
    row = plan_names(counting, x, w, budget_bytes=2**40, measured=measured, **options)
    assert row.name == "no checkpoint"
    no_checkpoint = saved_residuals(lambda x, w: loss_for(None)(x, w, scale=2.0)[0], x, w, argnums=1)
    assert row.residual_bytes == no_checkpoint.total_bytes
    calls.clear()
    tight = plan_names(counting, x, w, budget_bytes=measured["nothing_saveable"].temp_bytes,
                       measured=measured, **options)
    assert calls == [] and tight.compiled == 0  # the tags and every row come from the measured dict
    with pytest.raises(ValueError, match="measured holds rows of another"):
        plan_names(counting, x, w, budget_bytes=2**40, measured=measured, argnums=0, has_aux=True,
                   kwargs={"scale": 2.0})


def test_a_keyword_argument_also_given_by_position_is_refused_by_name():
    with pytest.raises(TypeError, match=r"keyword argument 'x' is also passed by position"):
        saved_residuals(layer, W, X, x=X)
    with pytest.raises(TypeError, match=r"kwargs\['x'\] is also passed by position"):
        compare_policies(layer_loss_for, W, X, kwargs={"x": X})


def test_argnums_out_of_range_names_f():
    with pytest.raises(ValueError, match="argnums 2 is out of range: f gets 2 positional arguments"):
        saved_residuals(layer, W, X, argnums=2)

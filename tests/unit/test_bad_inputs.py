"""Bad input to every public function is refused with a TypeError or ValueError that names the argument.

One table of cases per public function: each case is a call with one bad input, the
exception it must raise and the name the message must contain. Nothing here compiles a
program: every case fails while arguments are checked or traced, before XLA.
"""

import re
import warnings
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from jax.ad_checkpoint import checkpoint_name

from remat_guide import (
    Comparison,
    FlopCount,
    FwdBwd,
    Loop,
    NamePlan,
    PolicyDiagram,
    PolicyRow,
    Residual,
    Residuals,
    check_solution,
    checkpoint_dot_policy,
    compare_policies,
    count_flops,
    fit,
    fwd_bwd,
    models,
    plan_names,
    policy_diagram,
    policy_label,
    policy_table,
    recommend_policy,
    saved_residuals,
    tables,
    targets,
)
from remat_guide._validation import MAX_BYTES
from remat_guide.diagram import Lane, Value
from remat_guide.fwd_bwd import Line
from remat_guide.site import policy_matrix
from remat_guide.site.api_items import ApiItem, api_items, undocumented
from remat_guide.tables import Table

P = jax.checkpoint_policies
F32 = jnp.float32
X = jnp.ones(4)
W = jnp.ones((2, 2))
EX = models.exercise_args(3, 2)  # (2, 2), (2, 2), (3, 2) abstract float32
FRAME = pd.DataFrame({"a": [1]})
MATRIX_ROW = dict.fromkeys(policy_matrix.COLUMNS, "saved")


def sds(*shape, dtype=F32):
    return jax.ShapeDtypeStruct(shape, dtype)


def total(x):
    return jnp.sum(jnp.sin(x))


def no_return(x):
    jnp.sum(x)


def layer(w, x):
    return jnp.sum(jnp.tanh(x @ w))


def counted(x, n):
    return jnp.sum(jnp.sin(x)) * n


def keyed(x, key):
    return jnp.sum(jnp.sin(x) * jax.random.normal(key, x.shape))


def layer_loss_for(policy):
    return layer if policy is None else jax.checkpoint(layer, policy=policy)


def aux_loss_for(output):
    return lambda policy: lambda x: output(x)


def tagged_loss_for(policy):
    def loss(x):
        return jnp.sum(jnp.sin(checkpoint_name(jnp.sin(x), "hidden")))

    return loss if policy is None else jax.checkpoint(loss, policy=policy)


def not_a_policy(prim):
    return True


def answers_an_int(prim, *avals, **params):
    return 1


def row(**changes):
    fields = dict(name="p", policy=None, residual_bytes=1, temp_bytes=2, flops=3,
                  reported_flops=3, flops_ratio=1.0)
    fields.update(changes)
    return PolicyRow(**fields)


def mlp_params(layers=2, layers_out=2, d=2):
    return {"w_in": sds(layers, d, d), "w_out": sds(layers_out, d, d)}


def transformer_params(**changes):
    params, _ = models.transformer_args(layers=1, batch=1, seq=2, d_model=4, heads=2, mlp_dim=4)
    params.update(changes)
    return params


ROW = PolicyRow("no checkpoint", None, 0, 16, 10, 10, 1.0)
SMALL_DECODER = models.LLAMA3["8b"].smaller(layers=1, d_model=16, heads=2, kv_heads=1, mlp_dim=32, vocab=64)


def eval_loss(loss_for, *args):
    return lambda: jax.eval_shape(loss_for(None), *args)


# (id, call, exception, name the message must contain)
CASES = {
    "saved_residuals": [
        ("f not callable", lambda: saved_residuals(3, X), TypeError, "f"),
        ("integer input", lambda: saved_residuals(total, jnp.arange(3)), TypeError, "x"),
        ("missing return", lambda: saved_residuals(no_return, X), ValueError, "f"),
        ("integer output", lambda: saved_residuals(lambda x: jnp.sum(x).astype(int), X), TypeError, "f"),
        ("string argument", lambda: saved_residuals(total, "abc"), TypeError, "x"),
        ("negative dimension", lambda: saved_residuals(total, sds(-1, 2)), ValueError, "x"),
        ("impossible size", lambda: saved_residuals(total, sds(2**32, 2**32)), ValueError, "x"),
        ("non-array keyword", lambda: saved_residuals(lambda x, scale: total(x) * scale, X, scale="2"),
         TypeError, "scale"),
        ("no arguments", lambda: saved_residuals(lambda: jnp.float32(1)), TypeError, "arguments"),
        ("checkpoint policy with a wrong signature", lambda: saved_residuals(
            jax.checkpoint(total, policy=not_a_policy), X), TypeError, "not_a_policy"),
        ("checkpoint policy answering an int", lambda: saved_residuals(
            jax.checkpoint(total, policy=answers_an_int), X), TypeError, "answers_an_int"),
        ("argnums out of range", lambda: saved_residuals(layer, W, X, argnums=2), ValueError, "argnums"),
        ("argnums negative out of range", lambda: saved_residuals(layer, W, X, argnums=-3), ValueError,
         "argnums"),
        ("argnums repeated", lambda: saved_residuals(layer, W, X, argnums=(1, -1)), ValueError, "argnums"),
        ("argnums empty", lambda: saved_residuals(layer, W, X, argnums=[]), ValueError, "argnums"),
        ("argnums a str", lambda: saved_residuals(layer, W, X, argnums="0"), TypeError, "argnums"),
        ("argnums a float", lambda: saved_residuals(layer, W, X, argnums=0.0), TypeError, "argnums"),
        ("argnums a bool", lambda: saved_residuals(layer, W, X, argnums=False), TypeError, "argnums"),
        ("argnums holding a float", lambda: saved_residuals(layer, W, X, argnums=(0, 1.0)), TypeError,
         "argnums"),
        ("an int in argnums", lambda: saved_residuals(counted, X, 3, argnums=(0, 1)), TypeError, "n"),
        ("a PRNG key in argnums", lambda: saved_residuals(keyed, X, jax.random.key(0), argnums=1),
         TypeError, "key"),
        ("a keyword also given by position", lambda: saved_residuals(layer, W, X, x=X), TypeError, "x"),
        ("f returning a str", lambda: saved_residuals(lambda x: "abc", X), TypeError, "f"),
        ("f returning a str in a pytree", lambda: saved_residuals(lambda x: (total(x), "abc"), X),
         TypeError, "f"),
    ],
    "fwd_bwd": [
        ("f not callable", lambda: fwd_bwd(None, X), TypeError, "f"),
        ("integer input", lambda: fwd_bwd(jnp.sin, jnp.arange(3)), TypeError, "x"),
        ("missing return", lambda: fwd_bwd(no_return, X), ValueError, "f"),
        ("integer output", lambda: fwd_bwd(lambda x: jnp.floor(x).astype(int), X), TypeError, "f"),
        ("object argument", lambda: fwd_bwd(total, object()), TypeError, "x"),
        ("negative dimension", lambda: fwd_bwd(total, sds(3, -2)), ValueError, "x"),
        ("non-array keyword", lambda: fwd_bwd(lambda x, k: x * k, X, k=[1.0, "a"]), TypeError, "k"),
        ("checkpoint policy answering an int", lambda: fwd_bwd(
            jax.checkpoint(jnp.sin, policy=answers_an_int), X), TypeError, "answers_an_int"),
        ("argnums out of range", lambda: fwd_bwd(layer, W, X, argnums=(0, 5)), ValueError, "argnums"),
        ("argnums repeated", lambda: fwd_bwd(layer, W, X, argnums=(0, 0)), ValueError, "argnums"),
        ("argnums a dict", lambda: fwd_bwd(layer, W, X, argnums={0: 1}), TypeError, "argnums"),
        ("an int in argnums", lambda: fwd_bwd(counted, X, 3, argnums=1), TypeError, "n"),
        ("a PRNG key in argnums", lambda: fwd_bwd(keyed, X, jax.random.key(0), argnums=(0, 1)), TypeError, "key"),
        ("a keyword also given by position", lambda: fwd_bwd(layer, W, X, w=W), TypeError, "w"),
        ("f returning a str", lambda: fwd_bwd(lambda x: "abc", X), TypeError, "f"),
    ],
    "compare_policies": [
        ("loss_for not callable", lambda: compare_policies("mlp", X), TypeError, "loss_for"),
        ("loss_for returns no function", lambda: compare_policies(lambda p: 3, X), TypeError, "loss_for"),
        ("non-array argument", lambda: compare_policies(tagged_loss_for, "x"), TypeError, "args[0]"),
        ("negative dimension", lambda: compare_policies(models.exercise_loss, EX[0], EX[1], sds(-3, 2)),
         ValueError, "args[2]"),
        ("impossible argument size", lambda: compare_policies(
            models.exercise_loss, sds(2**32, 2**32), sds(2**32, 2**32), sds(1, 2**32)), ValueError, "args[0]"),
        ("impossible program size", lambda: compare_policies(
            models.exercise_loss, sds(2**29, 2**29), sds(2**29, 2**29), sds(4, 2**29)), ValueError, "loss_for"),
        ("argnums a float", lambda: compare_policies(models.exercise_loss, *EX, argnums=1.5), TypeError, "argnums"),
        ("argnums a bool", lambda: compare_policies(models.exercise_loss, *EX, argnums=True), TypeError, "argnums"),
        ("argnums out of range", lambda: compare_policies(models.exercise_loss, *EX, argnums=(0, 3)),
         ValueError, "argnums"),
        ("argnums repeated", lambda: compare_policies(models.exercise_loss, *EX, argnums=[0, -3]),
         ValueError, "argnums"),
        ("argnums empty", lambda: compare_policies(models.exercise_loss, *EX, argnums=()), ValueError, "argnums"),
        ("argnums without arguments", lambda: compare_policies(tagged_loss_for), ValueError, "argnums"),
        ("integer argument differentiated", lambda: compare_policies(tagged_loss_for, jnp.arange(3)),
         TypeError, "args[0]"),
        ("loss not scalar", lambda: compare_policies(lambda p: jnp.sin, X), ValueError, "loss_for"),
        ("loss integer", lambda: compare_policies(lambda p: lambda x: jnp.sum(x).astype(int), X),
         TypeError, "loss_for"),
        ("loss returns None", lambda: compare_policies(lambda p: no_return, X), TypeError, "loss_for"),
        ("policies a str", lambda: compare_policies(tagged_loss_for, X, policies="dots_saveable"),
         TypeError, "policies"),
        ("policies a set", lambda: compare_policies(
            tagged_loss_for, X, policies={"dots_saveable", "nothing_saveable"}), TypeError, "policies"),
        ("policies a frozenset", lambda: compare_policies(
            tagged_loss_for, X, policies=frozenset({"dots_saveable"})), TypeError, "policies"),
        ("unknown policy name", lambda: compare_policies(tagged_loss_for, X, policies=["dots_savable"]),
         ValueError, "policies"),
        ("policy name needing arguments", lambda: compare_policies(
            tagged_loss_for, X, policies=["save_only_these_names"]), ValueError, "policies"),
        ("policy name twice", lambda: compare_policies(
            tagged_loss_for, X, policies=["dots_saveable", "dots_saveable"]), ValueError, "policies"),
        ("policy not callable", lambda: compare_policies(tagged_loss_for, X, policies={"mine": 3}),
         TypeError, "policies['mine']"),
        ("label not a str", lambda: compare_policies(tagged_loss_for, X, policies={1: P.dots_saveable}),
         TypeError, "policies"),
        ("label of the baseline", lambda: compare_policies(
            tagged_loss_for, X, policies={"no checkpoint": P.dots_saveable}), ValueError, "policies"),
        ("policy with a wrong signature", lambda: compare_policies(
            tagged_loss_for, X, policies={"mine": not_a_policy}), TypeError, "policies['mine']"),
        ("policy answering an int", lambda: compare_policies(
            tagged_loss_for, X, policies={"mine": answers_an_int}), TypeError, "policies['mine']"),
        ("a policy factory, not called", lambda: compare_policies(
            tagged_loss_for, X, policies={"names": P.save_only_these_names}), TypeError, "policies['names']"),
        ("loss_for ignores its policy", lambda: compare_policies(
            lambda p: tagged_loss_for(None if p is None else P.nothing_saveable), X,
            policies=["dots_saveable"]), ValueError, "loss_for"),
        ("misspelt name in save_only_these_names", lambda: compare_policies(
            tagged_loss_for, X, policies={"s": P.save_only_these_names("hiden")}),
         ValueError, "policies['s']"),
        ("a PRNG key in argnums", lambda: compare_policies(
            lambda p: keyed, X, jax.random.key(0), argnums=(0, 1)), TypeError, "args[1]"),
        ("a complex argument in argnums", lambda: compare_policies(
            lambda p: lambda z: jnp.sum(jnp.abs(z)), jnp.ones(3, jnp.complex64)), TypeError, "args[0]"),
        ("has_aux a str", lambda: compare_policies(tagged_loss_for, X, has_aux="yes"), TypeError, "has_aux"),
        ("has_aux with a scalar output", lambda: compare_policies(tagged_loss_for, X, has_aux=True),
         TypeError, "has_aux"),
        ("has_aux with a list output", lambda: compare_policies(
            aux_loss_for(lambda x: [jnp.sum(x), x]), X, has_aux=True), TypeError, "has_aux"),
        ("has_aux with a triple", lambda: compare_policies(
            aux_loss_for(lambda x: (jnp.sum(x), x, x)), X, has_aux=True), TypeError, "has_aux"),
        ("has_aux with a non-scalar loss", lambda: compare_policies(
            aux_loss_for(lambda x: (x, x)), X, has_aux=True), ValueError, "loss_for"),
        ("kwargs a list", lambda: compare_policies(tagged_loss_for, X, kwargs=[("scale", 2.0)]), TypeError,
         "kwargs"),
        ("kwargs with an int key", lambda: compare_policies(tagged_loss_for, X, kwargs={0: 2.0}), TypeError,
         "kwargs"),
        ("kwargs holding a str", lambda: compare_policies(tagged_loss_for, X, kwargs={"scale": "2"}), TypeError,
         "kwargs['scale']"),
        ("kwargs naming a positional argument", lambda: compare_policies(layer_loss_for, W, X, kwargs={"x": X}),
         TypeError, "kwargs['x']"),
        ("an unknown keyword of ours", lambda: compare_policies(tagged_loss_for, X, scale=2.0), TypeError,
         "scale"),
        ("target unknown", lambda: compare_policies(tagged_loss_for, X, target="h1000"), ValueError, "target"),
        ("target a platform, not a name", lambda: compare_policies(tagged_loss_for, X, target="tpu"), ValueError,
         "target"),
        ("target an int", lambda: compare_policies(tagged_loss_for, X, target=100), TypeError, "target"),
        ("target a device kind as bytes", lambda: compare_policies(tagged_loss_for, X, target=b"h100"), TypeError,
         "target"),
    ],
    "recommend_policy": [
        ("budget a float", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=1e6), TypeError,
         "budget_bytes"),
        ("budget a bool", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=True), TypeError,
         "budget_bytes"),
        ("budget zero", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=0), ValueError, "budget_bytes"),
        ("budget negative", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=-5), ValueError,
         "budget_bytes"),
        ("loss_for not callable", lambda: recommend_policy(None, X, budget_bytes=10), TypeError, "loss_for"),
        ("non-array argument", lambda: recommend_policy(tagged_loss_for, {"x": "1"}, budget_bytes=10),
         TypeError, "args[0]['x']"),
        ("argnums a str", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=10, argnums="0"),
         TypeError, "argnums"),
        ("policies an int", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=10, policies=3),
         TypeError, "policies"),
        ("policies a set", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=10,
                                                    policies={"dots_saveable"}), TypeError, "policies"),
        ("has_aux None", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=10, has_aux=None),
         TypeError, "has_aux"),
        ("kwargs a str", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=10, kwargs="scale=2"),
         TypeError, "kwargs"),
        ("rows an int", lambda: recommend_policy(rows=3, budget_bytes=10), TypeError, "rows"),
        ("rows holding a dict", lambda: recommend_policy(rows=[row(), {"name": "x"}], budget_bytes=10),
         TypeError, "rows"),
        ("rows empty", lambda: recommend_policy(rows=[], budget_bytes=10), ValueError, "rows"),
        ("rows and loss_for", lambda: recommend_policy(tagged_loss_for, X, rows=[row()], budget_bytes=10),
         ValueError, "rows"),
        ("rows and argnums", lambda: recommend_policy(rows=[row()], budget_bytes=10, argnums=1), ValueError,
         "argnums"),
        ("neither loss_for nor rows", lambda: recommend_policy(budget_bytes=10), TypeError, "loss_for"),
        ("target unknown", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=10, target="h1000"),
         ValueError, "target"),
        ("target an int", lambda: recommend_policy(tagged_loss_for, X, budget_bytes=10, target=100), TypeError,
         "target"),
        ("rows and target", lambda: recommend_policy(rows=[row()], budget_bytes=10, target="h100"), ValueError,
         "target"),
        ("no budget off a TPU", lambda: recommend_policy(tagged_loss_for, X), TypeError, "budget_bytes"),
        ("no budget for CPU rows", lambda: recommend_policy(rows=[row()]), TypeError, "budget_bytes"),
    ],
    "plan_names": [
        ("budget a float", lambda: plan_names(tagged_loss_for, X, budget_bytes=1e6), TypeError,
         "budget_bytes"),
        ("no budget on a GPU", lambda: plan_names(tagged_loss_for, X, target="h100"), TypeError, "budget_bytes"),
        ("budget zero", lambda: plan_names(tagged_loss_for, X, budget_bytes=0), ValueError,
         "budget_bytes"),
        ("loss_for not callable", lambda: plan_names(None, X, budget_bytes=10), TypeError, "loss_for"),
        ("non-array argument", lambda: plan_names(tagged_loss_for, {"x": "1"}, budget_bytes=10),
         TypeError, "args[0]['x']"),
        ("argnums a str", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, argnums="0"),
         TypeError, "argnums"),
        ("names a str", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, names="hidden"),
         TypeError, "names"),
        ("names empty", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, names=[]),
         ValueError, "names"),
        ("names a set", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, names={"hidden"}),
         TypeError, "names"),
        ("a name not tagged", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, names=["hiden"]),
         ValueError, "names"),
        ("no tags at all", lambda: plan_names(lambda p: jnp.sum, X, budget_bytes=10), ValueError,
         "names"),
        ("measured a list", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, measured=[]),
         TypeError, "measured"),
        ("argnums out of range", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, argnums=1),
         ValueError, "argnums"),
        ("has_aux an int", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, has_aux=1), TypeError,
         "has_aux"),
        ("has_aux with a scalar output", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, has_aux=True),
         TypeError, "has_aux"),
        ("kwargs a tuple", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, kwargs=()), TypeError,
         "kwargs"),
        ("target unknown", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, target="tpu-v4"), ValueError,
         "target"),
        ("target a list", lambda: plan_names(tagged_loss_for, X, budget_bytes=10, target=["h100"]), TypeError,
         "target"),
        ("measured rows of another target", lambda: plan_names(
            tagged_loss_for, X, budget_bytes=10, measured={"no checkpoint": row(name="no checkpoint")},
            target="h100"), ValueError, "target"),
    ],
    "Comparison": [
        ("rows an int", lambda: Comparison(3), TypeError, "rows"),
        ("a row not a PolicyRow", lambda: Comparison([row(), ("x", 1)]), TypeError, "rows"),
    ],
    "tables.Table": [
        ("frame a dict", lambda: Table({"a": [1]}), TypeError, "frame"),
        ("units names a missing column", lambda: Table(FRAME, units={"b": "bytes"}), ValueError, "units"),
        ("unknown unit kind", lambda: Table(FRAME, units={"a": "minutes"}), ValueError, "units"),
        ("cell_classes a list", lambda: Table(FRAME, cell_classes=[["x"]]), TypeError, "cell_classes"),
        ("cell_classes of another shape",
         lambda: Table(FRAME, cell_classes=pd.DataFrame({"a": ["x", "y"]})), ValueError, "cell_classes"),
        ("html_columns names a missing column", lambda: Table(FRAME, html_columns=["b"]), ValueError,
         "html_columns"),
    ],
    "tables.unit_for": [
        ("unknown kind", lambda: tables.unit_for([1], "minutes"), ValueError, "kind"),
    ],
    "tables.human_bytes": [
        ("a float", lambda: tables.human_bytes(1.5), TypeError, "nbytes"),
        ("a str", lambda: tables.human_bytes("12"), TypeError, "nbytes"),
    ],
    "matrix_table": [
        ("a row lacks a column",
         lambda: policy_matrix.matrix_table({"p": {"inputs": "saved"}}, MATRIX_ROW), ValueError, "rows"),
        ("baseline lacks a column",
         lambda: policy_matrix.matrix_table({"p": MATRIX_ROW}, {"inputs": "saved"}), ValueError, "baseline"),
    ],
    "policy_table": [
        ("rows an int", lambda: policy_table(3), TypeError, "rows"),
        ("rows a str", lambda: policy_table("rows"), TypeError, "rows"),
        ("a row not a PolicyRow", lambda: policy_table([row(), {"name": "x"}]), TypeError, "rows"),
        ("rows a set", lambda: policy_table({row(name="a"), row(name="b")}), TypeError, "rows"),
    ],
    "NamePlan": [
        ("choices not a dict", lambda: NamePlan("p", None, 0, 0, 1, 1, 1.0, choices=[("h", "keep")]), TypeError,
         "choices"),
        ("an unknown answer", lambda: NamePlan("p", None, 0, 0, 1, 1, 1.0, choices={"h": "save"}), ValueError,
         "choices"),
        ("search not a str", lambda: NamePlan("p", None, 0, 0, 1, 1, 1.0, search=3), TypeError, "search"),
        ("negative flops, as for PolicyRow", lambda: NamePlan("p", None, 0, 0, -1, 1, 1.0), ValueError, "flops"),
    ],
    "PolicyRow": [
        ("negative residual bytes", lambda: row(residual_bytes=-1), ValueError, "residual_bytes"),
        ("float temp bytes", lambda: row(temp_bytes=1.5), TypeError, "temp_bytes"),
        ("negative flops", lambda: row(flops=-3), ValueError, "flops"),
        ("str reported flops", lambda: row(reported_flops="3"), TypeError, "reported_flops"),
        ("name not a str", lambda: row(name=None), TypeError, "name"),
        ("policy not callable", lambda: row(policy="dots_saveable"), TypeError, "policy"),
        ("ratio not a number", lambda: row(flops_ratio="1.0"), TypeError, "flops_ratio"),
        ("negative peak bytes", lambda: row(peak_bytes=-1), ValueError, "peak_bytes"),
        ("float host bytes", lambda: row(host_bytes=0.5), TypeError, "host_bytes"),
        ("target unknown", lambda: row(target="h1000"), ValueError, "target"),
        ("target an int", lambda: row(target=100), TypeError, "target"),
    ],
    "count_flops": [
        ("a str", lambda: count_flops("hlo"), TypeError, "compiled"),
        ("a jitted function, not compiled", lambda: count_flops(jax.jit(total)), TypeError, "compiled"),
        ("a lowered program", lambda: count_flops(jax.jit(total).lower(X)), TypeError, "compiled"),
    ],
    "FlopCount": [
        ("negative total", lambda: FlopCount(-1, 0, ()), ValueError, "total"),
        ("float reported", lambda: FlopCount(1, 0.5, ()), TypeError, "reported"),
        ("loops holding a non-Loop", lambda: FlopCount(1, 1, ("body",)), TypeError, "loops"),
    ],
    "Loop": [
        ("negative trip count", lambda: Loop("body", -1, 10), ValueError, "trip_count"),
        ("body not a str", lambda: Loop(3, 1, 10), TypeError, "body"),
        ("negative body flops", lambda: Loop("body", 1, -10), ValueError, "body_flops"),
    ],
    "checkpoint_dot_policy": [
        ("w1 not an array", lambda: checkpoint_dot_policy("w", W, jnp.ones((3, 2))), TypeError, "w1"),
        ("w2 integer", lambda: checkpoint_dot_policy(W, jnp.ones((2, 2), int), jnp.ones((3, 2))),
         TypeError, "w2"),
        ("x 1-D", lambda: checkpoint_dot_policy(W, W, jnp.ones(2)), ValueError, "x"),
        ("w1 of the wrong shape", lambda: checkpoint_dot_policy(W, W, jnp.ones((3, 5))), ValueError, "w1"),
        ("w2 of the wrong shape", lambda: checkpoint_dot_policy(W, jnp.ones((2, 3)), jnp.ones((3, 2))),
         ValueError, "w2"),
        ("w1 None", lambda: checkpoint_dot_policy(None, W, jnp.ones((3, 2))), TypeError, "w1"),
        ("x None", lambda: checkpoint_dot_policy(W, W, None), TypeError, "x"),
        ("w1 a ragged list", lambda: checkpoint_dot_policy([[1.0, 2.0], [3.0]], W, jnp.ones((3, 2))),
         ValueError, "w1"),
        ("x a ragged list", lambda: checkpoint_dot_policy(W, W, [[1.0, 2.0], [3.0]]), ValueError, "x"),
    ],
    "check_solution": [
        ("fn not callable", lambda: check_solution("solution"), TypeError, "fn"),
        ("fn None", lambda: check_solution(None), TypeError, "fn"),
        ("seed a str", lambda: check_solution(checkpoint_dot_policy, seed="0"), TypeError, "seed"),
        ("seed negative", lambda: check_solution(checkpoint_dot_policy, seed=-1), ValueError, "seed"),
    ],
    "Residual": [
        ("negative dimension", lambda: Residual((-2, 3), np.dtype(F32), "primitive", "sin"), ValueError, "shape"),
        ("shape a str", lambda: Residual("2,3", np.dtype(F32), "primitive", "sin"), TypeError, "shape"),
        ("unknown dtype", lambda: Residual((2,), "float99", "primitive", "sin"), TypeError, "dtype"),
        ("unknown kind", lambda: Residual((2,), np.dtype(F32), "computed", "sin"), ValueError, "kind"),
        ("unknown memory", lambda: Residual((2,), np.dtype(F32), "primitive", "sin", "", "disk"),
         ValueError, "memory"),
        ("name not a str", lambda: Residual((2,), np.dtype(F32), "primitive", 3), TypeError, "name"),
        ("location not a str", lambda: Residual((2,), np.dtype(F32), "primitive", "sin", None),
         TypeError, "location"),
    ],
    "Residuals": [
        ("items an int", lambda: Residuals(3), TypeError, "items"),
        ("items holding a str", lambda: Residuals(["sin"]), TypeError, "items"),
        ("by_kind unknown", lambda: Residuals([]).by_kind("computed"), ValueError, "kind"),
    ],
    "FwdBwd": [
        ("forward an int", lambda: FwdBwd(3, []), TypeError, "forward"),
        ("backward holding a str", lambda: FwdBwd([], ["a = sin b"]), TypeError, "backward"),
        ("Line depth negative", lambda: Line("a", depth=-1), ValueError, "depth"),
        ("Line mark unknown", lambda: Line("a", mark="kept"), ValueError, "mark"),
        ("Line text not a str", lambda: Line(None), TypeError, "text"),
    ],
    "policy_diagram": [
        ("fn not callable", lambda: policy_diagram("layer", W, X[:2]), TypeError, "fn"),
        ("policies an int", lambda: policy_diagram(layer, W, X[:2], policies=3), TypeError, "policies"),
        ("policies a str", lambda: policy_diagram(layer, W, X[:2], policies="dots_saveable"),
         TypeError, "policies"),
        ("policies a set", lambda: policy_diagram(layer, W, X[:2], policies={"dots_saveable"}),
         TypeError, "policies"),
        ("policies empty", lambda: policy_diagram(layer, W, X[:2], policies={}), ValueError, "policies"),
        ("a label not a str", lambda: policy_diagram(layer, W, X[:2], policies={1: None}),
         TypeError, "policies"),
        ("a policy an int", lambda: policy_diagram(layer, W, X[:2], policies={"p": 3}),
         TypeError, "policies"),
        ("an unknown policy name", lambda: policy_diagram(layer, W, X[:2], policies={"p": "dots_savable"}),
         ValueError, "policies"),
        ("a factory by name", lambda: policy_diagram(layer, W, X[:2], policies=["save_only_these_names"]),
         ValueError, "policies"),
        ("a name not a str", lambda: policy_diagram(layer, W, X[:2], policies=[None]), TypeError, "policies"),
        ("a policy with a wrong signature", lambda: policy_diagram(layer, W, X[:2], policies={"p": not_a_policy}),
         TypeError, "policies"),
        ("a policy answering an int", lambda: policy_diagram(layer, W, X[:2], policies={"p": answers_an_int}),
         TypeError, "policies"),
        ("an integer argument", lambda: policy_diagram(layer, jnp.ones((2, 2), int), jnp.ones((1, 2), int)),
         TypeError, "arguments"),
        ("argnums out of range", lambda: policy_diagram(layer, W, X[:2], argnums=2), ValueError, "argnums"),
        ("no return", lambda: policy_diagram(no_return, X), ValueError, "fn"),
        ("fn returning a str", lambda: policy_diagram(lambda x: "abc", X), TypeError, "fn"),
    ],
    "PolicyDiagram": [
        ("values an int", lambda: PolicyDiagram(3, []), TypeError, "values"),
        ("lanes holding a str", lambda: PolicyDiagram([], ["dots_saveable"]), TypeError, "lanes"),
        ("a lane of the wrong length", lambda: PolicyDiagram([], [Lane("p", "", ("kept",), (True,))]),
         ValueError, "lanes"),
        ("Lane fate unknown", lambda: Lane("p", "", ("saved",), (True,)), ValueError, "fates"),
        ("Lane in_forward too short", lambda: Lane("p", "", ("kept",), ()), ValueError, "in_forward"),
        ("Value kind unknown", lambda: Value("a", "input", "a", "f32[2]", 8), ValueError, "kind"),
        ("Value nbytes negative", lambda: Value("a", "argument", "a", "f32[2]", -8), ValueError, "nbytes"),
        ("save to an int", lambda: PolicyDiagram([], []).save(3), TypeError, "path"),
    ],
    "ApiItem": [
        ("unknown group", lambda: ApiItem("function", "checkpoint", "api-checkpoint"), ValueError, "group"),
        ("empty name", lambda: ApiItem("policy", "", "policy-"), ValueError, "name"),
        ("label not a str", lambda: ApiItem("policy", "dots_saveable", None), TypeError, "label"),
    ],
    "undocumented": [
        ("an int", lambda: undocumented(3), TypeError, "documented_labels"),
        ("a single str", lambda: undocumented("api-checkpoint"), TypeError, "documented_labels"),
        ("holding a non-str", lambda: undocumented(["api-checkpoint", 3]), TypeError, "documented_labels"),
        ("holding an unhashable list", lambda: undocumented([["api-checkpoint"]]), TypeError,
         "documented_labels"),
        ("holding an unhashable dict", lambda: undocumented(["api-checkpoint", {}]), TypeError,
         "documented_labels"),
    ],
    "models.exercise_loss": [
        ("policy not callable", lambda: models.exercise_loss("dots_saveable"), TypeError, "policy"),
        ("policy with a wrong signature", lambda: models.exercise_loss(not_a_policy), TypeError, "policy"),
        ("w1 of the wrong shape", eval_loss(models.exercise_loss, sds(3, 3), EX[1], EX[2]), ValueError, "w1"),
        ("x integer", eval_loss(models.exercise_loss, EX[0], EX[1], sds(3, 2, dtype=jnp.int32)), TypeError, "x"),
        ("x 3-D", eval_loss(models.exercise_loss, EX[0], EX[1], sds(1, 3, 2)), ValueError, "x"),
    ],
    "models.exercise_args": [
        ("n zero", lambda: models.exercise_args(0, 4), ValueError, "n"),
        ("n a str", lambda: models.exercise_args("8", 4), TypeError, "n"),
        ("d a float", lambda: models.exercise_args(8, 4.0), TypeError, "d"),
        ("d too large to exist", lambda: models.exercise_args(1, 2**32), ValueError, "d"),
    ],
    "models.mlp_unrolled_loss": [
        ("policy not callable", lambda: models.mlp_unrolled_loss(3), TypeError, "policy"),
        ("layer counts differ", eval_loss(models.mlp_unrolled_loss, mlp_params(3, 2), sds(4, 2)),
         ValueError, "params['w_out']"),
        ("x width differs", eval_loss(models.mlp_unrolled_loss, mlp_params(), sds(4, 3)), ValueError, "x"),
        ("params missing a key", eval_loss(models.mlp_unrolled_loss, {"w_in": sds(2, 2, 2)}, sds(4, 2)),
         ValueError, "params"),
        ("params a list", eval_loss(models.mlp_unrolled_loss, [sds(2, 2, 2)], sds(4, 2)), TypeError, "params"),
    ],
    "models.mlp_scan_loss": [
        ("policy with a wrong signature", lambda: models.mlp_scan_loss(not_a_policy), TypeError, "policy"),
        ("layer counts differ", eval_loss(models.mlp_scan_loss, mlp_params(2, 3), sds(4, 2)),
         ValueError, "params['w_out']"),
        ("w_in not square", eval_loss(models.mlp_scan_loss, {"w_in": sds(2, 2, 3), "w_out": sds(2, 2, 3)},
                                      sds(4, 2)), ValueError, "params['w_in']"),
        ("x integer", eval_loss(models.mlp_scan_loss, mlp_params(), sds(4, 2, dtype=jnp.int32)), TypeError, "x"),
    ],
    "models.mlp_args": [
        ("layers zero", lambda: models.mlp_args(0, 4, 4), ValueError, "layers"),
        ("n a float", lambda: models.mlp_args(2, 4.5, 4), TypeError, "n"),
        ("d a bool", lambda: models.mlp_args(2, 4, True), TypeError, "d"),
        ("too large to exist", lambda: models.mlp_args(2**20, 1, 2**22), ValueError, "layers"),
    ],
    "models.transformer_loss": [
        ("policy not callable", lambda: models.transformer_loss([]), TypeError, "policy"),
        ("out of the wrong shape", eval_loss(models.transformer_loss, transformer_params(out=sds(1, 2, 2, 5)),
                                             sds(1, 2, 4)), ValueError, "params['out']"),
        ("x 2-D", eval_loss(models.transformer_loss, transformer_params(), sds(2, 4)), ValueError, "x"),
        ("x width differs", eval_loss(models.transformer_loss, transformer_params(), sds(1, 2, 8)),
         ValueError, "x"),
    ],
    "models.transformer_args": [
        ("heads not dividing d_model", lambda: models.transformer_args(1, 1, 2, 6, 4, 8), ValueError, "heads"),
        ("seq negative", lambda: models.transformer_args(1, 1, -2, 4, 2, 8), ValueError, "seq"),
        ("mlp_dim a str", lambda: models.transformer_args(1, 1, 2, 4, 2, "8"), TypeError, "mlp_dim"),
        ("scores too large to exist", lambda: models.transformer_args(1, 1, 2**31, 4, 2, 8), ValueError, "seq"),
        ("batch zero", lambda: models.transformer_args(1, 0, 2, 4, 2, 8), ValueError, "batch"),
        ("layers a float", lambda: models.transformer_args(1.0, 1, 2, 4, 2, 8), TypeError, "layers"),
        ("d_model zero", lambda: models.transformer_args(1, 1, 2, 0, 2, 8), ValueError, "d_model"),
    ],
    "models.measured_policy": [
        ("an unknown name", lambda: models.measured_policy("dots"), ValueError, "name"),
    ],
    "models.DecoderConfig": [
        ("layers zero", lambda: models.DecoderConfig("x", 0, 8, 2, 1, 8, 16), ValueError, "layers"),
        ("heads not dividing d_model", lambda: models.DecoderConfig("x", 1, 8, 3, 1, 8, 16), ValueError,
         "heads"),
        ("kv_heads not dividing heads", lambda: models.DecoderConfig("x", 1, 8, 4, 3, 8, 16), ValueError,
         "kv_heads"),
        ("an odd head width", lambda: models.DecoderConfig("x", 1, 6, 2, 1, 8, 16), ValueError, "heads"),
        ("vocab a float", lambda: models.DecoderConfig("x", 1, 8, 2, 1, 8, 16.0), TypeError, "vocab"),
        ("name not a str", lambda: models.DecoderConfig(8, 1, 8, 2, 1, 8, 16), TypeError, "name"),
    ],
    "models.decoder_loss": [
        ("config a str", lambda: models.decoder_loss("8b", None), TypeError, "config"),
        ("policy not callable", lambda: models.decoder_loss(SMALL_DECODER, "full"), TypeError, "policy"),
        ("mesh a tuple", lambda: models.decoder_loss(SMALL_DECODER, None, mesh=(8, 1)), TypeError, "mesh"),
    ],
    "models.decoder_step": [
        ("optimizer without update", lambda: models.decoder_step(SMALL_DECODER, None, optimizer=object()),
         TypeError, "optimizer"),
        ("config None", lambda: models.decoder_step(None, None), TypeError, "config"),
    ],
    "models.decoder_args": [
        ("batch zero", lambda: models.decoder_args(SMALL_DECODER, 0, 8), ValueError, "batch"),
        ("seq a float", lambda: models.decoder_args(SMALL_DECODER, 1, 8.0), TypeError, "seq"),
        ("param_dtype an int type", lambda: models.decoder_args(SMALL_DECODER, 1, 8, param_dtype=jnp.int32),
         TypeError, "param_dtype"),
        ("logits too large to exist", lambda: models.decoder_args(models.LLAMA3["8b"], 2**30, 2**30),
         ValueError, "batch"),
        ("mesh with another axis", lambda: models.decoder_args(SMALL_DECODER, 1, 8, mesh=jax.sharding.Mesh(
            np.array(targets.target_devices("h100", 2)), ("model",))), ValueError, "mesh"),
    ],
    "fit.step_memory": [
        ("row a dict", lambda: fit.step_memory({}, jnp.sum, X, X, X), TypeError, "row"),
        ("loss not callable", lambda: fit.step_memory(ROW, 3, X, X, X), TypeError, "loss"),
        ("also a list", lambda: fit.step_memory(ROW, jnp.sum, X, X, X, also=[1]), TypeError, "also"),
        ("also negative", lambda: fit.step_memory(ROW, jnp.sum, X, X, X, also={"logits": -1}), ValueError,
         "also"),
    ],
    "fit.largest_batch": [
        ("no target", lambda: fit.largest_batch(tagged_loss_for, lambda b: (X,), policy=None, budget_bytes=1,
                                                target=None), TypeError, "target"),
        ("multiple zero", lambda: fit.largest_batch(tagged_loss_for, lambda b: (X,), policy=None, budget_bytes=1,
                                                    target="h100", multiple=0), ValueError, "multiple"),
        ("limit below multiple", lambda: fit.largest_batch(tagged_loss_for, lambda b: (X,), policy=None,
                                                           budget_bytes=1, target="h100", multiple=4, limit=2),
         ValueError, "limit"),
        ("args_for not callable", lambda: fit.largest_batch(tagged_loss_for, (X,), policy=None, budget_bytes=1,
                                                            target="h100"), TypeError, "args_for"),
        ("budget a float", lambda: fit.largest_batch(tagged_loss_for, lambda b: (X,), policy=None,
                                                     budget_bytes=1.5, target="h100"), TypeError, "budget_bytes"),
        ("no budget on a GPU", lambda: fit.largest_batch(tagged_loss_for, lambda b: (X,), policy=None,
                                                         target="h100"), TypeError, "budget_bytes"),
    ],
    "fit.device_nbytes": [
        ("a str leaf", lambda: fit.device_nbytes({"w": "abc"}), TypeError, "tree"),
    ],
    "models.decoder_optimizer": [
        ("learning_rate a str", lambda: models.decoder_optimizer("fast"), TypeError, "learning_rate"),
        ("learning_rate negative", lambda: models.decoder_optimizer(-1.0), ValueError, "learning_rate"),
    ],
    "targets.device_bytes": [
        ("not a memory analysis", lambda: targets.device_bytes({"temp": 1}, "h100"), TypeError, "memory"),
        ("an unknown target", lambda: targets.device_bytes(SimpleNamespace(peak_memory_in_bytes=1), "h1000"),
         ValueError, "target"),
    ],
    "targets.usable_bytes": [
        ("a GPU", lambda: targets.usable_bytes("h100"), ValueError, "name"),
        ("an unknown target", lambda: targets.usable_bytes("tpu-v9"), ValueError, "target"),
        ("a number", lambda: targets.usable_bytes(5), TypeError, "target"),
    ],
    "targets.estimate_step": [
        ("a number", lambda: targets.estimate_step(3, "h100"), TypeError, "program"),
        ("host bytes on a TPU", lambda: targets.estimate_step({"kernels": [], "host_out": 8, "host_in": 0},
                                                             "tpu-v5e"), ValueError, "program"),
    ],
    "models.transformer_matmul_flops": [
        ("a str size", lambda: models.transformer_matmul_flops("2", 1, 2, 4, 2, 8), TypeError, "layers"),
        ("negative batch", lambda: models.transformer_matmul_flops(1, -1, 2, 4, 2, 8), ValueError, "batch"),
        ("heads not dividing d_model", lambda: models.transformer_matmul_flops(1, 1, 2, 5, 2, 8),
         ValueError, "heads"),
    ],
    "policy_matrix.example_model": [
        ("w of the wrong shape", lambda: policy_matrix.example_model(
            W, *policy_matrix.example_inputs()[1:]), ValueError, "w"),
        ("kernel integer", lambda: policy_matrix.example_model(
            policy_matrix.example_inputs()[0], jnp.ones((1, 1, 3, 3), int), policy_matrix.example_inputs()[2]),
         TypeError, "kernel"),
        ("x a list", lambda: policy_matrix.example_model(*policy_matrix.example_inputs()[:2], [[1.0]]),
         TypeError, "x"),
    ],
    "policy_label": [
        ("not callable", lambda: policy_label("dots_saveable"), TypeError, "policy"),
    ],
    "policy_matrix.classify": [
        ("not a Residual", lambda: policy_matrix.classify("dot_general"), TypeError, "residual"),
    ],
    "policy_matrix.keeps": [
        ("policy not callable", lambda: policy_matrix.keeps(3), TypeError, "policy"),
        ("policy with a wrong signature", lambda: policy_matrix.keeps(not_a_policy), TypeError, "policy"),
        ("policy answering an int", lambda: policy_matrix.keeps(answers_an_int), TypeError, "policy"),
        ("a policy factory, not called", lambda: policy_matrix.keeps(P.save_only_these_names),
         TypeError, "policy"),
        ("checkpointed a str", lambda: policy_matrix.keeps(None, checkpointed="no"), TypeError, "checkpointed"),
        ("policy without checkpoint", lambda: policy_matrix.keeps(P.dots_saveable, checkpointed=False),
         ValueError, "policy"),
    ],
}

PARAMS = [pytest.param(call, error, name, id=f"{function}: {case}")
          for function, cases in CASES.items() for case, call, error, name in cases]


@pytest.mark.parametrize("call, error, name", PARAMS)
def test_bad_input_is_refused_naming_the_argument(call, error, name):
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error  # not a subclass from JAX's internals
    message = str(info.value)
    assert re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", message), message
    assert "Traceback" not in message and "<locals>" not in message


def test_every_public_function_has_cases():
    import remat_guide

    covered = {key.rpartition(".")[2] for key in CASES}
    assert set(remat_guide.__all__) - {"SolutionError"} <= covered | {"Residual"}
    for module, names in ((models, models.__all__), (policy_matrix, policy_matrix.__all__),
                          (targets, ["device_bytes", "estimate_step"])):
        functions = {n for n in names if callable(getattr(module, n))}
        assert functions - {"example_inputs", "example_policies"} <= covered, module.__name__


def test_baseline_that_checkpoints_warns():
    with pytest.warns(UserWarning, match=r"loss_for\(None\) still uses jax.checkpoint"):
        with pytest.raises(ValueError, match="unknown policy name"):
            compare_policies(lambda p: tagged_loss_for(P.nothing_saveable if p is None else p), X,
                             policies=["nothing"])


def test_a_name_some_policy_uses_and_one_it_does_not_warns():
    policies = {"both": P.save_only_these_names("hidden", "hiden"), "bad": answers_an_int}
    with pytest.warns(UserWarning, match=r"policies\['both'\].*'hiden'.*the names it tags: 'hidden'"):
        with pytest.raises(TypeError, match=r"policies\['bad'\]"):
            compare_policies(tagged_loss_for, X, policies=policies)


def test_an_error_inside_a_policy_keeps_its_type_and_names_the_policy():
    def buggy(prim, *avals, **params):
        return params["no such parameter"]

    with pytest.raises(KeyError) as info:
        compare_policies(tagged_loss_for, X, policies={"buggy": buggy})
    assert any("policies['buggy']" in note for note in info.value.__notes__)


def test_the_wrong_name_error_lists_the_names_the_function_tags():
    with pytest.raises(ValueError, match="the names it tags: 'hidden'"):
        compare_policies(tagged_loss_for, X, policies={"s": P.save_only_these_names("hiden")})


def test_a_function_may_take_a_keyword_named_f():
    def g(x, f):
        return jnp.sum(jnp.sin(x) * f)

    assert [(r.kind, r.name) for r in saved_residuals(g, X, f=X)] == [
        ("argument", "f"), ("primitive", "sin"), ("primitive", "cos")]
    assert fwd_bwd(g, X, f=X).saved == ("sin", "cos")


def test_generators_are_accepted_where_sequences_are():
    rows = [row(name="a"), row(name="b")]
    assert str(policy_table(r for r in rows)) == str(policy_table(rows))
    assert len(Residuals(r for r in [Residual((2,), np.dtype(F32), "primitive", "sin")])) == 1
    assert undocumented(item.label for item in api_items()) == []


def test_byte_and_flop_totals_are_exact_python_ints():
    huge = Residual((2**31, 2**31, 4), np.dtype(F32), "primitive", "sin")
    assert huge.nbytes == 2**66 and type(huge.nbytes) is int
    assert Residuals([huge, huge]).total_bytes == 2**67
    residuals = saved_residuals(total, sds(2**20, 2**20))
    assert residuals.total_bytes == 2**42 and type(residuals.total_bytes) is int
    flops = models.transformer_matmul_flops(2**14, 2**10, 2**12, 2**12, 2**5, 2**14)
    assert type(flops) is int and flops > 2**63
    assert flops == 2**14 * (8 * 2**22 * 2**24 + 4 * 2**10 * 2**24 * 2**12 + 4 * 2**22 * 2**12 * 2**14)
    assert type(row(temp_bytes=np.int64(5)).temp_bytes) is int


def test_huge_sizes_are_refused_before_xla():
    # What aborted the process: the arrays of exercise_args(1, 2**32) cannot exist.
    with pytest.raises(ValueError, match=f"at most {MAX_BYTES:,}"):
        models.exercise_args(1, 2**32)


def test_no_warning_for_good_input():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        saved_residuals(total, X)
        policy_matrix.keeps(lambda prim, *avals, **params: prim.name == "sin")


def test_a_set_of_labels_is_accepted_where_order_does_not_matter():
    assert undocumented({item.label for item in api_items()}) == []


def nnx_block_loss_for(copy):
    """A loss_for over an NNX block with dropout, rebuilt by nnx.merge with or without copy."""
    nnx = pytest.importorskip("flax.nnx")

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(4, 4, rngs=rngs)
            self.dropout = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.dropout(jnp.tanh(self.linear(x)))

    graphdef, params, rest = nnx.split(Block(nnx.Rngs(params=0, dropout=1)), nnx.Param, ...)

    def loss_for(policy):
        def loss(params, rest, x):
            model = nnx.merge(graphdef, params, rest, copy=copy)
            call = lambda m, x: m(x)  # noqa: E731
            call = call if policy is None else nnx.remat(call, policy=policy)
            return jnp.mean(call(model, x) ** 2)
        return loss

    return loss_for, (params, rest, jnp.ones((2, 4)))


def test_an_nnx_loss_that_reuses_its_rng_state_is_told_to_copy_it():
    loss_for, args = nnx_block_loss_for(copy=False)
    with pytest.raises(ValueError, match=r"^loss_for\(None\): .*nnx\.merge\(.*copy=True\)") as info:
        compare_policies(loss_for, *args, argnums=0, policies=["nothing_saveable"])
    assert type(info.value.__cause__).__name__ == "TraceContextError"
    # What the message says to do works: with copy=True the gradient traces.
    loss_for, args = nnx_block_loss_for(copy=True)
    grads = jax.grad(loss_for(P.nothing_saveable))(*args)
    assert jax.tree.structure(grads) == jax.tree.structure(args[0])

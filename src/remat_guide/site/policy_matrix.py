"""One small model, every standard policy, and which kinds of its values each policy keeps."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import pandas as pd
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from remat_guide import _validation as validation
from remat_guide._labels import policy_label
from remat_guide.residuals import Residual, Residuals, saved_residuals
from remat_guide.tables import Table

__all__ = ["COLUMNS", "classify", "example_inputs", "example_model", "example_policies",
           "keeps", "matrix_table", "LINK_CLASS"]

BATCH, SEQ, WIDTH = 2, 4, 8

COLUMNS = ("inputs", "matmul", "batched matmul", "convolution", "named 'proj'", "named 'act'",
           "other intermediates")
"""The kinds of values in :func:`example_model`, in the order the matrix shows them."""

SAVED, OFFLOADED, NOT_KEPT = "saved", "offloaded", "not kept"
_JAX_POLICIES_MODULE = jax.checkpoint_policies.nothing_saveable.__module__


def example_model(w: jax.Array, kernel: jax.Array, x: jax.Array) -> jax.Array:
    """A scalar loss with one value of every kind a policy can tell apart.

    ``x @ w`` is a matrix product without batch dimensions, tagged ``"proj"``; its
    ``tanh`` is an elementwise nonlinearity, tagged ``"act"``; an ``einsum`` with a batch
    dimension follows, then a convolution and a ``sin``.

    Args:
        w: Weights of shape ``(WIDTH, WIDTH)``.
        kernel: Convolution kernel of shape ``(1, 1, 3, 3)`` (OIHW).
        x: Inputs of shape ``(BATCH * SEQ, WIDTH)``.

    Returns:
        A scalar.

    Raises:
        TypeError: If an argument is not a floating-point array.
        ValueError: If an argument does not have the shape above.

    Examples:
        >>> from remat_guide.site.policy_matrix import example_inputs, example_model
        >>> example_model(*example_inputs()).shape
        ()
    """
    for name, value, shape in (("w", w, (WIDTH, WIDTH)), ("kernel", kernel, (1, 1, 3, 3)),
                               ("x", x, (BATCH * SEQ, WIDTH))):
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(value).__name__}")
        if not jnp.issubdtype(value.dtype, jnp.floating):
            raise TypeError(f"{name} must have a floating dtype, got {value.dtype}")
        if tuple(value.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")
    proj = checkpoint_name(x @ w, "proj")
    act = checkpoint_name(jnp.tanh(proj), "act")
    seq = act.reshape(BATCH, SEQ, WIDTH)
    scores = jnp.einsum("bqd,bkd->bqk", seq, seq)
    conv = lax.conv(scores[:, None], kernel, window_strides=(1, 1), padding="SAME")
    return jnp.sum(jnp.sin(conv))


def example_inputs() -> tuple[jax.Array, jax.Array, jax.Array]:
    """Arguments ``(w, kernel, x)`` for :func:`example_model`, drawn from a fixed key.

    Examples:
        >>> from remat_guide.site.policy_matrix import example_inputs
        >>> [a.shape for a in example_inputs()]
        [(8, 8), (1, 1, 3, 3), (8, 8)]
    """
    k_w, k_kernel, k_x = jax.random.split(jax.random.key(0), 3)
    return (jax.random.normal(k_w, (WIDTH, WIDTH)) / WIDTH,
            jax.random.normal(k_kernel, (1, 1, 3, 3)),
            jax.random.normal(k_x, (BATCH * SEQ, WIDTH)))


def example_policies() -> dict[str, Callable]:
    """Every name of ``jax.checkpoint_policies``, called where it is a factory.

    The factories get arguments that fit :func:`example_model`: the name ``"act"``, and
    for the two offloading policies ``"device"`` to ``"pinned_host"`` (``"proj"`` is the
    offloaded name).

    Examples:
        >>> import jax
        >>> from remat_guide import policy_label
        >>> from remat_guide.site.policy_matrix import example_policies
        >>> policies = example_policies()
        >>> sorted(policies) == sorted(vars(jax.checkpoint_policies))
        True
        >>> policy_label(policies["dots_saveable"])
        'dots_saveable / checkpoint_dots'
        >>> policy_label(policies["save_only_these_names"])
        'save_only_these_names(...)'
    """
    P = jax.checkpoint_policies
    return {
        "everything_saveable": P.everything_saveable,
        "nothing_saveable": P.nothing_saveable,
        "dots_saveable": P.dots_saveable,
        "checkpoint_dots": P.checkpoint_dots,
        "dots_with_no_batch_dims_saveable": P.dots_with_no_batch_dims_saveable,
        "checkpoint_dots_with_no_batch_dims": P.checkpoint_dots_with_no_batch_dims,
        "save_only_these_names": P.save_only_these_names("act"),
        "save_any_names_but_these": P.save_any_names_but_these("act"),
        "save_anything_except_these_names": P.save_anything_except_these_names("act"),
        "save_from_both_policies": P.save_from_both_policies(
            P.dots_with_no_batch_dims_saveable, P.save_only_these_names("act")),
        "offload_dot_with_no_batch_dims": P.offload_dot_with_no_batch_dims(
            "device", "pinned_host"),
        "save_and_offload_only_these_names": P.save_and_offload_only_these_names(
            names_which_can_be_saved=["act"], names_which_can_be_offloaded=["proj"],
            offload_src="device", offload_dst="pinned_host"),
    }


def classify(residual: Residual) -> str:
    """The column of :data:`COLUMNS` that a residual of :func:`example_model` belongs to.

    Args:
        residual: One residual of :func:`example_model` (or of a checkpointed version).

    Returns:
        One of :data:`COLUMNS`. A ``dot_general`` output of rank 3 is the batched
        ``einsum``; every value that is not an input, a product, a convolution or a named
        value counts as an "other intermediate".

    Raises:
        TypeError: If ``residual`` is not a :class:`~remat_guide.Residual`.

    Examples:
        >>> import numpy as np
        >>> from remat_guide import Residual
        >>> from remat_guide.site.policy_matrix import classify
        >>> classify(Residual((2, 4, 4), np.dtype("float32"), "primitive", "dot_general"))
        'batched matmul'
    """
    if not isinstance(residual, Residual):
        raise TypeError(f"residual must be a remat_guide.Residual, got {type(residual).__name__}")
    if residual.kind == "argument":
        return "inputs"
    if residual.kind == "named":
        return f"named {residual.name}"
    if residual.name == "dot_general":
        return "batched matmul" if len(residual.shape) == 3 else "matmul"
    if residual.name == "conv_general_dilated":
        return "convolution"
    return "other intermediates"


def keeps(policy: Callable | None, *, checkpointed: bool = True) -> tuple[Residuals, dict[str, str]]:
    """What ``jax.grad`` keeps of :func:`example_model` under ``policy``.

    Args:
        policy: A policy for ``jax.checkpoint`` (or ``None``, its default).
        checkpointed: ``False`` to differentiate the model without ``jax.checkpoint``;
            ``policy`` must then be ``None``.

    Returns:
        The residuals, and for each column of :data:`COLUMNS` one of ``"saved"``,
        ``"offloaded"``, ``"saved + offloaded"`` or ``"not kept"`` (the backward pass
        recomputes such values if it needs them).

    Raises:
        TypeError: If ``policy`` is neither ``None`` nor callable as
            ``policy(prim, *avals, **params)``, answers other than True/False (or
            ``Saveable``, ``Recompute``, ``Offloadable``), or ``checkpointed`` is not a bool.
        ValueError: If a policy is given with ``checkpointed=False``.

    Examples:
        >>> import jax
        >>> from remat_guide.site.policy_matrix import keeps
        >>> residuals, row = keeps(jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
        >>> row["matmul"], row["batched matmul"], row["inputs"]
        ('saved', 'not kept', 'saved')
    """
    if policy is not None and not callable(policy):
        raise TypeError(f"policy must be callable or None, got {type(policy).__name__}")
    checkpointed = validation.boolean(checkpointed, "checkpointed")
    if not checkpointed and policy is not None:
        raise ValueError("policy must be None when checkpointed=False")
    if policy is not None:
        name = f"policy {policy_label(policy)}"
        validation.policy(policy, name)
        if getattr(policy, "__module__", None) != _JAX_POLICIES_MODULE:
            # JAX treats some of its own policies by identity: only the user's are wrapped.
            policy = validation.PolicyProbe(policy, name)
    fn = jax.checkpoint(example_model, policy=policy) if checkpointed else example_model
    residuals = saved_residuals(fn, *example_inputs())
    places: dict[str, set[str]] = {column: set() for column in COLUMNS}
    for residual in residuals:
        places[classify(residual)].add(residual.memory)
    row = {}
    for column, memories in places.items():
        if memories == {"device"}:
            row[column] = SAVED
        elif memories == {"host"}:
            row[column] = OFFLOADED
        elif memories:
            row[column] = f"{SAVED} + {OFFLOADED}"
        else:
            row[column] = NOT_KEPT
    return residuals, row


def _check_row(row: Any, where: str) -> None:
    """A row of the matrix must map every column of :data:`COLUMNS` to its cell."""
    if not isinstance(row, Mapping):
        raise TypeError(f"{where} must be a mapping from columns to cells, got {type(row).__name__}")
    missing = [c for c in COLUMNS if c not in row]
    if missing:
        raise ValueError(f"{where} lacks the columns {missing}")


# What a cell of the matrix table says, given what keeps() found for the policy and for the
# model without jax.checkpoint. A value that the plain backward pass does not keep is not a
# residual (a checkpointed backward pass may still recompute it on the way to one), shown as
# a dash so that every row stays one line; one that it keeps but the policy does not is
# recomputed.
KEPT, RECOMPUTED, NOT_RESIDUAL = "kept", "recomputed", "\u2014"
_SHOWN = {SAVED: KEPT, OFFLOADED: OFFLOADED, f"{SAVED} + {OFFLOADED}": f"{KEPT} + {OFFLOADED}"}
_CLASS = {KEPT: "remat-kept", OFFLOADED: "remat-offloaded", RECOMPUTED: "remat-recomputed",
          NOT_RESIDUAL: "remat-not-a-residual"}
_LEGEND = {"remat-kept": "kept", "remat-offloaded": "offloaded to host memory",
           "remat-recomputed": "recomputed",
           "remat-not-a-residual": f"{NOT_RESIDUAL} not kept even without a checkpoint"}
LINK_CLASS = "remat-code-link"
"""The CSS class of a link whose text is code (a policy's name in the matrix's first column)."""


def _policy_link(name: str, page: str) -> str:
    """A link to a policy's section: the name in ``<code>``, breakable after each underscore."""
    anchor = f"policy-{name.replace('_', '-')}"
    text = html.escape(name).replace("_", "_<wbr>")
    return f'<a class="{LINK_CLASS}" href="{html.escape(page)}#{anchor}"><code>{text}</code></a>'


def matrix_table(rows: Mapping[str, Mapping[str, str]], baseline: Mapping[str, str], *,
                 links: str | None = None) -> Table:
    """The policy matrix as a colour-coded table: one row per policy, one column per kind of value.

    Args:
        rows: For each row label, a mapping from every column of :data:`COLUMNS` to its
            cell, as returned by :func:`keeps`. Labels may hold HTML (links).
        baseline: The row of the model without ``jax.checkpoint``
            (``keeps(None, checkpointed=False)[1]``), which tells a value the backward
            pass keeps from one that is not a residual.
        links: The page of the policies' sections (``""`` for the page showing the
            table), or ``None`` to show the labels as they are. When given, each label
            that names a policy of ``jax.checkpoint_policies`` is shown in ``<code>`` as a
            link to its section (anchor ``#policy-<name>``, with ``-`` for ``_``), of CSS
            class ``"remat-code-link"``, and may wrap after each underscore.

    Returns:
        A :class:`~remat_guide.tables.Table` whose cells say ``"kept"``, ``"offloaded"``,
        ``"kept + offloaded"``, ``"recomputed"`` (the policy does not keep a value the
        backward pass needs) or ``"\u2014"`` (not a residual: the model without
        ``jax.checkpoint`` does not keep it either), each with a CSS class
        ``remat-<state>`` that the site's stylesheet colours, and a key above it.

    Raises:
        TypeError: If ``links`` is neither a str nor ``None``.
        ValueError: If a row or the baseline lacks one of :data:`COLUMNS`.

    Examples:
        >>> from remat_guide.site.policy_matrix import COLUMNS, matrix_table
        >>> baseline = dict.fromkeys(COLUMNS, "not kept") | {"matmul": "saved"}
        >>> row = dict.fromkeys(COLUMNS, "not kept") | {"inputs": "saved"}
        >>> frame = matrix_table({"p": row}, baseline).frame
        >>> frame.loc[0, "inputs"], frame.loc[0, "matmul"], frame.loc[0, "convolution"]
        ('kept', 'recomputed', '\u2014')
        >>> table = matrix_table({"nothing_saveable": row}, baseline, links="")
        >>> table.frame.loc[0, "policy"]
        '<a class="remat-code-link" href="#policy-nothing-saveable"><code>nothing_<wbr>saveable</code></a>'
        >>> str(table).splitlines()[-1].split()[:4]
        ['nothing_saveable', 'kept', 'recomputed', '\u2014']
    """
    if links is not None and not isinstance(links, str):
        raise TypeError(f"links must be a str or None, got {type(links).__name__}")
    _check_row(baseline, "baseline")
    for label, row in rows.items():
        _check_row(row, f"rows[{label!r}]")
    policies = set(vars(jax.checkpoint_policies))

    def shown(column: str, cell: str) -> str:
        if cell != NOT_KEPT:
            return _SHOWN.get(cell, cell)
        return NOT_RESIDUAL if baseline[column] == NOT_KEPT else RECOMPUTED

    def label_html(label: str) -> str:
        return _policy_link(label, links) if links is not None and label in policies else label

    cells = [[shown(column, row[column]) for column in COLUMNS] for row in rows.values()]
    frame = pd.DataFrame([[label_html(label), *line] for label, line in zip(rows, cells)],
                         columns=["policy", *COLUMNS])
    classes = pd.DataFrame([["", *(_CLASS.get(c.split(" + ")[-1], "") for c in line)]
                            for line in cells], columns=frame.columns)
    return Table(frame, cell_classes=classes, legend=_LEGEND, html_columns=["policy"],
                 table_class="remat-matrix")

"""Probe what the installed JAX's ``jax.checkpoint`` offers and does, as one JSON document.

The "What changed across versions" page runs this file under several JAX versions, each in
its own interpreter, and compares the documents side by side (``remat_guide.site.versions``
builds the page's tables from them). So the file is also a plain script:
``python version_probe.py`` prints the document to stdout. It needs only the standard library
and JAX, because the older environments hold JAX and its dependencies alone.

Everything in the document is deterministic: no memory addresses, no absolute paths, no
timings. Each probe item catches its own exceptions and records them as
``{"error": "TypeName: message"}``, so an item that an old version cannot run does not stop
the others.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import io
import json
import re
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["DIRECT_POLICIES", "FACTORY_CALLS", "main", "probe", "residual_lines"]

# Bump when the layout of the document changes.
PROBE_FORMAT = 1

#: The policies the probe uses as they are (not policy factories).
DIRECT_POLICIES = (
    "checkpoint_dots",
    "checkpoint_dots_with_no_batch_dims",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "everything_saveable",
    "nothing_saveable",
)

#: The call the probe makes to each policy factory, by the factory's name. Each value is a
#: pair of the call's arguments as text (for the page) and a function of the
#: ``jax.checkpoint_policies`` namespace that makes the policy.
FACTORY_CALLS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "save_only_these_names": ('("a")', lambda cp: cp.save_only_these_names("a")),
    "save_any_names_but_these": ('("a")', lambda cp: cp.save_any_names_but_these("a")),
    "save_anything_except_these_names": (
        '("a")', lambda cp: cp.save_anything_except_these_names("a")),
    "save_from_both_policies": (
        '(dots_with_no_batch_dims_saveable, save_only_these_names("a"))',
        lambda cp: cp.save_from_both_policies(
            cp.dots_with_no_batch_dims_saveable, cp.save_only_these_names("a"))),
    "offload_dot_with_no_batch_dims": (
        '("device", "pinned_host")',
        lambda cp: cp.offload_dot_with_no_batch_dims("device", "pinned_host")),
    "save_and_offload_only_these_names": (
        '(names_which_can_be_saved=["b"], names_which_can_be_offloaded=["a"], '
        'offload_src="device", offload_dst="pinned_host")',
        lambda cp: cp.save_and_offload_only_these_names(
            names_which_can_be_saved=["b"], names_which_can_be_offloaded=["a"],
            offload_src="device", offload_dst="pinned_host")),
    # Classes that some versions expose in the namespace besides the functions above.
    "SaveOnlyTheseNames": ('(frozenset({"a"}))', lambda cp: cp.SaveOnlyTheseNames(frozenset({"a"}))),
    "SaveAnyNamesButThese": (
        '(frozenset({"a"}))', lambda cp: cp.SaveAnyNamesButThese(frozenset({"a"}))),
    "SaveAndOffloadOnlyTheseNames": (
        '(frozenset({"b"}), frozenset({"a"}), "device", "pinned_host")',
        lambda cp: cp.SaveAndOffloadOnlyTheseNames(
            frozenset({"b"}), frozenset({"a"}), "device", "pinned_host")),
}

_ADDRESS = re.compile(r"\s*\bat 0x[0-9a-fA-F]+|0x[0-9a-fA-F]+")
# An absolute path (not part of a URL): keep only its last component.
_PATH = re.compile(r"(?<![\w:/.])/(?:[^\s:'\"()<>/]+/)+([^\s:'\"()<>/]+)")
_LOCATION = re.compile(r" from (\S+?):(\d+)(?::(\d+))? \(([^)]*)\)$")
# The same, or an empty location (values made by an offloading policy have none).
_ANY_LOCATION = re.compile(r" from (?:\S+?:\d+(?::\d+)? \([^)]*\))?$")


def clean(text: str) -> str:
    """``text`` without memory addresses and with every absolute path cut to its base name.

    >>> clean("<function f at 0x7f3a2c1b0d30> in /usr/lib/python3/site-packages/jax/api.py")
    '<function f> in api.py'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _PATH.sub(r"\1", _ADDRESS.sub("", text))


def _error(exc: BaseException) -> str:
    """``TypeName: first line of the message``, cleaned."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return clean(f"{type(exc).__name__}: {message}".rstrip(": "))


def _item(fn: Callable[[], Any]) -> Any:
    """Runs one probe item; an exception becomes ``{"error": "TypeName: message"}``."""
    try:
        return fn()
    except Exception as exc:  # one failing item must not stop the probe
        return {"error": _error(exc)}


def _outcome(fn: Callable[[], Any]) -> str:
    """``"ok"`` when ``fn()`` returns, else the exception as ``raises TypeName: message``."""
    try:
        fn()
    except Exception as exc:
        return f"raises {_error(exc)}"
    return "ok"


def _result(fn: Callable[[], Any]) -> Any:
    """``fn()``, or the exception it raised as ``raises TypeName: message``."""
    try:
        return fn()
    except Exception as exc:
        return f"raises {_error(exc)}"


@contextlib.contextmanager
def _flag(name: str, value: Any):
    """Sets a JAX config flag for the duration of a ``with`` block, then restores it."""
    old = jax.config.values[name]
    jax.config.update(name, value)
    try:
        yield
    finally:
        jax.config.update(name, old)


def _parameters(fn: Callable) -> list[dict[str, str]]:
    """Each parameter of ``fn``: name, kind, default (``"-"`` for none) and annotation."""
    params = []
    for p in inspect.signature(fn).parameters.values():
        default = "-" if p.default is inspect.Parameter.empty else clean(repr(p.default))
        annotation = ("-" if p.annotation is inspect.Parameter.empty
                      else p.annotation if isinstance(p.annotation, str)
                      else inspect.formatannotation(p.annotation))
        params.append({"name": p.name, "kind": p.kind.name, "default": default,
                       "annotation": clean(annotation)})
    return params


# --- the function whose residuals are listed for every policy ------------------------------

def probe_fn(x, w, q, img, ker):
    """Named values, a matmul, a batched matmul, a convolution and nonlinearities."""
    from jax.ad_checkpoint import checkpoint_name
    a = checkpoint_name(jnp.sin(x), "a")                      # f32[2,3], named "a"
    b = checkpoint_name(jnp.cos(x), "b")                      # f32[2,3], named "b"
    m = jnp.tanh((a * b) @ w)                                 # dot f32[2,5], tanh f32[2,5]
    bm = jnp.einsum("bij,bjk->bik", q, q)                     # batched dot f32[4,2,2]
    conv = lax.conv(img, ker, (1, 1), "VALID")                # conv f32[1,1,4,4]
    return jnp.sum(m) + jnp.sum(jnp.sin(bm)) + jnp.sum(jnp.exp(conv))


def probe_args() -> tuple:
    """Fixed arguments for :func:`probe_fn`: all ones, of distinct shapes."""
    return (jnp.ones((2, 3)), jnp.ones((3, 5)), jnp.ones((4, 2, 2)), jnp.ones((1, 1, 6, 6)),
            jnp.ones((1, 1, 3, 3)))


def residual_lines(fn: Callable, *args: Any) -> list[str]:
    """The lines ``jax.ad_checkpoint.print_saved_residuals`` prints, without their location.

    Each line keeps the value's type and where it comes from (``from the argument x``,
    ``named 'a'``, ``output of sin``); the ``from <file>:<line> (<function>)`` part is
    dropped, so that the lines are comparable across versions.

    Args:
        fn: The function to differentiate.
        *args: Its arguments.

    Returns:
        One line per residual, in the order JAX prints them.

    Raises:
        TypeError: If ``fn`` is not callable.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.site.version_probe import residual_lines
        >>> residual_lines(jax.checkpoint(lambda x: jnp.sum(jnp.sin(jnp.sin(x)))), jnp.ones(3))
        ['f32[3] from the argument x']
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    return [_ANY_LOCATION.sub("", line) for line in _printed_residuals(fn, *args)]


def _printed_residuals(fn: Callable, *args: Any) -> list[str]:
    from jax.ad_checkpoint import print_saved_residuals
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_saved_residuals(fn, *args)
    return [clean(line) for line in out.getvalue().splitlines()]


def _format_line(fn: Callable, *args: Any) -> str:
    """One printed residual line of a computed value, with its location turned into tokens."""
    lines = [line for line in _printed_residuals(fn, *args) if " output of " in line]
    match = _LOCATION.search(lines[0])
    if match is None:
        return lines[0]
    file, _, col, func = match.groups()
    token = f" from <file>.{file.rsplit('.', 1)[-1]}:<line>{':<column>' if col else ''} (<function>)"
    return lines[0][:match.start()] + token


def _policies() -> dict[str, Any]:
    cp = jax.checkpoint_policies
    names = sorted(n for n in dir(cp) if not n.startswith("_"))
    objects = {n: getattr(cp, n) for n in names}
    aliases = [[a, b] for i, a in enumerate(names) for b in names[i + 1:]
               if objects[a] is objects[b]]

    def kind(obj: Any) -> str:
        if inspect.isclass(obj):
            return "class"
        if inspect.isfunction(obj):
            return "function"
        return f"instance of {type(obj).__name__}"

    def importable() -> str:
        return _outcome(lambda: importlib.import_module("jax.checkpoint_policies"))

    return {"namespace_type": type(cp).__name__,
            "import_as_module": importable(),
            "names": names,
            "aliases": aliases,
            "kinds": {n: kind(o) for n, o in objects.items()},
            "made": {n: _item(lambda call=call: kind(call(cp)))
                     for n, (_, call) in FACTORY_CALLS.items()
                     if n in objects and not inspect.isclass(objects[n])}}


def _policy_for(name: str) -> Any:
    cp = jax.checkpoint_policies
    if name in DIRECT_POLICIES:
        return getattr(cp, name)
    if name in FACTORY_CALLS:
        return FACTORY_CALLS[name][1](cp)
    raise LookupError(f"the probe has no fixed call for {name!r}")


def _residuals_by_policy() -> dict[str, Any]:
    args = probe_args()
    rows: dict[str, Any] = {
        "(no checkpoint)": _item(lambda: residual_lines(probe_fn, *args)),
        "policy=None": _item(lambda: residual_lines(jax.checkpoint(probe_fn), *args)),
    }
    for name in sorted(n for n in dir(jax.checkpoint_policies) if not n.startswith("_")):
        rows[name] = _item(lambda name=name: residual_lines(
            jax.checkpoint(probe_fn, policy=_policy_for(name)), *args))
    return rows


# --- behaviour of each parameter -------------------------------------------------------------

def _static_argnames_outcome() -> str:
    def g(x, *, flag):
        if flag:  # a Python `if`: works only when `flag` is static
            return jnp.sin(x)
        return jnp.cos(x)

    ck = jax.checkpoint(g, static_argnames="flag")
    value = jax.grad(lambda x: ck(x, flag=True))(0.0)
    return "honoured" if float(value) == 1.0 else f"wrong gradient {float(value)!r}"


def _static_argnums_outcome() -> str:
    def g(x, flag):
        if flag:
            return jnp.sin(x)
        return jnp.cos(x)

    ck = jax.checkpoint(g, static_argnums=1)
    value = jax.grad(lambda x: ck(x, True))(0.0)
    return "honoured" if float(value) == 1.0 else f"wrong gradient {float(value)!r}"


def _prevent_cse_tuple_outcome(wrapper: Callable) -> str:
    def g(x, y):
        return jnp.sin(x) * jnp.cos(y)

    ck = wrapper(g, prevent_cse=(True, False))
    value = jax.grad(lambda x: ck(x, 0.0))(0.0)
    return "accepted" if float(value) == 1.0 else f"wrong gradient {float(value)!r}"


def _behaviour() -> dict[str, Any]:
    sin = jnp.sin

    def call(fn: Callable) -> Any:
        return jax.grad(fn)(1.0)

    return {
        "concrete=True": _outcome(lambda: call(jax.checkpoint(sin, concrete=True))),
        "concrete=False": _outcome(lambda: call(jax.checkpoint(sin, concrete=False))),
        "static_argnums=1 (Python if on it)": _result(_static_argnums_outcome),
        "static_argnames='flag' (Python if on it)": _result(_static_argnames_outcome),
        "prevent_cse=(True, False)": _result(lambda: _prevent_cse_tuple_outcome(jax.checkpoint)),
        "prevent_cse='yes'": _outcome(lambda: call(jax.checkpoint(sin, prevent_cse="yes"))),
        "policy='dots'": _outcome(lambda: call(jax.checkpoint(sin, policy="dots"))),
        "jax.remat(static_argnames='flag')": _outcome(
            lambda: jax.remat(sin, static_argnames="flag")),
        "jax.remat(prevent_cse=(True, False))": _result(
            lambda: _prevent_cse_tuple_outcome(jax.remat)),
    }


# --- jax_remat3 -----------------------------------------------------------------------------

def _top_primitives(fn: Callable, *args: Any) -> list[str]:
    return [e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns]


def _remat3() -> dict[str, Any]:
    if "jax_remat3" not in jax.config.values:
        return {"exists": False}
    x = jnp.ones(3)

    def f(x):
        return jnp.sum(jnp.sin(jnp.sin(x)))

    result: dict[str, Any] = {"exists": True}
    result["primitive (flag off)"] = _item(lambda: _top_primitives(jax.checkpoint(f), x))
    with _flag("jax_remat3", True):
        result["primitive (flag on)"] = _item(lambda: _top_primitives(jax.checkpoint(f), x))
    decorated = jax.checkpoint(f)  # decorated while the flag is off, called while it is on
    with _flag("jax_remat3", True):
        result["primitive (decorated off, called on)"] = _item(
            lambda: _top_primitives(decorated, x))
        result["static_argnames='flag' (Python if on it)"] = _result(_static_argnames_outcome)
        result["residuals"] = _residuals_by_policy()
    return result


# --- the document ---------------------------------------------------------------------------

def probe() -> dict[str, Any]:
    """Runs every probe item on the installed JAX and returns the document as a dict.

    Returns:
        The document as a JSON-serialisable dict. It holds the versions of JAX, jaxlib and
        Python, then one entry per probe item (``checkpoint_parameters``, ``policies``,
        ``residuals``, ``ad_checkpoint_exports``, ``remat3``, ...), each the item's result
        or ``{"error": "TypeName: message"}``.

    Examples:
        >>> import jax
        >>> from remat_guide.site.version_probe import probe
        >>> document = probe()
        >>> document["jax"] == jax.__version__
        True
        >>> [p["name"] for p in document["checkpoint_parameters"]]
        ['fun', 'prevent_cse', 'policy', 'static_argnums', 'static_argnames']
    """

    def exports() -> dict[str, str]:
        module = importlib.import_module("jax.ad_checkpoint")
        names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        return {n: type(getattr(module, n)).__name__ for n in sorted(names)
                if not inspect.ismodule(getattr(module, n)) or n == "checkpoint_policies"}

    def flags() -> dict[str, Any]:
        return {name: jax.config.values[name] for name in sorted(jax.config.values)
                if "remat" in name or "checkpoint" in name}

    def top_level() -> list[str]:
        return sorted(n for n in dir(jax) if "remat" in n.lower() or "checkpoint" in n.lower())

    def fmt_fn(x):
        return jnp.sum(jnp.sin(x))

    return {
        "probe_format": PROBE_FORMAT,
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "backend": _item(jax.default_backend),
        "python": ".".join(map(str, sys.version_info[:2])),
        # Read first, before any item changes a flag.
        "config_flags": _item(flags),
        "checkpoint_parameters": _item(lambda: _parameters(jax.checkpoint)),
        "remat_is_checkpoint": _item(lambda: jax.remat is jax.checkpoint),
        "remat_parameters": _item(lambda: _parameters(jax.remat)),
        "top_level_names": _item(top_level),
        "behaviour": _item(_behaviour),
        "policies": _item(_policies),
        "residuals": _item(_residuals_by_policy),
        "ad_checkpoint_exports": _item(exports),
        "remat3": _item(_remat3),
        "residual_line_format": _item(lambda: _format_line(fmt_fn, jnp.ones(3))),
    }


def main(argv: list[str] | None = None) -> int:
    """Prints the document of :func:`probe` as JSON (sorted keys, indented) to stdout.

    Args:
        argv: The command-line arguments; there must be none (``None`` reads ``sys.argv``).

    Returns:
        0, the exit status.

    Raises:
        SystemExit: With a usage message, if arguments are given.

    Examples:
        >>> from remat_guide.site.version_probe import main
        >>> main(["--json"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        SystemExit: usage: python ... (no arguments), got ['--json']
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        raise SystemExit(f"usage: python {sys.argv[0]} (no arguments), got {argv}")
    json.dump(probe(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

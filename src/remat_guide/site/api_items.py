"""The items of JAX's rematerialization API and which of them the reference documents (for the coverage guard)."""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Iterable

import jax
import jax.ad_checkpoint

__all__ = ["ApiItem", "api_items", "api_spellings", "undocumented"]

GROUPS = ("parameter", "policy", "export", "custom", "transform", "flag")
# The differentiation entry points whose every parameter decides what a backward pass keeps.
TRANSFORMS = ("vjp", "linearize")
# Custom-derivative APIs whose remat-related methods and parameters the reference documents.
CUSTOM = ("custom_vjp", "custom_jvp", "custom_gradient")
REMAT_WORDS = ("remat", "checkpoint")


@dataclasses.dataclass(frozen=True)
class ApiItem:
    """One public item of the ``jax.checkpoint`` API and the label that documents it.

    Attributes:
        group: ``"parameter"`` (of ``jax.checkpoint``), ``"policy"`` (a name in
            ``jax.checkpoint_policies``), ``"export"`` (of ``jax.ad_checkpoint``),
            ``"custom"`` (a remat-related method or parameter of ``jax.custom_vjp``,
            ``jax.custom_jvp`` or ``jax.custom_gradient``), ``"transform"`` (a parameter
            of ``jax.vjp`` or ``jax.linearize``) or ``"flag"`` (a configuration flag whose
            name holds ``remat`` or ``checkpoint``).
        name: The item's name: ``defremat``, ``custom_gradient.remat``, ``vjp.saveable_args``,
            ``jax_remat3``.
        label: The MyST label the reference must define for it: ``param-<name>``,
            ``policy-<name>``, ``api-<name>``, ``custom_vjp-defremat``,
            ``custom_gradient-remat``, ``vjp-<parameter>``, ``linearize-<parameter>`` or
            ``flag-<name>``.

    Raises:
        TypeError: If a field is not a str.
        ValueError: If ``group`` is unknown or ``name`` is empty.
    """

    group: str
    name: str
    label: str

    def __post_init__(self) -> None:
        for field in ("group", "name", "label"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"ApiItem.{field} must be a str, got "
                                f"{type(getattr(self, field)).__name__}")
        if self.group not in GROUPS:
            raise ValueError(f"ApiItem.group must be one of {GROUPS}, got {self.group!r}")
        if not self.name:
            raise ValueError("ApiItem.name must not be empty")

    @property
    def qualname(self) -> str:
        """How a reader writes the item, such as ``jax.checkpoint(prevent_cse=...)``."""
        if self.group == "parameter":
            return f"jax.checkpoint({self.name}=...)" if self.name != "fun" else "jax.checkpoint(fun)"
        if self.group == "policy":
            return f"jax.checkpoint_policies.{self.name}"
        if self.group == "export":
            return f"jax.ad_checkpoint.{self.name}"
        if self.group == "flag":
            return f"jax.config.{self.name}"
        owner, member, *parameter = self.name.split(".")
        if parameter:
            return f"jax.{owner}.{member}({parameter[0]}=...)"
        if self.group == "custom" and isinstance(getattr(jax, owner, None), type):
            return f"jax.{owner}.{member}"
        if self.group == "transform" and member in ("fun", "primals"):
            return f"jax.{owner}({'*' * (member == 'primals')}{member})"
        return f"jax.{owner}({member}=...)"


def _is_remat_word(name: str) -> bool:
    return any(word in name.lower() for word in REMAT_WORDS)


def _custom_items() -> list[ApiItem]:
    """Remat-related methods of the custom-derivative classes, and such parameters anywhere in them."""
    items = []
    for owner in CUSTOM:
        api = getattr(jax, owner)
        callables = {"": api}
        if isinstance(api, type):
            callables.update((name, value) for name, value in sorted(vars(api).items())
                             if callable(value) and not name.startswith("_"))
        for member, value in callables.items():
            if member and _is_remat_word(member):
                items.append(ApiItem("custom", f"{owner}.{member}", f"{owner}-{member}"))
                continue
            try:
                parameters = inspect.signature(value).parameters
            except (TypeError, ValueError):  # a builtin without a signature has no parameters to list
                continue
            for parameter in parameters:
                if _is_remat_word(parameter):
                    path = f"{member}.{parameter}" if member else parameter
                    items.append(ApiItem("custom", f"{owner}.{path}",
                                         f"{owner}-{path.replace('.', '-')}"))
    return items


def api_items() -> list[ApiItem]:
    """Every item of the installed JAX's rematerialization API, in the reference's order.

    Read afresh at each call: the parameters from ``inspect.signature(jax.checkpoint)``,
    the policies from ``vars(jax.checkpoint_policies)``, the exports from the public,
    non-module names of ``jax.ad_checkpoint``; then the methods of ``jax.custom_vjp`` and
    ``jax.custom_jvp`` whose name holds ``remat``, and the parameters of those classes, of
    their methods and of ``jax.custom_gradient`` whose name does; every parameter of
    ``jax.vjp`` and ``jax.linearize``; and the configuration flags in ``jax.config.values``
    whose name holds ``remat`` or ``checkpoint``.

    Examples:
        >>> from remat_guide.site.api_items import api_items
        >>> items = api_items()
        >>> [item.label for item in items if item.group == "parameter"][:2]
        ['param-fun', 'param-prevent_cse']
        >>> labels = {item.label for item in items}
        >>> "policy-dots_saveable" in labels and "vjp-saveable_args" in labels
        True
        >>> [item.qualname for item in items if item.group == "custom"][:2]
        ['jax.custom_vjp.defremat', 'jax.custom_vjp.defremat_with_logs']
    """
    items = [ApiItem("parameter", name, f"param-{name}")
             for name in inspect.signature(jax.checkpoint).parameters]
    items += [ApiItem("policy", name, f"policy-{name}")
              for name in vars(jax.checkpoint_policies) if not name.startswith("_")]
    items += [ApiItem("export", name, f"api-{name}")
              for name, value in sorted(vars(jax.ad_checkpoint).items())
              if not name.startswith("_") and not isinstance(value, types.ModuleType)]
    items += _custom_items()
    items += [ApiItem("transform", f"{transform}.{name}", f"{transform}-{name}")
              for transform in TRANSFORMS
              for name in inspect.signature(getattr(jax, transform)).parameters]
    items += [ApiItem("flag", name, f"flag-{name}")
              for name in sorted(jax.config.values) if _is_remat_word(name)]
    return items


def undocumented(documented_labels: Iterable[str]) -> list[ApiItem]:
    """The API items whose label is not among ``documented_labels``.

    Args:
        documented_labels: The labels the reference defines (an iterable of strings,
            such as the keys of Sphinx's ``std`` label table); case does not matter.

    Returns:
        The missing items, in the order of :func:`api_items`; empty when all are documented.

    Raises:
        TypeError: If ``documented_labels`` is not an iterable, is a single string, or
            holds a non-string.

    Examples:
        >>> from remat_guide.site.api_items import api_items, undocumented
        >>> everything = [item.label for item in api_items()]
        >>> undocumented(everything)
        []
        >>> [item.label for item in undocumented(everything[1:])]
        ['param-fun']
    """
    if isinstance(documented_labels, str):
        raise TypeError("documented_labels must be an iterable of labels, not a single string")
    if not isinstance(documented_labels, Iterable):
        raise TypeError(f"documented_labels must be an iterable of labels, got "
                        f"{type(documented_labels).__name__}")
    # Checked one by one, in order, before any set is made: an unhashable item (a list of
    # labels where a label belongs) is refused by name, not by set()'s own TypeError.
    labels = list(documented_labels)
    for label in labels:
        if not isinstance(label, str):
            raise TypeError(f"documented_labels must hold strings, got "
                            f"{type(label).__name__} {label!r:.40}")
    # Sphinx stores labels in lower case, so (api-Saveable)= is found as api-saveable.
    folded = {label.lower() for label in labels}
    return [item for item in api_items() if item.label.lower() not in folded]


def api_spellings() -> dict[str, str]:
    """Each spelling of an API name that the site documents, mapped to its reference label.

    The versions page links the names it prints with it, and the site's link check
    requires every such name in prose to link to that label.

    Examples:
        >>> from remat_guide.site.api_items import api_spellings
        >>> spellings = api_spellings()
        >>> spellings["jax.checkpoint_policies.dots_saveable"], spellings["concrete"]
        ('policy-dots_saveable', 'param-concrete-removed')
    """
    spellings = {}
    for policy in (n for n in dir(jax.checkpoint_policies) if not n.startswith("_")):
        for prefix in ("", "checkpoint_policies.", "jax.checkpoint_policies.",
                       "jax.ad_checkpoint.checkpoint_policies."):
            spellings[prefix + policy] = f"policy-{policy}"
    for name in ("checkpoint_policies", "jax.checkpoint_policies", "jax.ad_checkpoint.checkpoint_policies"):
        spellings[name] = "api-checkpoint_policies"
    for param in ("prevent_cse", "static_argnums", "static_argnames"):
        spellings[param] = f"param-{param}"
    spellings["concrete"] = "param-concrete-removed"
    for name in ("checkpoint_name", "checkpoint_name_fwd", "name_p", "print_saved_residuals",
                 "Saveable", "Recompute", "Offloadable"):
        spellings[name] = spellings[f"jax.ad_checkpoint.{name}"] = f"api-{name}"
    spellings["jax.checkpoint"] = "reference-parameters"
    spellings["jax.remat"] = "reference-remat"
    for flag in jax.config.values:
        if any(word in flag for word in REMAT_WORDS):
            spellings[flag] = f"flag-{flag}"
    for name in ("defremat", "defremat_with_logs"):
        spellings[name] = spellings[f"jax.custom_vjp.{name}"] = f"custom_vjp-{name}"
    spellings["optimize_remat"] = "custom_vjp-defvjp-optimize_remat"
    spellings["saveable_args"] = "vjp-saveable_args"
    return spellings

"""The coverage guard names every jax.checkpoint API item that the reference does not document."""

import inspect
import logging
import re
import types

import jax
import jax.ad_checkpoint
import pytest

import api_coverage
from helpers import ROOT
from remat_guide.site import api_items as coverage

REFERENCE = ROOT / "docs" / "reference"
EXT = REFERENCE.parent / "_ext"
# One or more labels, each on its own line, stacked right above a heading.
LABELS_ABOVE_HEADING = re.compile(r"^((?:\([\w-]+\)=\n)+)#+ ", re.MULTILINE)
LABEL = re.compile(r"\(([\w-]+)\)=")


def reference_labels() -> set[str]:
    """Labels that the reference pages place right above a heading."""
    return {label for page in REFERENCE.glob("*.md")
            for block in LABELS_ABOVE_HEADING.finditer(page.read_text(encoding="utf-8"))
            for label in LABEL.findall(block[1])}


def test_stacked_labels_above_one_heading_all_count():
    text = "(a-one)=\n(b-two)=\n## Heading\n\n(c-three)=\nnot a heading\n"
    blocks = LABELS_ABOVE_HEADING.finditer(text)
    assert [label for block in blocks for label in LABEL.findall(block[1])] == ["a-one", "b-two"]


def test_the_reference_documents_every_item_of_the_installed_jax():
    missing = coverage.undocumented(reference_labels())
    assert missing == [], [item.qualname for item in missing]


def test_items_cover_the_signature_the_policies_and_the_exports():
    labels = {item.label for item in coverage.api_items()}
    assert {f"param-{p}" for p in inspect.signature(jax.checkpoint).parameters} <= labels
    assert {f"policy-{p}" for p in vars(jax.checkpoint_policies)} <= labels
    assert "api-checkpoint_name" in labels and "api-Offloadable" in labels
    assert "api-checkpoint_name_fwd" in labels and "api-name_p" in labels
    # A parameter is an item exactly when the installed signature has it (0.12 dropped concrete).
    assert ("param-concrete" in labels) == ("concrete" in inspect.signature(jax.checkpoint).parameters)


def test_a_parameter_that_jax_does_not_have_is_not_an_item(monkeypatch):
    real = jax.checkpoint

    def checkpoint(fun, *, prevent_cse=True, policy=None, static_argnums=()):
        return real(fun, prevent_cse=prevent_cse, policy=policy, static_argnums=static_argnums)

    monkeypatch.setattr(jax, "checkpoint", checkpoint)
    labels = [item.label for item in coverage.api_items() if item.group == "parameter"]
    assert labels == ["param-fun", "param-prevent_cse", "param-policy", "param-static_argnums"]


def _inject_policy(monkeypatch):
    monkeypatch.setattr(jax.checkpoint_policies, "fake_policy_for_test", lambda *_, **__: True,
                        raising=False)
    return "jax.checkpoint_policies.fake_policy_for_test"


def _inject_flag(monkeypatch):
    # jax.config.values builds a new dict at each read, so the property itself is replaced.
    real = jax.config.values
    monkeypatch.setattr(type(jax.config), "values",
                        property(lambda self: {**real, "jax_fake_remat_knob": False}))
    return "jax.config.jax_fake_remat_knob"


def test_a_fake_policy_is_named(monkeypatch):
    _inject_policy(monkeypatch)
    missing = coverage.undocumented(reference_labels())
    assert [item.qualname for item in missing] == ["jax.checkpoint_policies.fake_policy_for_test"]


def test_a_fake_parameter_is_named(monkeypatch):
    real = jax.checkpoint

    def checkpoint(fun, **kwargs):
        return real(fun, **kwargs)

    # The installed signature plus one parameter that no JAX has.
    fake = inspect.Parameter("fake_knob", inspect.Parameter.KEYWORD_ONLY, default=False)
    checkpoint.__signature__ = inspect.signature(real).replace(
        parameters=[*inspect.signature(real).parameters.values(), fake])
    monkeypatch.setattr(jax, "checkpoint", checkpoint)
    missing = coverage.undocumented(reference_labels())
    assert [item.label for item in missing] == ["param-fake_knob"]


def test_a_fake_export_is_named_but_a_submodule_is_not(monkeypatch):
    monkeypatch.setattr(jax.ad_checkpoint, "fake_export", object(), raising=False)
    monkeypatch.setattr(jax.ad_checkpoint, "some_module", types.ModuleType("m"), raising=False)
    missing = coverage.undocumented(reference_labels())
    assert [item.qualname for item in missing] == ["jax.ad_checkpoint.fake_export"]


def test_items_cover_custom_rules_transforms_and_flags():
    labels = {item.label for item in coverage.api_items()}
    assert {"custom_vjp-defremat", "custom_vjp-defremat_with_logs", "custom_gradient-remat",
            "custom_vjp-defvjp-optimize_remat"} <= labels
    assert {f"vjp-{p}" for p in inspect.signature(jax.vjp).parameters} <= labels
    assert {f"linearize-{p}" for p in inspect.signature(jax.linearize).parameters} <= labels
    flags = {name for name in jax.config.values if "remat" in name or "checkpoint" in name}
    assert {"jax_remat3", "jax_compiler_enable_remat_pass"} <= flags
    assert {f"flag-{name}" for name in flags} <= labels
    # A flag whose name says nothing of remat is not an item.
    assert "flag-jax_enable_x64" not in labels


def test_an_injected_flag_is_named(monkeypatch):
    _inject_flag(monkeypatch)
    missing = coverage.undocumented(reference_labels())
    assert [(item.label, item.qualname) for item in missing] == [
        ("flag-jax_fake_remat_knob", "jax.config.jax_fake_remat_knob")]


def test_an_injected_vjp_parameter_is_named(monkeypatch):
    real = jax.vjp

    def vjp(fun, *primals, **kwargs):
        return real(fun, *primals, **kwargs)

    fake = inspect.Parameter("fake_residual_knob", inspect.Parameter.KEYWORD_ONLY, default=None)
    vjp.__signature__ = inspect.signature(real).replace(
        parameters=[*inspect.signature(real).parameters.values(), fake])
    monkeypatch.setattr(jax, "vjp", vjp)
    missing = coverage.undocumented(reference_labels())
    assert [(item.label, item.qualname) for item in missing] == [
        ("vjp-fake_residual_knob", "jax.vjp(fake_residual_knob=...)")]


def test_an_injected_remat_method_and_parameter_are_named(monkeypatch):
    monkeypatch.setattr(jax.custom_vjp, "defremat_fake", lambda self, fwd: None, raising=False)

    def custom_gradient(fun=None, *, with_logs=False, remat=False, checkpoint_fake=False):
        return fun

    monkeypatch.setattr(jax, "custom_gradient", custom_gradient)
    missing = coverage.undocumented(reference_labels())
    assert [(item.label, item.qualname) for item in missing] == [
        ("custom_vjp-defremat_fake", "jax.custom_vjp.defremat_fake"),
        ("custom_gradient-checkpoint_fake", "jax.custom_gradient(checkpoint_fake=...)")]


def test_labels_match_whatever_their_case():
    labels = [item.label.lower() for item in coverage.api_items()]
    assert coverage.undocumented(labels) == []


@pytest.mark.parametrize("bad, error", [("param-fun", "single string"), ([1], "hold strings")])
def test_bad_label_collections_are_rejected(bad, error):
    with pytest.raises(TypeError, match=error):
        coverage.undocumented(bad)


def test_the_sphinx_hook_warns_once_per_missing_item(monkeypatch, caplog):
    # Every real item is documented here, so the hook is tested apart from the pages.
    real = [item.label for item in coverage.api_items()]
    monkeypatch.setattr(jax.checkpoint_policies, "fake_policy_for_test", lambda *_, **__: True,
                        raising=False)
    labels = {label: ("reference/policies", label, "") for label in real}
    env = types.SimpleNamespace(domaindata={"std": {"labels": labels}})
    with caplog.at_level(logging.WARNING):
        api_coverage.check_environment(app=None, env=env)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "jax.checkpoint_policies.fake_policy_for_test is not documented" in warnings[0]
    assert "(policy-fake_policy_for_test)=" in warnings[0]


@pytest.mark.parametrize("inject", [_inject_policy, _inject_flag], ids=["policy", "flag"])
def test_a_sphinx_build_names_the_injected_item_and_fails_under_w(monkeypatch, tmp_path, inject):
    """The extension, loaded by a real Sphinx build, warns about the one undocumented item.

    The project defines a section for every item of the installed JAX (from ``api_items()``,
    before the fake item exists), so the only warning can be the fake item's: the build
    tests the extension, while the pages' coverage is the first test of this file. With
    ``-W`` (warnings as errors, as ``make html`` builds) the build stops on it.
    """
    import io

    from sphinx.application import Sphinx

    real = sorted(item.label for item in coverage.api_items())
    injected = inject(monkeypatch)
    src = tmp_path / "src"
    src.mkdir()
    conf = f'import sys\nsys.path.insert(0, {str(EXT)!r})\nextensions = ["api_coverage"]\n'
    (src / "conf.py").write_text(conf, encoding="utf-8")
    sections = "".join(f".. _{label}:\n\n{label}\n{'=' * len(label)}\n\n"
                       for label in real)
    (src / "index.rst").write_text(sections, encoding="utf-8")
    warnings = io.StringIO()
    app = Sphinx(str(src), str(src), str(tmp_path / "out"), str(tmp_path / "doctrees"), "dummy",
                 status=None, warning=warnings, freshenv=True)
    app.build()
    reported = [line for line in warnings.getvalue().splitlines() if "is not documented" in line]
    assert len(reported) == 1, warnings.getvalue()
    assert f"{injected} is not documented" in reported[0]
    strict = Sphinx(str(src), str(src), str(tmp_path / "strict"), str(tmp_path / "strict-doctrees"),
                    "dummy", status=None, warning=io.StringIO(), freshenv=True, warningiserror=True)
    strict.build()
    assert strict.statuscode != 0

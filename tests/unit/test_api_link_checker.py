"""The API-link checker, on synthetic pages: which spellings name an API, which contexts are exempt."""

import zlib

import pytest

from api_link_checker import label_anchors, named_label, unlinked_api_names


def _literal(text: str) -> str:
    spans = " ".join(f'<span class="pre">{word}</span>' for word in text.split())
    return f'<code class="docutils literal notranslate">{spans}</code>'


ANCHORS = {"param-prevent_cse": ("reference/parameters.html", "param-prevent-cse"),
           "reference-parameters": ("reference/parameters.html", "reference-parameters")}


def test_checker_passes_a_linked_mention_and_names_an_unlinked_one():
    page = (f'<section id="intro"><h1>{_literal("prevent_cse")} in a title</h1>'
            f'<p>Linked: <a class="reference internal" href="reference/parameters.html#param-prevent-cse">'
            f'{_literal("prevent_cse")}</a>. Plain: {_literal("prevent_cse=False")}.</p></section>')
    assert unlinked_api_names("tutorial.html", page, ANCHORS) == [
        "tutorial.html: `prevent_cse=False` should link to param-prevent_cse"]


@pytest.mark.parametrize("text, label", [
    ("jax.checkpoint", "reference-parameters"),
    ("jax.checkpoint(f, policy=p)", "reference-parameters"),
    ("jax.remat", "reference-remat"),
    ("dots_saveable", "policy-dots_saveable"),
    ("jax.checkpoint_policies.save_only_these_names('a')", "policy-save_only_these_names"),
    ("policy=jax.checkpoint_policies.dots_saveable", "policy-dots_saveable"),
    ("static_argnums=(0,)", "param-static_argnums"),
    ("concrete=True", "param-concrete-removed"),
    ("jax.ad_checkpoint.checkpoint_name", "api-checkpoint_name"),
    ("checkpoint_name(x, 'a')", "api-checkpoint_name"),
    ("Offloadable", "api-Offloadable"),
    ("jax.checkpoint_policies", "api-checkpoint_policies"),
    ("print_saved_residuals", "api-print_saved_residuals"),
    ("jax_remat3", "flag-jax_remat3"),
    ("jax_compiler_enable_remat_pass=False", "flag-jax_compiler_enable_remat_pass"),
    ("jax.custom_vjp.defremat", "custom_vjp-defremat"),
    ("defremat_with_logs(fwd, rem, bwd)", "custom_vjp-defremat_with_logs"),
    ("optimize_remat=True", "custom_vjp-defvjp-optimize_remat"),
    ("saveable_args=False", "vjp-saveable_args"),
])
def test_spellings_that_name_an_api(text, label):
    assert named_label(text) == label


@pytest.mark.parametrize("text", [
    "policy", "fun", "policy=None", "jax.grad", "jax.checkpointing", "my_dots_saveable",
    "saved_residuals", "remat_guide.saved_residuals", "x + concrete", "P.dots_saveable",
    "jax_custom_vjp3", "jax_enable_x64",
])
def test_spellings_that_name_no_api(text):
    assert named_label(text) is None


def test_checker_ignores_code_blocks_outputs_and_docstrings():
    page = ('<div class="highlight"><pre><span class="n">jax</span><span class="o">.</span>'
            '<span class="n">checkpoint</span></pre></div>'
            f'<div class="cell_output docutils container"><p><strong>{_literal("jax.checkpoint")}'
            '</strong></p></div>'
            f'<dl class="py function"><dd><p>Wraps {_literal("jax.checkpoint")}.</p></dd></dl>'
            f'<dl class="simple"><dd><p>Wraps {_literal("jax.checkpoint")}.</p></dd></dl>')
    assert unlinked_api_names("api.html", page, ANCHORS) == [
        "api.html: `jax.checkpoint` should link to reference-parameters"]


def test_a_mention_inside_its_own_section_may_stay_plain_there_only():
    section = (f'<section id="prevent-cse"><span id="param-prevent-cse"></span><h2>x</h2>'
               f'<p>{_literal("prevent_cse")}</p><section id="deeper"><h3>y</h3>'
               f'<p>{_literal("prevent_cse=True")}</p></section></section>'
               f'<section id="next"><p>{_literal("prevent_cse")}</p></section>')
    on_its_page = unlinked_api_names("reference/parameters.html", section, ANCHORS)
    assert on_its_page == ["reference/parameters.html: `prevent_cse` should link to param-prevent_cse"]
    elsewhere = unlinked_api_names("tutorial.html", section, ANCHORS)
    assert len(elsewhere) == 3


def test_label_anchors_reads_an_inventory(tmp_path):
    body = ("param-prevent_cse std:label -1 reference/parameters.html#param-prevent-cse prevent_cse\n"
            "reference-remat std:label -1 reference/parameters.html#$ jax.remat\n"
            "remat_guide.saved_residuals py:function 1 api.html#$ -\n")
    header = b"# Sphinx inventory version 2\n# Project: p\n# Version: \n# zlib below\n"
    (tmp_path / "objects.inv").write_bytes(header + zlib.compress(body.encode()))
    assert label_anchors(tmp_path) == {
        "param-prevent_cse": ("reference/parameters.html", "param-prevent-cse"),
        "reference-remat": ("reference/parameters.html", "reference-remat")}

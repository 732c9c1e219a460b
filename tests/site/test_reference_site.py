"""The built reference pages: every API item is linked from the index and every page is stable."""

import re

import jax
import pytest

from helpers import page_text
from remat_guide.site.api_items import api_items

PAGES = ["index", "parameters", "policies", "ad_checkpoint", "remat3", "custom_rules",
         "differentiation", "compiler_remat", "api_index"]


@pytest.fixture(scope="module")
def pages(built_page) -> dict[str, str]:
    return {p: built_page(f"reference/{p}.html") for p in PAGES}


def _anchor(label: str) -> str:
    return label.lower().replace("_", "-")


def test_the_api_index_links_every_item_to_its_section(pages):
    links = set(re.findall(r'href="([\w.]+\.html)#([\w-]+)"', pages["api_index"]))
    for item in api_items():
        target = [page for page, anchor in links if anchor == _anchor(item.label)]
        assert target, f"{item.qualname} is not linked from the API index"
        assert f'id="{_anchor(item.label)}"' in pages[target[0].removesuffix(".html")]
    # Only items of the installed JAX are listed: no link to a removed parameter's section.
    current = {_anchor(item.label) for item in api_items()}
    item_links = {anchor for _, anchor in links if anchor.startswith(
        ("param-", "policy-", "api-", "custom-", "vjp-", "linearize-", "flag-"))}
    assert item_links <= current, sorted(item_links - current)


@pytest.mark.parametrize("page", PAGES)
def test_reference_pages_print_the_jax_version_from_their_kernel(pages, page):
    executed = re.search(r"<pre[^>]*>(?:(?!</pre>).)*JAX " + re.escape(jax.__version__), pages[page], re.S)
    assert executed, "no executed output names the JAX version"


def test_policy_page_shows_the_contradictions_it_describes(pages):
    text = page_text(pages["policies"])
    assert "conv_general_dilated at policy_matrix.py" in text
    assert "docstring: None" in text
    assert "same as everything_saveable: True" in text
    assert "jax_remat3 on, same as everything_saveable: False" in text
    assert "f32<host>[8,8]" in text
    assert "checkpoint_dots is dots_saveable: True" in text
    assert "policy: dots_saveable / checkpoint_dots" in text
    assert "(nothing_saveable, offload_everything) -> offload_everything: True" in text
    assert "ValueError: The return value of the policies should be a boolean" in text
    assert "TypeError: unhashable type: 'list'" in text
    assert "0x" not in text and "<locals>" not in text


def test_parameter_page_shows_each_error_it_describes(pages):
    text = page_text(pages["parameters"])
    assert "TypeError: remat() got an unexpected keyword argument 'static_argnames'" in text
    assert text.count("TracerBoolConversionError: Attempted boolean conversion") == 3
    assert "TypeError: checkpoint() got an unexpected keyword argument 'concrete'" in text
    assert "use_sin=False by name: [-0.84147096" in text  # static_argnames under jax_remat3
    assert "jax_remat3 afterwards: False" in text
    assert "only in jax.checkpoint: ['static_argnames']" in text
    assert "no optimization_barrier" in text


def test_custom_rules_page_shows_the_flags_it_describes(pages):
    text = page_text(pages["custom_rules"])
    assert "NotImplementedError: custom_vjp.defremat requires the jax_custom_vjp3" in text
    assert "runs, gradient right" in text
    assert "kernel in backward" in text and "eval_jaxpr" in text  # optimize_remat
    assert "0x" not in text


def test_differentiation_page_compares_the_releases_and_argnums(pages):
    text = page_text(pages["differentiation"])
    assert "has_aux, reduce_axes, saveable_args, in_nzs" in text
    assert "raises NotImplementedError" in text
    assert "NotSaveable" in text


def test_compiler_remat_page_shows_the_option_and_the_plans(pages):
    text = page_text(pages["compiler_remat"])
    assert "flag False -> xla_disable_hlo_passes = 'rematerialization'" in text
    assert "H100, no checkpoint, pass off" in text
    assert "RESOURCE_EXHAUSTED" in text


def test_remat3_page_lists_what_a_policy_is_asked(pages):
    text = page_text(pages["remat3"])
    assert "dot_general" in text and "conv_general_dilated" in text
    assert "call_hi_primitive" in text

"""The JAX internals remat_guide relies on still exist where jax_internals.py reads them."""

import jax
import pytest

from remat_guide import count_flops
from remat_guide._jax_internals import REQUIRED, hlo_flops, scan_operands


@pytest.mark.parametrize("dotted", sorted(REQUIRED))
def test_each_internal_is_where_jax_internals_reads_it(dotted):
    module, attribute = REQUIRED[dotted]
    assert callable(getattr(module, attribute, None)), (
        f"JAX {jax.__version__} no longer has {dotted}: remat_guide/jax_internals.py must be "
        "updated (look for a public replacement first)")


def test_no_other_module_of_the_package_imports_jax_internals():
    import pathlib

    package = pathlib.Path(__import__("remat_guide").__file__).parent
    internal = ("jax._src", "import jaxlib", "from jaxlib")
    offenders = [p.name for p in package.rglob("*.py")
                 if p.name != "_jax_internals.py" and any(text in p.read_text() for text in internal)]
    assert offenders == [], f"modules importing JAX internals outside _jax_internals.py: {offenders}"


def test_hlo_flops_counts_a_matmul_like_the_compiled_program():
    x = jax.ShapeDtypeStruct((16, 32), "float32")
    w = jax.ShapeDtypeStruct((32, 8), "float32")
    compiled = jax.jit(lambda x, w: x @ w).lower(x, w).compile()
    assert count_flops(compiled).reported == 2 * 16 * 32 * 8
    text = compiled.as_text()
    assert hlo_flops(text) == 2 * 16 * 32 * 8


def test_scan_operands_splits_a_scan_equation_into_consts_carry_and_xs():
    import jax.numpy as jnp

    w = jnp.ones((4, 4))

    def step(carry, x):
        return carry @ w + x, None

    jaxpr = jax.make_jaxpr(lambda c, xs: jax.lax.scan(step, c, xs))(jnp.ones(4), jnp.ones((3, 4)))
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    assert scan_operands(eqn.params, eqn.invars) == ([eqn.invars[0]], [eqn.invars[1]], [eqn.invars[2]]), (
        f"JAX {jax.__version__} changed how a scan equation records its operands: "
        "update remat_guide/jax_internals.py:scan_operands")


def test_scan_operands_rejects_params_of_another_primitive():
    with pytest.raises(ValueError, match="params"):
        scan_operands({"num_consts": 0}, [])


def test_traceback_frames_name_the_line_that_made_an_equation():
    from remat_guide._jax_internals import traceback_frames

    def f(x):
        return jax.numpy.sin(x)

    frames = traceback_frames(jax.make_jaxpr(f)(1.0).eqns[0].source_info)
    line = f.__code__.co_firstlineno + 1
    assert (__file__, f.__qualname__, line) in frames, (
        f"JAX {jax.__version__} changed the frames of an equation's source_info: "
        "update remat_guide/jax_internals.py:traceback_frames")

"""The shard_map page's collective counters, on hand-written HLO and a real jaxpr."""

import jax
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from remat_guide.site.shard_map import hlo_collectives, jaxpr_collectives

HLO = """
ENTRY %main (a: f32[8,64], b: bf16[4]) -> f32[64,64] {
  %a = f32[8,64]{1,0} parameter(0)
  %b = bf16[4]{0} parameter(1)
  %all-gather.1 = f32[64,64]{1,0} all-gather(%a), channel_id=1, dimensions={0}
  %collective-permute.2 = bf16[4]{0} collective-permute(%b), source_target_pairs={{0,1}}
  %collective-permute.3 = bf16[4]{0} collective-permute(%collective-permute.2), channel_id=3
  ROOT %all-reduce.4 = f32[64,64]{1,0} all-reduce(%all-gather.1), channel_id=4
}
"""


def test_hlo_counts_each_collective_and_its_operand_bytes():
    assert hlo_collectives(HLO) == {"all-reduce": (1, 64 * 64 * 4), "all-gather": (1, 8 * 64 * 4),
                                    "collective-permute": (2, 2 * 4 * 2)}


def test_hlo_refuses_bad_input():
    with pytest.raises(TypeError, match="text"):
        hlo_collectives(b"HloModule")
    with pytest.raises(ValueError, match="%missing"):
        hlo_collectives("  %x = f32[2]{0} all-reduce(%missing), channel_id=1")


def test_jaxpr_counts_nested_calls_once_per_call():
    mesh = jax.make_mesh((1,), ("i",), axis_types=(AxisType.Auto,))
    layer = jax.checkpoint(lambda x: jax.lax.ppermute(x, "i", [(0, 0)]) * 2)
    f = jax.shard_map(lambda x: jax.lax.psum(layer(layer(x)), "i"), mesh=mesh,
                      in_specs=P("i"), out_specs=P())
    assert jaxpr_collectives(jax.make_jaxpr(f)(jax.numpy.ones(4))) == {"psum_invariant": 1,
                                                                         "ppermute": 2}
    with pytest.raises(TypeError, match="jaxpr"):
        jaxpr_collectives("not a jaxpr")

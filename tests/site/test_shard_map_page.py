"""The shard_map page: collectives counted per policy, answers first, no unfilled glue."""

from helpers import page_text, tables_with


def test_the_page_answers_first_with_its_counts(built_page):
    text = page_text(built_page("shard_map.html"))
    assert "{glue" not in text
    opening = text[:text.index("How the collectives are counted#")]
    assert "runs again in the backward pass" in opening
    assert "No time was measured" in opening
    assert "6 all-reduces instead of 4" in opening


def test_the_counts_tables_show_the_recomputed_collectives(built_page):
    html = built_page("shard_map.html")
    mlp = {row["policy"]: row for row in tables_with(html, "policy", "psum in the jaxpr")[0]}
    assert mlp["nothing_saveable"]["all-reduce compiled"] == "6"
    assert mlp["names: reduced"]["all-reduce compiled"] == "4"
    pipeline = tables_with(html, "step", "policy", "ppermute in the jaxpr", "collective-permute compiled")[0]
    recv = {row["policy"]: int(row["collective-permute compiled"]) for row in pipeline
            if row["step"] == "receive first"}
    send = {row["collective-permute compiled"] for row in pipeline if row["step"] == "send last"}
    assert recv["nothing_saveable"] > recv["no checkpoint"] == recv["names: received"]
    assert send == {"20"}

"""The "Host offloading in practice" page: memory kinds, the CPU's dropped move, host transfers, the H200's cost."""

from helpers import page_text, table_with, tables_with


def test_the_page_answers_first_and_every_number_is_glued(built_page):
    html = built_page("offload.html")
    text = page_text(html)
    assert "{glue" not in text
    opening = text[:text.index("Memory kinds on each backend#")]
    for words in ("On the CPU, offloading is accepted and does nothing",
                  "The transfers are asynchronous start/done pairs",
                  "Measured on an H200, offloading was slower than recomputing everything"):
        assert words in opening, words
    assert "the compilers’ plans, not a run" in opening
    # the answer first: what offloading cost against recomputing, then how it works
    assert opening.index("Measured on an H200, offloading was slower") < opening.index("Memory kinds:")
    # each term in plain words where the page first uses it
    first = " ".join(opening.split())
    assert "host memory locked in place" in first[first.index("pinned_host"):][:80]
    assert "tells the compiler which memory a value goes to" in first[first.index("placement annotation"):][:120]


def test_memory_kinds_and_the_h100_refusal_are_shown(built_page):
    text = page_text(built_page("offload.html"))
    assert "TPU v5 lite            ['device', 'pinned_host', 'unpinned_host']" in text
    assert "NVIDIA H100 80GB HBM3  []" in text
    assert "UNIMPLEMENTED: DefaultMemory is not supported" in text
    assert "annotate_device_placement calls in the lowered program: {'CPU': 0," in text


def test_the_plans_and_the_transfers_tables(built_page):
    html = built_page("offload.html")
    plan = table_with(html, "target, offload_dst")
    assert [row["target, offload_dst"] for row in plan] == [
        f"{target}, {label}" for target in ("h100", "tpu-v5e")
        for label in ("keep hidden", "pinned_host", "unpinned_host")]
    host = [value for row in plan for header, value in row.items() if header.startswith("host")]
    assert [float(value) > 0 for value in host] == [False, True, False] * 2
    transfers = tables_with(html, "pass", "operation", "direction")
    assert len(transfers) == 2  # the H100's and the TPU v5e's
    for rows in transfers:
        assert [(row["pass"], row["direction"]) for row in rows] == [
            ("forward", "to host"), ("backward", "from host")]


def test_the_measured_pairs_show_offloading_slower_at_every_size(built_page):
    html = built_page("offload.html")
    text = page_text(html)
    assert "NVIDIA H200, jax 0.11.2" in text and "measured on 2026-11-27" in text
    cost = table_with(html, "model", "kept (ms)")
    assert [row["model"] for row in cost] == ["4 layers, f32", "8 layers, f32", "8 layers, bf16",
                                              "0.8 B, bf16", "Llama 1B step"]
    extra = next(header for header in cost[0] if header.startswith("extra step time"))
    assert all(float(row[extra]) > 0 for row in cost)
    assert len(cost[0]) <= 4  # narrow enough for a phone

"""The "Will it fit?" page: Llama 3 training steps per policy, on H100s and TPU chips."""

import re

from helpers import html_tables, page_text, tables_with

SHORT = ["1B, 1 H100", "1B, 1 v5e", "1B, 4 v5e", "8B, 8 H100", "8B, 8 v5p", "70B, 64 H100"]
SETUPS = ["Llama 3.2 1B on one H100", "Llama 3.2 1B on one TPU v5e chip", "Llama 3.2 1B on 4 TPU v5e chips",
          "Llama 3.1 8B on 8 H100s", "Llama 3.1 8B on 8 TPU v5p chips", "Llama 3.1 70B on 64 H100s"]
SEARCHED = ["no checkpoint", "full", "minimal", "save_qkv_proj"]


def _setup_tables(html):
    """The per-setup tables: a policy column, then the memory, then whether it fits."""
    found = [rows for rows in html_tables(html) if rows and rows[0][0] == "policy" and len(rows[0]) > 2
             and rows[0][1].startswith("memory (") and rows[0][2] == "fits"]
    return [[dict(zip(header, row)) for row in body] for header, *body in found]


def test_the_page_answers_first_with_a_policy_and_a_batch_and_names_its_attention(built_page):
    html = built_page("fit.html")
    text = page_text(html)
    assert "{glue" not in text
    opening = text[:text.index("What the fused kernel changes#")]
    assert "the compiler’s plan" in opening and "never a run" in opening
    title = opening.index("Will it fit?#")
    assert "with a fused attention kernel" in opening[title:title + 600]  # in the first paragraph
    answers = tables_with(html, "setup", "pick", "tokens/s")
    assert len(answers) == 1
    assert [row["setup"] for row in answers[0]] == SHORT
    for row in answers[0]:
        gpu = "H100" in row["setup"]
        batches = dict(zip(SEARCHED, row["largest batch"].split(" / ")))
        if gpu:
            assert all(value.isdigit() for value in batches.values()), row
            assert row["tokens/s"].endswith(" k")
        else:  # searched for no checkpoint and full only; the TPU estimate is shown, not ranked on
            assert batches["minimal"] == batches["save_qkv_proj"] == "–"
            assert row["tokens/s"].endswith(" k") or (row["tokens/s"] == "–" and row["pick"] == "none fits")
        if row["pick"] == "none fits":
            assert {value for value in batches.values() if value != "–"} == {"0"}
        else:
            name, batch = row["pick"].rsplit(" at ", 1)
            assert batches[name] == batch != "0"
    one_chip = answers[0][1]
    assert one_chip["pick"] == "none fits"


def test_the_kernel_contrast_shows_the_plain_attention_beside_the_fused_one(built_page):
    html = built_page("fit.html")
    [contrast] = [t for t in tables_with(html, "setup") if "fit, fused" in t[0] and "fit, plain" in t[0]]
    assert [row["setup"] for row in contrast] == SHORT
    none = next(h for h in contrast[0] if h.startswith("no checkpoint, fused ("))
    plain = next(h for h in contrast[0] if h.startswith("no checkpoint, plain ("))
    assert float(contrast[0][none]) < 40 <= float(contrast[0][plain])  # the 1B on one H100, in GiB
    presets = tables_with(html, "preset", "policy")
    assert presets and presets[0][0] == {"preset": "full", "policy": "nothing_saveable"}


def test_each_setup_has_its_table_with_every_policy(built_page):
    html = built_page("fit.html")
    text = page_text(html)
    for setup in SETUPS:
        assert setup in text
    tables = _setup_tables(html)
    assert len(tables) == len(SETUPS)
    for setup, rows in zip(SETUPS, tables):
        assert [row["policy"] for row in rows] == ["no checkpoint", "full", "minimal", "dots_saveable",
                                                   "save_dot_except_mlp", "save_qkv_proj", "qkv_proj_offloaded"]
        refused = all(row["fits"] == "refused" for row in rows)  # a refused program has no estimate
        assert any(header.startswith("est. step") for header in rows[0]) != refused, setup
        # On several devices the collectives' part of the estimate has a column of its own.
        several = not re.search(r" on (one|1) ", setup)
        links = [header for header in rows[0] if header.startswith("collectives")]
        assert bool(links) == several, setup
        assert len(rows[0]) <= 5 + several  # narrow enough for a phone, which keeps the first four
    wide_mesh = tables[-1]
    (links,) = [header for header in wide_mesh[0] if header.startswith("collectives")]
    assert all(float(row[links]) > 0 for row in wide_mesh)  # the 70B's FSDP axis crosses nodes
    one_chip = tables[1]  # XLA's TPU compiler refuses every program: none fits
    assert {row["fits"] for row in one_chip} == {"refused"}


def test_host_memory_is_listed_for_the_offloading_policy_and_refused_where_refused(built_page):
    html = built_page("fit.html")
    host = [t for t in tables_with(html, "setup", "host")]
    assert len(host) == 1
    values = {row["setup"]: row["host"] for row in host[0]}
    assert list(values) == SETUPS
    assert values["Llama 3.2 1B on one TPU v5e chip"] == "refused"
    assert all(value.endswith(" GiB") and float(value.split()[0]) > 0
               for setup, value in values.items() if setup != "Llama 3.2 1B on one TPU v5e chip")


def test_the_long_context_table_lists_each_setup_and_policy(built_page):
    html = built_page("fit.html")
    [long] = tables_with(html, "setup", "policy", "memory (GiB)", "fits")
    assert {row["fits"] for row in long} <= {"yes", "no", "refused"}
    assert [row["policy"] for row in long[:4]] == SEARCHED


def test_the_memory_breakdown_and_the_plot_are_there(built_page):
    html = built_page("fit.html")
    breakdowns = tables_with(html, "part", "bytes (GiB)", "counted in")
    assert len(breakdowns) == 2
    for rows in breakdowns:
        parts = [row["part"] for row in rows]
        assert parts[:5] == ["parameters", "optimizer state", "batch", "outputs (not reusing an argument)",
                             "gradients"]
        assert any(part.startswith("rest of temp") for part in parts)
    assert len(set(re.findall(r"_images/[0-9a-f]+\.svg", html))) == 1


def test_no_compiler_chatter_reaches_the_page(built_page):
    html = built_page("fit.html")
    assert "stderr" not in html and "Involuntary" not in html and "W1127" not in html

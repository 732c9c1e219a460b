"""The attention kernels page: what each policy keeps around a fused attention kernel."""

from helpers import page_text, tables_with


def test_the_page_answers_first_with_its_numbers(built_page):
    html = built_page("attention.html")
    text = page_text(html)
    assert "{glue" not in text
    opening = text[:text.index("A flash-attention kernel in Pallas#")]
    assert "The dots policies never see the kernel." in opening
    assert "the checkpoint keeps only q, k and v" in opening
    assert "the forward kernel 2 times" in opening
    assert "does nothing" in opening and "f32[1,16,4096,1,4096]" in opening


def test_the_kernel_column_ignores_the_dots_policies(built_page):
    html = built_page("attention.html")
    (rows,) = tables_with(html, "policy", "Pallas kernel (MiB)", "kernel runs")
    by = {row["policy"]: row for row in rows}
    assert by["dots_saveable"]["Pallas kernel (MiB)"] == by["nothing_saveable"]["Pallas kernel (MiB)"]
    assert by["dots_saveable"]["kernel runs"] == "2"
    assert by["everything_saveable"]["kernel runs"] == "1"
    assert by["dots_saveable"]["XLA dots (GiB)"] != by["nothing_saveable"]["XLA dots (GiB)"]


def test_the_h200_trace_and_the_names_table_are_shown(built_page):
    html = built_page("attention.html")
    (cudnn,) = tables_with(html, "policy", "cuDNN (MiB)", "kernel runs")
    assert {row["policy"] for row in cudnn} >= {"dots_saveable", "save_only_these_names('attn_out')"}
    assert "NVIDIA H200" in page_text(html)
    (named,) = tables_with(html, "variant", "on device (MiB)", "on host (MiB)", "kernel runs")
    runs = {row["variant"]: row["kernel runs"] for row in named}
    assert runs["names inside, save both"] == "1" and runs["names inside, save output"] == "2"


def test_the_kernels_terms_are_said_in_plain_words_where_first_used(built_page):
    html = built_page("attention.html")
    article = " ".join(page_text(html[html.index("<article"):html.index("</article>")]).split())
    vjp = article.index("VJP")
    assert "vector-Jacobian product" in article[vjp:vjp + 40]
    lse = article.index("log-sum-exp")
    assert "the logarithm of the sum of the exponentials" in article[lse:lse + 80]

"""The build_stability extension mends the search index: lost API index entries back, words of no page out."""

from types import SimpleNamespace

from build_stability import complete_search_index


def _env(entries):
    return SimpleNamespace(domains=SimpleNamespace(index_domain=SimpleNamespace(entries=entries)))


def test_missing_index_entries_are_restored_from_the_general_index():
    entries = {"api": [("single", "f() (in module m)", "m.f", "", None), ("pair", "remat; policy", "p", "main", None)],
               "written": [("single", "g", "g", "", None)], "tutorial": []}
    app = SimpleNamespace(env=_env(entries), builder=SimpleNamespace(indexer=SimpleNamespace(
        _index_entries={"written": [("g", "g", "")]}, _mapping={}, _title_mapping={})))
    assert complete_search_index(app) == []
    assert app.builder.indexer._index_entries == {
        "written": [("g", "g", "")],  # fed by this build: left as it is
        "api": [("f() (in module m)", "m.f", ""), ("policy", "p", "main"), ("remat", "p", "main")]}


def test_words_that_no_document_contains_are_dropped_from_the_search_index():
    indexer = SimpleNamespace(_mapping={"kept": {"api"}, "gone": set()},
                              _title_mapping={"title": {"index"}, "stale": set()})
    indexer._index_entries = {}
    app = SimpleNamespace(env=_env({}), builder=SimpleNamespace(indexer=indexer))
    assert complete_search_index(app) == []
    assert indexer._mapping == {"kept": {"api"}} and indexer._title_mapping == {"title": {"index"}}

"""claim() returns the value when the sentence's claim holds, and stops the build naming the key when not."""

import pytest

from remat_guide.site.claims import ClaimError, claim


def test_a_claim_that_holds_returns_its_value():
    assert claim("ratio", 1.25, holds=lambda r: r > 1) == 1.25
    assert claim("ratio", 1.25, holds=True) == 1.25
    assert claim("word", "the same") == "the same"


@pytest.mark.parametrize("holds", [False, lambda r: r < 1, lambda r: 0])
def test_a_claim_that_fails_names_the_key_the_claim_and_the_value(holds):
    with pytest.raises(ClaimError, match=r"the prose says of ratio: below one; the value is 1\.25"):
        claim("ratio", 1.25, holds=holds, says="below one")


def test_a_failing_claim_is_an_assertion_error_like_the_pages_other_checks():
    with pytest.raises(AssertionError, match=r"\(no words given\)"):
        claim("ratio", 2, holds=False)


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(key=3, value=1), TypeError, "key"),
    (dict(key="", value=1), ValueError, "key"),
    (dict(key="a-b", value=1), ValueError, "key"),
    (dict(key="ok", value=1, says=3), TypeError, "says"),
    (dict(key="ok", value=1, holds="yes"), TypeError, "holds"),
])
def test_bad_arguments_are_refused_by_name(kwargs, error, name):
    with pytest.raises(error, match=rf"^{name} must"):
        claim(**kwargs)

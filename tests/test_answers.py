"""tirl.answers: the careful-grader corpus, exact numbers against a reference, cleaning, decisions."""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.answers import answers_match, decide, normalize_answer, parse_number
from tirl.answers.exact import parse_sequence
from tirl.answers.normalize import clean

CORPUS_PATH = Path(__file__).parent / "answers_corpus.jsonl"
CORPUS = [json.loads(line) for line in CORPUS_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
CATEGORIES = {
    "number", "braceless_frac", "negative_frac", "percent", "assignment", "units", "degrees", "boxed", "interval",
    "set", "tuple", "radical", "pi", "scientific", "thousands", "text", "choice", "trailing_period", "expression",
    "complex", "unicode_minus", "spacing", "near_miss", "hostile", "matrix",
}  # fmt: skip


def test_the_corpus_covers_every_category_with_both_verdicts() -> None:
    seen = Counter((row["cat"], row["match"]) for row in CORPUS)
    assert {cat for cat, _ in seen} == CATEGORIES
    for cat in CATEGORIES - {"near_miss", "hostile"}:
        assert seen[(cat, True)] >= 2 and seen[(cat, False)] >= 1, cat
    assert seen[("near_miss", False)] >= 5 and seen[("hostile", False)] >= 8


@pytest.mark.parametrize("row", CORPUS, ids=[f"{i}-{r['cat']}" for i, r in enumerate(CORPUS)])
def test_corpus_pair(row: dict) -> None:
    assert answers_match(row["pred"], row["gold"]) is row["match"], row


def test_corpus_agreement_and_no_false_positive() -> None:
    verdicts = [(answers_match(r["pred"], r["gold"]), r["match"]) for r in CORPUS]
    false_positives = sum(got and not want for got, want in verdicts)
    agree = sum(got == want for got, want in verdicts)
    assert false_positives == 0
    assert agree == len(CORPUS), f"{agree}/{len(CORPUS)}"


def _decimal_strings() -> st.SearchStrategy[str]:
    ints = st.integers(min_value=-(10**30), max_value=10**30)
    frac = st.integers(min_value=0, max_value=10**12)
    exp = st.integers(min_value=-40, max_value=40)
    return st.one_of(
        ints.map(str),
        st.tuples(ints, frac).map(lambda t: f"{t[0]}.{t[1]}"),
        st.tuples(ints, exp).map(lambda t: f"{t[0]}e{t[1]}"),
    )


@given(_decimal_strings())
@settings(max_examples=300, deadline=None)
def test_parse_number_equals_the_fraction_reference(text: str) -> None:
    assert parse_number(text) == Fraction(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("007", 7), ("42", 42), ("9" * 201, int("9" * 201)), ("9" * 202, None), ("\u00b2", None),
     ("\u0661\u0662", 12), ("4\u00b2", None), ("1 2", None)],
)  # fmt: skip
def test_whole_number_fast_path_agrees_with_the_general_reader(text: str, value: int | None) -> None:
    """A plain ASCII whole number skips the regexes; a sign sends the same digits through the general reader."""
    assert parse_number(text) == parse_number("+" + text) == value


@given(st.sampled_from(["", "-", "+"]), st.integers(0, 10**30), st.integers(0, 10**30), st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_plain_fraction_fast_path_agrees_with_the_general_reader(sign: str, num: int, den: int, zeros: int) -> None:
    r"""``\frac{a}{b}`` (ASCII digits) skips the recursion; a space inside sends it through the general reader."""
    a, b = "0" * zeros + str(num), str(den)
    fast, general = parse_number(f"{sign}\\frac{{{a}}}{{{b}}}"), parse_number(f"{sign}\\frac{{ {a}}}{{{b}}}")
    assert fast == general == (None if den == 0 else (-1 if sign == "-" else 1) * Fraction(num, den))


@pytest.mark.parametrize("text", ["\\frac{" + "9" * 202 + "}{1}", "\\frac{1}{" + "9" * 202 + "}", "\\frac{\u0661}{2}"])
def test_plain_fraction_fast_path_leaves_the_rest_to_the_general_reader(text: str) -> None:
    assert parse_number(text) == parse_number(text.replace("{", "{ ", 1))


@given(st.integers(min_value=-(10**20), max_value=10**20), st.integers(min_value=1, max_value=10**9))
@settings(max_examples=200, deadline=None)
def test_fractions_and_thousands_against_a_reference_loop(num: int, den: int) -> None:
    value = Fraction(num, den)
    assert parse_number(f"\\frac{{{num}}}{{{den}}}") == value
    assert parse_number(f"{num}/{den}") == value
    digits = str(abs(num))
    groups: list[str] = []
    while digits:  # the reference: group thousands by hand
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    assert parse_number(("-" if num < 0 else "") + ",".join(groups)) == num


@given(st.text(max_size=60))
@settings(max_examples=400, deadline=None)
def test_decide_never_raises_and_an_answer_matches_itself(text: str) -> None:
    d = decide(text, "5")
    assert d.verdict in (True, False, None)
    same = decide(text, text)
    if clean(text).key:
        assert same.verdict is True, (text, same)
    else:
        assert same.verdict is False


@pytest.mark.parametrize(
    ("raw", "text", "extra"),
    [
        (r"$\boxed{\boxed{\dfrac12}}$", r"\frac{1}{2}", {}),
        (r"x = -\frac34", r"-\frac{3}{4}", {"lhs": "x"}),
        (r"50\%", "50", {"percent": True}),
        (r"12\,\mathrm{m}^2", "12", {"unit": "m^2"}),
        (r"30^{\circ}", "30", {}),
        ("\u22125", "-5", {}),
        (r"\left( 1,\! 2 \right).", "( 1, 2 )", {}),
        (r"\sqrt2+\frac1{x}", r"\sqrt{2}+\frac{1}{x}", {}),
        (r"\text{Yes}", "Yes", {}),
        ("3m", "3m", {}),  # a product, not metres: a bare unit needs a space
    ],
)
def test_clean(raw: str, text: str, extra: dict) -> None:
    got = clean(raw)
    assert got.text == text
    for key, value in extra.items():
        assert getattr(got, key) == value


def test_sequences_keep_their_brackets() -> None:
    s = parse_sequence("[0, 1)")
    assert s is not None and s.ordered and (s.open, s.close, s.items) == ("[", ")", ("0", "1"))
    bare = parse_sequence("1, 2")
    assert bare is not None and not bare.ordered
    assert parse_sequence("1,000") is None and parse_sequence("(5)") is None


@pytest.mark.parametrize(
    ("pred", "gold", "verdict"),
    [
        (r"(50\%, 2)", "(50, 2)", False),  # inside a tuple a percent is part of the element: 50% is not 50
        ("(50%, 2)", "(0.5, 2)", False),
        ("(2, 50%)", "(2, 50)", False),
        (r"(50.0\%, 2)", r"(50\%, 2)", True),  # the same percent, written another way
        (r"(50\%, 2)", r"(50\%, 2)", True),
    ],
)
def test_a_percent_inside_a_tuple_must_match_the_percent(pred: str, gold: str, verdict: bool) -> None:
    """A bare ``50%`` matches ``50`` (the module's rule), an element of an ordered tuple does not."""
    d = decide(pred, gold)
    assert d.verdict is verdict and d.path in ("exact", "string")
    assert decide(gold, pred).verdict is verdict


@pytest.mark.parametrize(
    ("pred", "gold", "path"),
    [
        ("1/2", "0.5", "exact"),
        ("Yes", "yes", "text"),
        (r"\boxed{7}", "7", "string"),
        (r"\sqrt{8}", r"2\sqrt{2}", "fallback"),
        ("1e5000", "1", "hostile"),
        (None, "1", "missing"),
    ],
)
def test_each_path_is_taken_where_documented(pred: str | None, gold: str, path: str) -> None:
    assert decide(pred, gold).path == path


def test_the_fallback_never_sees_a_float() -> None:
    d = decide("3.14", r"\pi")
    assert d.verdict is None and d.pred == r"\frac{314}{100}"
    assert answers_match("3.14", r"\pi") is False


def test_normalize_answer_is_a_reduced_fraction_for_numbers() -> None:
    assert normalize_answer(r"\boxed{\dfrac{2}{4}}") == "1/2"
    assert normalize_answer("1{,}000") == "1000"
    assert normalize_answer(r"x^2 + 1") == "x^2+1"


def _decimal_text(v: Fraction) -> str | None:
    """``v`` as an exact decimal when its denominator is 2^a 5^b (the reference: long division)."""
    den, twos, fives = v.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1:
        return None
    places = max(twos, fives)
    scaled = abs(v) * 10**places
    digits = str(scaled.numerator).rjust(places + 1, "0")
    body = digits if places == 0 else f"{digits[:-places]}.{digits[-places:]}"
    return ("-" if v < 0 else "") + body


def _renderings(v: Fraction) -> list[str]:
    sign = "-" if v < 0 else ""
    p, q = abs(v.numerator), v.denominator
    out = [f"{sign}{p}/{q}", f"{sign}\\frac{{{p}}}{{{q}}}", f"\\dfrac{{{v.numerator}}}{{{q}}}"]
    if p < 10 and q < 10:
        out.append(f"{sign}\\frac{p}{q}")
    dec = _decimal_text(v)
    if dec is not None:
        out.append(dec)
    if q == 1:
        out.append(f"{sign}{p:,}".replace(",", "{,}"))
    return out


WRAPS = ["{}", "\\boxed{{{}}}", "${}$", "x = {}", "{}\\text{{ cm}}", "{}.", "\\boxed{{\\boxed{{{}}}}}"]


@given(
    st.fractions(min_value=-1000, max_value=1000, max_denominator=64),
    st.fractions(min_value=-1000, max_value=1000, max_denominator=64),
    st.data(),
)
@settings(max_examples=300, deadline=None)
def test_every_rendering_of_two_numbers_matches_exactly_when_they_are_equal(
    a: Fraction, b: Fraction, data: st.DataObject
) -> None:
    for x, y in ((a, b), (a, a)):
        left = data.draw(st.sampled_from(WRAPS)).format(data.draw(st.sampled_from(_renderings(x))))
        right = data.draw(st.sampled_from(WRAPS)).format(data.draw(st.sampled_from(_renderings(y))))
        assert answers_match(left, right) is (x == y), (left, right)
        assert decide(left, right).path != "fallback"


def test_json_numbers_are_read_as_their_text() -> None:
    assert answers_match("391", 391) is True  # a trajectory file's "answer": 391
    assert answers_match(r"\frac{1}{2}", 0.5) is True
    assert answers_match("1", True) is False and answers_match("nan", float("nan")) is False
    assert answers_match("1", 10**5000) is False  # too long to print: no answer, no exception


DIGITS = "0123456789"


@given(st.text(DIGITS, max_size=4), st.text(DIGITS, max_size=4), st.text(DIGITS, min_size=1, max_size=4))
@settings(max_examples=200, deadline=None)
def test_repeating_decimals_against_the_textbook_formula(whole: str, fixed: str, period: str) -> None:
    # the reference: x = W.F(P)(P)... -> (WFP - WF) / (10^|F| * (10^|P| - 1))
    numerator = int(whole + fixed + period) - int(whole + fixed or "0")
    reference = Fraction(numerator, 10 ** len(fixed) * (10 ** len(period) - 1))
    assert parse_number(f"{whole}.{fixed}\\overline{{{period}}}") == reference

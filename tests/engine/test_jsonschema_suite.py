"""The official JSON-Schema-Test-Suite, draft 2020-12 (vendored in tests/data): every case
through Grammar.from_json_schema and a Matcher. Any accepted invalid instance (outside the
lenient allow-list), crash or time-out fails; the counts are printed beside llguidance's
by `midword bench jsts`."""

import json

import pytest

from midword.bench.jsts import LENIENT_ALLOWED, SUITE, MidwordEngine, load_cases, run_engine, unexpected


@pytest.fixture(scope="module")
def cases():
    found = load_cases(SUITE)
    assert len(found) == 1299  # the vendored files, all of them
    return found


@pytest.mark.slow
@pytest.mark.parametrize("lenient", [False, True])
def test_every_suite_case_is_decided_soundly(cases, lenient):
    counts, outcomes = run_engine(MidwordEngine(lenient=lenient), cases)
    bad = unexpected(outcomes, lenient)
    assert not bad, "\n".join(
        f"{o.case.file} / {o.case.group} / {o.case.description}: {o.result} {o.detail}" for o in bad[:20]
    )
    assert counts.crashes == counts.timeouts == counts.blowups == 0
    # What the grammar does decide, it decides as the suite says, for most cases: a
    # floor under today's counts (720 accepted valid, 18 rejected valid by default, 17 of
    # them invalid strings of formats, which midword enforces and the suite annotates).
    assert counts.accepted_valid >= 715 and counts.rejected_valid <= 18
    if lenient:
        # uniqueItems compiles, unenforced: its invalid cases are the only ones accepted.
        assert counts.accepted_invalid > 0
        assert {o.case.file for o in outcomes if o.result == "accepted" and not o.case.valid} <= LENIENT_ALLOWED
    else:
        assert counts.accepted_invalid == 0
        # uniqueItems is enforced where the elements take few values (the booleans of
        # "uniqueItems with an array of items") and refused, naming lenient=True, elsewhere.
        unique = [o for o in outcomes if '"uniqueItems": true' in json.dumps(o.case.schema)]
        refused = [o for o in unique if o.result == "refused"]
        assert refused and all("lenient=True" in o.detail for o in refused)
        decided = [o for o in unique if o.result != "refused"]
        assert decided and all((o.result == "accepted") == o.case.valid for o in decided)


def test_unicode_property_escapes_and_non_ascii_literals_in_patterns(cases):
    picked = [c for c in cases if c.file == "pattern.json" or "Unicode" in c.group or "unicode" in c.group]
    counts, outcomes = run_engine(MidwordEngine(), picked)
    assert counts.crashes == 0 and counts.accepted_invalid == 0
    wrong = [o for o in outcomes if o.result == "rejected" and o.case.valid]
    assert not wrong, [(o.case.group, o.case.description) for o in wrong]


def test_integers_with_a_zero_fraction(cases):
    picked = [
        c
        for c in cases
        if (c.file, c.group)
        in {
            ("type.json", "integer type matches integers"),
            ("const.json", "const with 1 does not match true"),
            ("enum.json", "enum with 1 does not match true"),
            ("const.json", "const with -2.0 matches integer and float types"),
        }
    ]
    assert len(picked) >= 20
    counts, outcomes = run_engine(MidwordEngine(), picked)
    wrong = [(o.case.group, o.case.description, o.result) for o in outcomes if (o.result == "accepted") != o.case.valid]
    assert not wrong


def test_formats_as_annotations_accept_what_the_suite_calls_annotations(cases):
    picked = [c for c in cases if c.file == "format.json"]
    strict_counts, _ = run_engine(MidwordEngine(), picked)
    counts, outcomes = run_engine(MidwordEngine(formats="annotation"), picked)
    assert strict_counts.rejected_valid > 0  # enforced by default: "invalid email" is rejected
    assert counts.rejected_valid == 0 and counts.accepted_valid == len(picked)

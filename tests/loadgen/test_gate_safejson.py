"""perfkit.sources.safejson: the one bounded JSON reader the gate, the store and the result reader use
(issue 22 "one rule for every reader of foreign data"): depth, value count, 64-bit integers, NaN,
UTF-8 with or without a BOM, each refusal one line naming the source and the key or line."""

from __future__ import annotations

import json
import time

import pytest

from perfkit.errors import PerfkitError
from perfkit.sources.safejson import MAX_DEPTH, UnsafeJson, check_json_bounds, load_json_bounded


def refused(data: bytes | str, **kw: int) -> UnsafeJson:
    with pytest.raises(UnsafeJson) as info:
        load_json_bounded(data, source="r.json", **kw)
    assert isinstance(info.value, PerfkitError) and "\n" not in str(info.value)
    return info.value


def test_a_plain_document_and_a_bom() -> None:
    doc = {"schema": "perfkit.bench/1", "completed": 3, "meta": {"labels": {"k": '[{,}]\\"'}}}
    text = json.dumps(doc)
    assert load_json_bounded(text, source="r.json") == doc
    assert load_json_bounded(b"\xef\xbb\xbf" + text.encode(), source="r.json") == doc
    assert load_json_bounded("\ufeff" + text, source="r.json") == doc


def test_depth_is_bounded_exactly() -> None:
    assert load_json_bounded("[" * MAX_DEPTH + "]" * MAX_DEPTH, source="r.json") is not None
    err = refused("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert str(err) == f"r.json:1: nested deeper than {MAX_DEPTH} levels"
    # brackets inside strings are text, not nesting
    assert load_json_bounded(json.dumps({"a": "[" * 500}), source="r.json") == {"a": "[" * 500}
    err = refused('{"x": 1,\n"y": ' + "[" * 100 + "]" * 100 + "}", max_depth=10)
    assert err.line == 2


def test_the_value_budget_is_counted_before_anything_is_built() -> None:
    assert load_json_bounded(json.dumps(list(range(99))), source="r.json", max_values=100) is not None
    err = refused(json.dumps(list(range(100))), max_values=100)
    assert "more than 100 JSON values" in str(err)
    commas_in_text = json.dumps(["a,b,c,d,e,f,g,h"] * 10)  # commas inside strings are not values
    assert load_json_bounded(commas_in_text, source="r.json", max_values=20) is not None
    big = b"[" + b"{}," * 20_000_000 + b"{}]"  # 60 MB: refused in well under the time to parse it
    started = time.monotonic()
    with pytest.raises(UnsafeJson, match="more than 1,000,000 JSON values"):
        check_json_bounds(big, source="big.json")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"completed": ' + "1" * 401 + "}",
            "r.json: completed: an integer of 401 digits, beyond the 64-bit range",
        ),
        (
            '{"a": [1, {"b c": 12345678901234567890}]}',
            'r.json: a[1]."b c": an integer of 20 digits, beyond the 64-bit range',
        ),
        ('{"meta": {"started": NaN}}', "r.json: meta.started: NaN is not a JSON number"),
        ('{"x": -Infinity}', "r.json: x: -Infinity is not a JSON number"),
        ('{"p": {"99.9": 1e400}}', "r.json: p.99.9: 1e400 is beyond the range of a number"),
        ('{"a": 1,\n "b": }', "r.json:2: invalid JSON (unexpected character, expected a JSON value)"),
        (b'{"a": "\xff"}', "r.json:1: not UTF-8 text"),
        ('{"a": 1} {"b": 2}', "r.json:1: invalid JSON (unexpected content after document)"),
    ],
)
def test_refusals_name_the_key_or_the_line(text: str | bytes, message: str) -> None:
    assert str(refused(text)) == message


def test_integers_within_64_bits_are_read_exactly() -> None:
    assert load_json_bounded('{"a": 9223372036854775807, "b": -1234567890123456789}', source="r.json") == {
        "a": 9223372036854775807,
        "b": -1234567890123456789,
    }
    long_fraction = '{"a": 0.12345678901234567890123}'  # many digits after the point: a float, fine
    assert load_json_bounded(long_fraction, source="r.json")["a"] == pytest.approx(0.123456789)


def test_check_bounds_takes_json_lines_and_leaves_nan_to_the_caller() -> None:
    check_json_bounds('{"a": NaN}\n{"b": 2}\n', source="lines.jsonl")  # vLLM --append-result, NaN: fine
    with pytest.raises(UnsafeJson, match=r"lines.jsonl:2: an integer of 30 digits"):
        check_json_bounds('{"a": 1}\n{"b": ' + "9" * 30 + "}\n", source="lines.jsonl")

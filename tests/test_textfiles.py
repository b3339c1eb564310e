"""dprm.textfiles: UTF-8 decoding and JSON parsing within stated limits."""

from __future__ import annotations

import pytest

from dprm.textfiles import JSON_MAX_DEPTH, JSON_MAX_DIGITS, TextError, decode_utf8, parse_json


def test_a_byte_order_mark_is_dropped():
    assert decode_utf8(b"\xef\xbb\xbfcaf\xc3\xa9") == "café"
    assert parse_json(b"\xef\xbb\xbf[1]") == [1] == parse_json("\ufeff[1]")


def test_latin1_names_the_byte_and_the_encoding():
    with pytest.raises(TextError, match=r"not UTF-8 text \(byte 0xe9 at offset 3"):
        decode_utf8("café".encode("latin-1"))


def test_depth_limit():
    assert parse_json("[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH)
    for depth in (JSON_MAX_DEPTH + 1, 100_000):
        with pytest.raises(TextError, match="nested deeper"):
            parse_json("[" * depth + "]" * depth)


def test_digit_limit():
    assert parse_json("9" * JSON_MAX_DIGITS) == int("9" * JSON_MAX_DIGITS)
    with pytest.raises(TextError, match=f"{JSON_MAX_DIGITS + 1} digits"):
        parse_json("-" + "9" * (JSON_MAX_DIGITS + 1))


@pytest.mark.parametrize("text", ['["\\ud800"]', '{"k\\udfff": 1}', '[{"a": ["x\\ud83d"]}]'])
def test_lone_surrogates_are_refused(text):
    with pytest.raises(TextError, match="lone surrogate"):
        parse_json(text)


def test_a_surrogate_pair_is_text():
    assert parse_json('["\\ud83d\\ude00"]') == ["\U0001f600"]


def test_invalid_json_keeps_the_position():
    with pytest.raises(TextError, match="line 1 column 4"):
        parse_json("[1,]")

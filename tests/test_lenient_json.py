"""Lenient JSON: the slips small models make in written tool calls, and nothing executable."""

from __future__ import annotations

import pytest

from ipyagent.models.lenient_json import LenientJSONError, loads, parse_prefix


@pytest.mark.parametrize("text,expected", [
    ('{"code": """import math\nprint(math.pi)"""}', {"code": "import math\nprint(math.pi)"}),
    # Inside triple quotes the code is taken as written: \n stays two characters.
    ('{"code": """print("a\\nb")"""}', {"code": 'print("a\\nb")'}),
    ("{'code': '''x = 1\ny = 2'''}", {"code": "x = 1\ny = 2"}),
    ('{"code": "for i in range(3):\n\tprint(i)"}', {"code": "for i in range(3):\n\tprint(i)"}),
    ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}),
    ("{'path': 'data.csv', 'n': 3}", {"path": "data.csv", "n": 3}),
    ('{"flag": True, "none": None, "no": false}', {"flag": True, "none": None, "no": False}),
    ('{code: "1+1"}', {"code": "1+1"}),  # a bare key
    ('{"pattern": "\\d+\\.csv"}', {"pattern": "\\d+\\.csv"}),  # an escape JSON does not know: kept
    ('{"s": "caf\\u00e9 \\"q\\""}', {"s": 'café "q"'}),
    ('{"x": -1.5e3}', {"x": -1500.0}),
    # The closing quote dropped before the final brackets (measured on Qwen2.5-Coder-0.5B).
    ('{"name": "python", "arguments": {"code": "print((3 + 5 + 10) / 3)}}',
     {"name": "python", "arguments": {"code": "print((3 + 5 + 10) / 3)"}}),
    ('{"code": """x = 1\nprint(x)}', {"code": "x = 1\nprint(x)"}),
])
def test_what_small_models_write_is_read(text: str, expected: object) -> None:
    assert loads(text) == expected


@pytest.mark.parametrize("text", [
    '{"code": "unclosed',  # open to the very end: no bracket to close it before
    '{"code": "a}, "b": 1}',  # not only brackets after it: not guessed
    '{"a": 1} trailing words',
    '{"call": __import__("os").system("echo hi")}',  # never evaluated: not a value at all
    '{"a": open("x")}',
    '{"a" 1}',
    "",
])
def test_what_is_not_even_lenient_json_raises(text: str) -> None:
    with pytest.raises(LenientJSONError):
        loads(text)


def test_parse_prefix_says_where_the_value_ends() -> None:
    value, end = parse_prefix('say {"a": [1, {"b": 2}]} then more', 4)
    assert value == {"a": [1, {"b": 2}]} and end == 24

"""nbjson.dumps: the text json.dumps gives with nbformat's layout, byte for byte."""

from __future__ import annotations

import enum
import json
import math
import random
from collections import OrderedDict

import pytest

from ipyagent.transcripts.nbjson import dumps


def _reference(value: object, depth: int = 0) -> str:
    text = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, separators=(",", ": "))
    return text.replace("\n", "\n" + " " * depth)


class Colour(enum.IntEnum):
    RED = 1


class Text(str):
    pass


ODD = [None, True, False, 0, -1, 2**100, 1.5, -0.0, 1e300, 1e-300, math.inf, -math.inf, "",
       "caf\u00e9", "tab\tquote\"back\\slash", "\x00\x1f\x7f\u2028\ud83d lone", "\U0001f600",
       Colour.RED, Text("sub"), OrderedDict(b=1, a=2), {1: "int key", 2: "x"}, {"": {}}, [],
       (), [[]], {"k": ()}]


def _value(rng: random.Random, depth: int = 0) -> object:
    if depth > 4 or rng.random() < 0.3:
        return rng.choice(ODD)
    if rng.random() < 0.5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["a", "b", "\u00e9", "z z", "\n", ""]) + str(n): _value(rng, depth + 1)
            for n in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(40))
def test_random_values_give_the_standard_librarys_text(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        value, depth = _value(rng), rng.randrange(5)
        assert dumps(value, depth) == _reference(value, depth)


def test_each_odd_value_alone_and_nan() -> None:
    for value in ODD + [{"nan": math.nan}]:
        assert dumps(value) == _reference(value)
        assert dumps([value, {"x": value}], 3) == _reference([value, {"x": value}], 3)


def test_what_json_refuses_is_refused() -> None:
    with pytest.raises(TypeError):
        dumps({"x": object()})
    with pytest.raises(TypeError):  # mixed keys cannot be sorted: json's own error
        dumps({1: "a", "b": 2})

"""Plugs (``ipyagent._util.plugs``): a lower layer's method that a higher layer supplies."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ipyagent._util.plugs import Plug, PlugNotFilled


def test_an_empty_plug_says_in_one_line_who_supplies_it() -> None:
    plug: Plug[..., int] = Plug("Thing.do", "ipyagent.somewhere")
    assert not plug.filled and "empty" in repr(plug)
    with pytest.raises(PlugNotFilled, match=r"^Thing.do is supplied by ipyagent.somewhere, "
                       r"which has not been imported$"):
        plug(1)


def test_a_plug_filled_for_later_loads_its_function_once_at_the_first_call() -> None:
    loads: list[int] = []

    def load() -> object:
        loads.append(1)
        return lambda x: x * 2

    plug: Plug[..., int] = Plug("double", "here")
    plug.fill_later(load)  # type: ignore[arg-type]
    assert plug.filled and loads == []
    assert (plug(2), plug(x=3), loads) == (4, 6, [1])


# In a fresh interpreter: `import ipyagent` alone fills every plug of the package, each
# resolves to a callable, and the transcripts modules are still not imported (light).
PROBE = """
import importlib, json, pkgutil, sys
import ipyagent
from ipyagent._util.plugs import Plug
light = [m for m in ("ipyagent.transcripts.transcript", "ipyagent.transcripts.replay")
         if m in sys.modules]
plugs = {}
for info in pkgutil.walk_packages(ipyagent.__path__, "ipyagent."):
    if info.name.endswith(".plugs") and info.name != "ipyagent._util.plugs":
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, Plug):
                plugs[info.name + "." + name] = value.filled
resolved = {name: callable(value.resolve()) for m in list(sys.modules) if m.endswith(".plugs")
            and m.startswith("ipyagent.") and m != "ipyagent._util.plugs"
            for name, value in vars(sys.modules[m]).items() if isinstance(value, Plug)}
print(json.dumps([light, plugs, resolved]))
"""


def test_import_ipyagent_fills_every_plug_and_stays_light() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    light, plugs, resolved = json.loads(out.stdout)
    assert light == []
    assert plugs and all(plugs.values()), plugs
    assert resolved and all(resolved.values()), resolved
    assert {"ipyagent.engine.plugs.save", "ipyagent.context.plugs.context_to_notebook",
            "ipyagent.context.plugs.preview"} <= set(plugs)

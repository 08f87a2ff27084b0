"""Values cross from the model's side as data: what the bytes are, never what they name.

The attacks of issue 29 against a real sibling kernel: a ``__reduce__`` payload, a pickle
holding only a GLOBAL that names a module the sandbox planted in the folder, a model that
claims a type the bytes are not. Each is shown to be live (a control run of ``pickle.loads``
in a separate process does what the attacker wanted), then shown to do nothing here.
"""

from __future__ import annotations

import base64
import collections
import datetime
import decimal
import io
import json
import pickle
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ipyagent.kernel.sibling import SiblingKernel
from ipyagent.trust.encode import MAGIC, Refused, encode
from ipyagent.trust.values import Undecodable, arrive, decode, read_npy

ALL = ("numpy", "pandas", "arrow", "png")
NO_ARROW = ("numpy", "pandas", "png")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("crossing")


@pytest.fixture(scope="module")
def kernel(folder: Path) -> Iterator[SiblingKernel]:
    """The model's kernel, working in the user's folder."""
    k = SiblingKernel(cwd=folder, timeout=60, interrupt_grace=2)
    k.start_background()
    yield k
    k.shutdown()


def frame() -> pd.DataFrame:
    return pd.DataFrame({
        "month": ["jan", "feb", None], "revenue": [1.5, 2.25, float("nan")], "n": [1, 2, 3],
        "kind": pd.Categorical(["a", "b", "a"]), "count": pd.array([1, None, 3], dtype="Int64"),
        "when": pd.date_range("2024-01-01", periods=3, tz="Europe/Paris"),
        "day": pd.date_range("2024-01-01", periods=3)}, index=pd.Index([10, 20, 30], name="id"))


VALUES: list[Any] = [
    None, True, -7, 2 ** 20_000, 1.25, float("inf"), 3 - 4j, "text ⟨with⟩ \u202e bidi", b"\x00\xff",
    bytearray(b"ab"), [1, [2, [3]]], (1, "a"), {1, 2}, frozenset({"x"}),
    {"a": (1, 2), (1, 2): [3], 3: None}, collections.OrderedDict(b=1, a=2), collections.Counter("aab"),
    datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone.utc), datetime.date(2024, 5, 1),
    datetime.time(23, 59, 1), datetime.timedelta(days=2, seconds=5), decimal.Decimal("1.10"),
    uuid.UUID(int=7), range(2, 20, 3),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_builtins_cross_as_themselves(value: Any) -> None:
    back = decode(encode(value))
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("value", [np.arange(12.0).reshape(3, 4), np.asfortranarray(np.arange(6).reshape(2, 3)),
                                   np.array(["a", "bc"]), np.zeros(2, dtype=[("x", "i4"), ("y", "f8")]),
                                   np.array([], dtype="datetime64[ns]")], ids=str)
def test_arrays_cross_as_npy(value: Any) -> None:
    back = decode(encode(value))
    assert type(back) is np.ndarray and back.dtype == value.dtype and back.shape == value.shape
    assert back.tobytes() == value.tobytes() and back.flags.writeable
    assert decode(encode(np.float32(1.5))) == np.float32(1.5)


@pytest.mark.parametrize("accept", [ALL, NO_ARROW], ids=["arrow", "columns"])
def test_frames_cross_with_arrow_and_without(accept: tuple[str, ...]) -> None:
    df = frame()
    back = decode(encode(df, accept))
    pd.testing.assert_frame_equal(back, df)
    series = df["revenue"].rename("rev")
    pd.testing.assert_series_equal(decode(encode(series, accept)), series)
    payload = encode(df, accept)
    assert (b'"arrow"' in payload) == ("arrow" in accept)


def test_a_figure_crosses_as_a_png() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([1, 3, 2])
    arrived = arrive(encode(fig))
    plt.close(fig)
    assert type(arrived.value).__name__ == "Image" and arrived.value.data.startswith(b"\x89PNG")
    assert arrived.preview.startswith("PNG image ") and len(arrived.sha256) == 64


@pytest.mark.parametrize(("value", "says"), [
    (lambda: 1, "a function: functions cannot be copied safely"),
    (type("Fit", (), {"params": {"a": 1}})(), "`Fit` object (tests.Fit): it cannot be copied safely"),
    (np.array([object()]), "dtype object"),
    (pd.DataFrame({"o": [object(), 1]}), "holds object values"),
    (collections.defaultdict(list), "ask the agent for"),
])
def test_what_is_not_data_is_refused_with_what_to_do(value: Any, says: str) -> None:
    with pytest.raises(Refused, match="ask the agent") as info:
        encode(value, NO_ARROW, "fit")
    assert says in str(info.value)
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(Refused, match="contains itself"):
        encode(loop)


# -- hostile bytes: what a compromised sibling could send instead ---------------------------
class Reduce:
    """Pickles as a call to os.system: the classic payload."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        import os

        return (os.system, (f"touch {self.marker}",))


def planted_global_pickle(module: str) -> bytes:
    """A pickle with no callable in it at all: only a GLOBAL naming ``module.VALUE``."""
    return b"\x80\x04c" + module.encode() + b"\nVALUE\n."


def plant(folder: Path, marker: Path) -> str:
    name = "planted_crossing_mod"
    (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nVALUE = 1\n")
    return name


def runs_when_unpickled(payload: bytes, folder: Path) -> None:
    """The control: ``pickle.loads`` of the payload, in another process run in ``folder``."""
    code = "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, ''); {code}"],
                   input=payload, cwd=folder, check=False, capture_output=True, timeout=60)


def test_a_reduce_payload_and_a_planted_global_are_refused_here(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = folder / "reduce-ran"
    reduce_payload = pickle.dumps(Reduce(marker))
    runs_when_unpickled(reduce_payload, folder)
    assert marker.exists()  # the payload is live
    marker.unlink()
    planted_marker = folder / "planted-ran"
    module = plant(folder, planted_marker)
    global_payload = planted_global_pickle(module)
    runs_when_unpickled(global_payload, folder)
    assert planted_marker.exists()  # so is this one: importing the module runs it
    planted_marker.unlink()
    monkeypatch.syspath_prepend(str(folder))  # the user's kernel imports from its folder
    for payload in (reduce_payload, global_payload, base64.b64encode(reduce_payload)):
        with pytest.raises(Undecodable, match="not an ipyagent value"):
            decode(payload)
    # Wrapped in our own header: a buffer is only bytes, a tag only our table.
    for tree in ({"$": "pickle", "b": 0}, {"$": "os.system", "v": "touch x"},
                 {"$": "dict", "v": [["a", {"$": "__reduce__", "v": []}]]}):
        header = json.dumps({"v": tree, "buffers": [len(reduce_payload)]}).encode()
        with pytest.raises(Undecodable, match="unknown kind"):
            decode(MAGIC + len(header).to_bytes(8, "big") + header + reduce_payload)
    assert not marker.exists() and not planted_marker.exists() and module not in sys.modules


def npy_object_array() -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, np.array([Reduce(Path("/nonexistent"))], dtype=object), allow_pickle=True)
    return out.getvalue()


def test_arrays_never_unpickle_and_their_shape_is_their_bytes() -> None:
    with pytest.raises(Undecodable, match="dtype object"):
        read_npy(npy_object_array())
    out = io.BytesIO()
    np.lib.format.write_array(out, np.arange(3.0))
    claims = out.getvalue().replace(b"(3,)", b"(1200, 5)")
    with pytest.raises(Undecodable, match=r"claims shape \(1200, 5\)"):
        read_npy(claims)
    huge = out.getvalue().replace(b"(3,)", b"(10000000000000,)")
    with pytest.raises(Undecodable, match="claims shape"):
        read_npy(huge)  # refused before any allocation


@pytest.mark.parametrize("damage", [b"", MAGIC, MAGIC + b"\xff" * 8, MAGIC + (5).to_bytes(8, "big") + b"[[[[[",
                                    MAGIC + (2).to_bytes(8, "big") + b"{}"])
def test_damaged_bytes_are_one_line(damage: bytes) -> None:
    with pytest.raises(Undecodable):
        decode(damage)
    deep = "[" * 100_000 + "]" * 100_000
    header = json.dumps({"v": None, "buffers": []}).replace("null", deep).encode()
    with pytest.raises(Undecodable, match="nested"):
        decode(MAGIC + len(header).to_bytes(8, "big") + header)


# -- through a real sibling -----------------------------------------------------------------
def forge(kernel: SiblingKernel, payload: bytes) -> None:
    """The model's code makes every later pull send ``payload`` (it patches base64 there)."""
    kernel.execute("import base64 as _b\n_real = getattr(_b, '_real', _b.b64encode)\n_b._real = _real\n"
                   f"_b.b64encode = lambda data, _p={payload!r}: _real(_p)")


def unforge(kernel: SiblingKernel) -> None:
    kernel.execute("import base64 as _b\n_b.b64encode = _b._real")


def test_a_forged_pull_runs_nothing_here(kernel: SiblingKernel, folder: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    marker = folder / "forged-ran"
    module = plant(folder, marker)
    monkeypatch.syspath_prepend(str(folder))
    kernel.execute("x = 1")
    try:
        for payload in (pickle.dumps(Reduce(marker)), planted_global_pickle(module)):
            forge(kernel, payload)
            with pytest.raises(TypeError, match="not a value this side reads"):
                kernel.pull("x")
    finally:
        unforge(kernel)
    assert not marker.exists() and module not in sys.modules
    assert kernel.pull("x") == 1  # honest again


def test_the_sibling_refuses_what_is_not_data_in_a_sentence(kernel: SiblingKernel) -> None:
    kernel.execute("class Fit:\n    def __init__(self): self.params = {'slope': 2.0}\nfit = Fit()")
    with pytest.raises(TypeError, match=r"cannot copy 'fit': fit is a `Fit` object.*parameters as a dict"):
        kernel.pull("fit")
    kernel.execute("import numpy as np\nobjs = np.array([{}, []], dtype=object)")
    with pytest.raises(TypeError, match="dtype object"):
        kernel.pull("objs")


def test_data_crosses_back_with_its_values_intact(kernel: SiblingKernel) -> None:
    kernel.execute("import numpy as np, pandas as pd\n"
                   "arr = np.linspace(0, 1, 7).reshape(7, 1)\n"
                   "df = pd.DataFrame({'a': [1, 2], 'b': ['x', None]}, index=['r', 's'])\n"
                   "d = {'k': (1, 2.5), 'when': __import__('datetime').date(2024, 1, 2), 'b': b'\\x00'}\n"
                   "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
                   "fig = plt.figure(figsize=(1, 1)); _ = plt.plot([1, 2])")
    assert np.array_equal(kernel.pull("arr"), np.linspace(0, 1, 7).reshape(7, 1))
    pd.testing.assert_frame_equal(kernel.pull("df"), pd.DataFrame({"a": [1, 2], "b": ["x", None]},
                                                                   index=["r", "s"]))
    assert kernel.pull("d") == {"k": (1, 2.5), "when": datetime.date(2024, 1, 2), "b": b"\x00"}
    assert kernel.pull("fig").data.startswith(b"\x89PNG")


def test_an_arrow_extension_type_is_refused() -> None:
    """An Arrow column of an extension type: a registered one could carry its own code
    (pyarrow's PyExtensionType unpickled); no extension type is read here."""
    import pyarrow as pa

    class Tagged(pa.ExtensionType):
        def __init__(self) -> None:
            super().__init__(pa.int64(), "ipyagent.test.tagged")

        def __arrow_ext_serialize__(self) -> bytes:
            return b""

        @classmethod
        def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: bytes) -> Any:
            return cls()

    pa.register_extension_type(Tagged())
    try:
        column = pa.ExtensionArray.from_storage(Tagged(), pa.array([1, 2]))
        table = pa.table({"x": column})
        out = pa.BufferOutputStream()
        with pa.ipc.new_stream(out, table.schema) as writer:
            writer.write_table(table)
        data = out.getvalue().to_pybytes()
        header = json.dumps({"v": {"$": "dataframe", "arrow": 0}, "buffers": [len(data)]}).encode()
        with pytest.raises(Undecodable, match="extension type"):
            decode(MAGIC + len(header).to_bytes(8, "big") + header + data)
    finally:
        pa.unregister_extension_type("ipyagent.test.tagged")

"""Values between the user's kernel and the sibling: pickled, named in errors, bounded."""

from __future__ import annotations

import base64
import pickle
import threading
from collections.abc import Iterator

import pytest

from ipyagent.kernel.sibling import SiblingKernel
from ipyagent.kernel.transfer import serialize


@pytest.fixture(scope="module")
def kernel() -> Iterator[SiblingKernel]:
    """One shared kernel for the round trips."""
    k = SiblingKernel(timeout=30, interrupt_grace=2)
    k.start_background()
    yield k
    k.shutdown()


def test_serialize_is_base64_pickle_and_names_what_cannot_go() -> None:
    encoded = serialize({"a": [1, 2], "b": "x"}, limit=10_000)
    assert pickle.loads(base64.b64decode(encoded)) == {"a": [1, 2], "b": "x"}
    with pytest.raises(ValueError, match="cannot push 'not a name': not a valid Python name"):
        serialize({"not a name": 1}, limit=10_000)
    with pytest.raises(TypeError, match="cannot push 'lock': lock object is not picklable"):
        serialize({"fine": 1, "lock": threading.Lock()}, limit=10_000)
    with pytest.raises(ValueError, match=r"cannot push 'big': \d+ bytes pickled, over max_transfer_bytes=100"):
        serialize({"big": b"x" * 1000}, limit=100)


def test_push_pull_round_trip(kernel: SiblingKernel) -> None:
    value = {"rows": [1, 2.5, "three"], "nested": {"t": (1, 2)}}
    kernel.push(data=value, n=7)
    assert kernel.execute("data['rows'][2] * n").text == repr("three" * 7)
    kernel.execute("result = {k: v for k, v in data.items()}; result['extra'] = b'\\x00'")
    assert kernel.pull("result") == {**value, "extra": b"\x00"}
    assert kernel.execute("data").execution_count  # push itself left no trace in history


def test_push_pull_errors_name_the_variable(kernel: SiblingKernel) -> None:
    import threading

    with pytest.raises(TypeError, match="'lock'.*not picklable"):
        kernel.push(ok=1, lock=threading.Lock())
    kernel.execute("import threading; sibling_lock = threading.Lock()")
    with pytest.raises(TypeError, match="'sibling_lock'.*cannot be copied safely"):
        kernel.pull("sibling_lock")
    with pytest.raises(NameError, match="'never_defined'"):
        kernel.pull("never_defined")
    saved = kernel.max_transfer_bytes
    kernel.max_transfer_bytes = 10_000
    try:
        with pytest.raises(ValueError, match="'big'.*max_transfer_bytes"):
            kernel.push(big=b"x" * 20_000)
        kernel.execute("big_there = b'x' * 20_000")
        with pytest.raises(ValueError, match="'big_there'.*max_transfer_bytes"):
            kernel.pull("big_there")
    finally:
        kernel.max_transfer_bytes = saved

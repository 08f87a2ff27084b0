"""The namespace picture: what the model is told about the user's variables."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from ipyagent.kernel.namespace import describe, picture, shareable


class Frame:
    """The shape of a DataFrame (pandas is not a dependency here): shape, columns, dtypes."""

    def __init__(self) -> None:
        self.shape = (1200, 3)
        self.columns = ["month", "revenue", "units"]
        self.dtypes = {"month": "object", "revenue": "float64", "units": "int64"}


def test_describes_common_types_by_shape_and_scalars_by_value() -> None:
    assert describe(np.zeros((3, 4))) == "ndarray 3×4 float64"
    assert describe(Frame()) == "Frame 1,200×3 (month: object, revenue: float64, units: int64)"
    assert describe([1, 2, 3]) == "list of 3"
    assert describe({"a": 1}) == "dict of 1"
    assert describe(42) == "int 42"
    assert describe("hello") == "str 'hello'"
    assert describe("x" * 500) == "str of 500 chars"
    assert describe(math.sqrt) == "function"
    assert describe(int) == "class"


def test_secret_looking_names_and_values_are_shown_redacted_and_others_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_TOKEN", "tok-9f8e7d6c5b4a")
    ns = {"df": Frame(), "API_KEY": "abc", "db_password": "hunter2hunter2", "_private": 1,
          "np": np, "mod": types.ModuleType("m"), "copied": "tok-9f8e7d6c5b4a",
          "inside": "Bearer tok-9f8e7d6c5b4a here", "proj": "sk-proj0123456789abcdef",
          "word": "hello"}
    names = set(shareable(ns))
    assert names == {"df", "word"}  # what may be offered for copying
    pic = picture(ns)
    assert "tok-9f8e7d6c5b4a" not in pic.text and "hunter2" not in pic.text
    assert "sk-proj0123456789abcdef" not in pic.text
    assert "- proj: str (value hidden: it looks like an API key)" in pic.text
    assert "- copied: str (value hidden: it holds the value of $SERVICE_TOKEN)" in pic.text
    assert "- db_password: str (value hidden: its name looks secret)" in pic.text
    assert "- word: str 'hello'" in pic.text
    assert "_private" not in pic.text and "- np" not in pic.text and "- mod" not in pic.text


@pytest.mark.parametrize("name", ["db_pass", "passwd", "pwd", "secret", "token", "api_key", "apiKey",
                                  "credential", "creds", "dsn", "conn", "pg_conn_str", "auth",
                                  "auth_header", "PASSWORD2", "mySecretThing"])
def test_credential_names_keep_their_name_and_type_but_never_their_value(name: str) -> None:
    pic = picture({name: "correct horse battery staple", "n": 3}, secrets={})
    assert f"- {name}: str (value hidden: its name looks secret)" in pic.text
    assert "horse" not in pic.text and name in pic.names


@pytest.mark.parametrize("name", ["passenger_count", "df", "connect4", "author", "tok"])
def test_ordinary_names_show_their_values(name: str) -> None:
    assert f"- {name}: int 7" in picture({name: 7}, secrets={}).text


def test_urls_with_passwords_and_ipyagents_own_objects() -> None:
    from ipyagent import Agent
    from ipyagent.context.buffer import Context

    ns = {"url": "postgresql://ana:s3cr3t-pw@db.example:5432/sales", "plain": "https://example.org/x",
          "agent": Agent.__new__(Agent), "ctx": Context()}
    pic = picture(ns, secrets={})
    assert "s3cr3t" not in pic.text and "- url: str (value hidden: it holds a password in a URL)" in pic.text
    assert "- plain: str 'https://example.org/x'" in pic.text
    assert "agent" not in pic.names and "ctx" not in pic.names


def test_bounded_largest_first_then_and_n_more() -> None:
    ns = {f"v{i}": np.zeros(i + 1) for i in range(400)}
    pic = picture(ns, max_tokens=200)
    assert pic.names[0] == "v399" and pic.more > 0
    assert pic.text.endswith(f"- and {pic.more} more")
    assert len(pic.text) < 200 * 4 + 400
    assert "more" in pic.summary()


def test_modes_names_and_off() -> None:
    ns = {"arr": np.ones(3), "n": 5}
    assert sorted(picture(ns, "names").text.splitlines()[1:]) == ["- arr", "- n"]
    assert not picture(ns, "off")

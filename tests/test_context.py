"""Context: a list-like, editable, rendered conversation with O(1) appends."""

from __future__ import annotations

import pytest

from ipyagent import Context, Message, ToolCall, ToolResult


def make() -> Context:
    return Context([Message("user", "hi"), ToolCall("c1", "python", {"code": "1+1"}),
                    ToolResult("c1", "2"), Message("assistant", "two")], system="be brief")


def test_list_protocol():
    ctx = make()
    assert len(ctx) == 4
    assert ctx[0].content == "hi" and ctx[-1].content == "two"
    sliced = ctx[1:3]
    assert isinstance(sliced, Context) and len(sliced) == 2 and sliced.system == "be brief"
    assert [type(i).__name__ for i in ctx] == ["Message", "ToolCall", "ToolResult", "Message"]
    popped = ctx.pop()
    assert popped.content == "two" and len(ctx) == 3
    ctx.insert(0, Message("user", "first"))
    assert ctx[0].content == "first"
    ctx.remove(ctx[0])
    ctx.add_user("more")
    assert ctx[-1] == Message("user", "more")
    del ctx[0]
    assert ctx[0].name == "python"


def test_rejects_non_items():
    ctx = Context()
    with pytest.raises(TypeError, match="holds Message"):
        ctx.append({"role": "user"})  # type: ignore[arg-type]


def test_tokens_track_edits():
    from ipyagent.tokens import TokenCounter

    ctx = make()
    ctx.counter = TokenCounter(use_tokenizer=False)
    ctx._recount()
    before = ctx.tokens
    ctx.add_user("x" * 400)
    assert ctx.tokens == before + 104
    ctx.pop()
    assert ctx.tokens == before
    ctx[0] = Message("user", "y" * 40)
    assert ctx.tokens == before - 1 + 10


def test_append_is_constant_time():
    # Counted, not timed: appending must not re-estimate earlier items.
    from ipyagent.tokens import TokenCounter

    class Counting(TokenCounter):
        calls = 0

        def item(self, item):
            Counting.calls += 1
            return super().item(item)

    ctx = Context([Message("user", str(i)) for i in range(1000)], counter=Counting())
    Counting.calls = 0
    for _i in range(100):
        ctx.append(Message("user", "x"))
    assert Counting.calls == 100


def test_reprs():
    ctx = make()
    assert repr(ctx).startswith("<Context: 4 items")
    html = ctx._repr_html_()
    assert "<table>" in html and "python: 1+1" in html and "system: be brief" in html


def test_copy_and_dicts():
    ctx = make()
    assert Context.from_dicts(ctx.to_dicts(), system=ctx.system) == ctx
    assert ctx.tool_call("c1").name == "python"
    assert ctx.tool_call("nope") is None


def test_calibration_is_per_conversation():
    a, b = Context([Message("user", "x" * 400)]), Context([Message("user", "x" * 400)])
    before = b.tokens
    a.counter.calibrate(100, 400)  # one endpoint's tokenizer counts 4x
    assert a.tokens > before and b.tokens == before


def test_images_sent_to_the_model_are_counted():
    from ipyagent.tokens import IMAGE_TOKENS, TokenCounter

    counter = TokenCounter(use_tokenizer=False)
    plain = ToolResult("c1", "[image/png 640x480, 23 KB]")
    seen = ToolResult("c1", "[image/png 640x480, 23 KB]",
                      meta={"images": [{"mime": "image/png", "data": "AAAA"}] * 2})
    assert counter.item(seen) - counter.item(plain) == 2 * IMAGE_TOKENS


def test_the_terminal_table_has_the_tokens_column_the_notebook_has() -> None:
    """Issue 17, finding 9: terminal %agent context had no tokens column."""
    from IPython.lib.pretty import pretty

    ctx = Context()
    ctx.add_user("a question " * 50)
    ctx.add_user("short")
    lines = pretty(ctx).splitlines()
    assert lines[1].split() == ["#", "kind", "tokens", "summary"]
    first, second = (ln.split() for ln in lines[2:4])
    assert int(first[2]) == ctx.item_tokens(0) and int(second[2]) == ctx.item_tokens(1)
    assert ctx.item_tokens(0) > ctx.item_tokens(1) > 0

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
    from ipyagent.context.tokens import TokenCounter

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
    from ipyagent.context.tokens import TokenCounter

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


def test_edits_estimate_only_the_items_they_touch():
    # Counted, not timed: a long run's context is not re-estimated by a delete or an insert.
    from ipyagent.context.tokens import TokenCounter

    class Counting(TokenCounter):
        calls = 0

        def item(self, item):
            Counting.calls += 1
            return super().item(item)

    ctx = Context([Message("user", str(i) * 40) for i in range(1000)], counter=Counting())
    Counting.calls = 0
    del ctx[-2:]
    del ctx[3]
    ctx.insert(5, Message("user", "z" * 80))
    ctx[7] = Message("assistant", "w" * 12)
    ctx.pop()
    assert Counting.calls == 2  # the inserted and the replacing item
    counted_afresh = Context.from_dicts(ctx.to_dicts(), counter=TokenCounter())
    assert ctx.raw_tokens == counted_afresh.raw_tokens and len(ctx) == 997


def test_reprs():
    ctx = make()
    assert repr(ctx).startswith("<Context: 4 items")
    html = ctx._repr_html_()
    assert "<table>" in html and "python: 1+1" in html and "system: be brief" in html


def test_a_long_context_shows_its_ends_and_says_how_to_see_the_rest():
    ctx = Context([Message("user", f"task {i}") for i in range(2000)], system="be brief")
    html = ctx._repr_html_()
    assert html.count("<tr>") == 1 + 20 + 1 + 20  # the head row, 20 first, "… more", 20 last
    assert ">task 19<" in html and ">task 20<" not in html and ">task 1980<" in html
    assert "… 1,960 more items (20–1979): agent.context.table(20, 1980) or %agent context 20:1980" in html
    assert "2000 items" in html and "system: be brief" in html
    lines = ctx.table().text().splitlines()
    assert lines[0] == f"Context — 2000 items · ~{ctx.tokens:,} tokens: items ~" \
        f"{ctx.tokens - ctx.counter.raw(ctx.system) - 4:,} · system prompt ~{ctx.counter.raw(ctx.system) + 4} " \
        f"(estimated: {ctx.counter.method})"
    assert lines[1].split() == ["#", "kind", "tokens", "summary"]
    assert len(lines) == 2 + 20 + 1 + 20 and "1,960 more" in lines[22]
    page = ctx.table(100, 200)  # a range is shown whole, with the context's own numbers
    rows = page.text().splitlines()[2:]
    assert len(rows) == 100 and rows[0].split()[:4] == ["100", "user", str(ctx.item_tokens(100)), "task"] and "task 199" in rows[-1]
    assert "rows 100–199" in page._repr_html_() and page._repr_html_().count("<tr>") == 101
    assert [r.split()[0] for r in ctx.table(-3).text().splitlines()[2:]] == ["1997", "1998", "1999"]
    assert ctx.table(5000, 6000).text().splitlines()[2:] == []
    short = Context([Message("user", str(i)) for i in range(50)])  # a few more than 40: all shown
    assert short._repr_html_().count("<tr>") == 51 and "more items" not in short._repr_html_()


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
    from ipyagent.context.tokens import IMAGE_TOKENS, TokenCounter

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

"""Reasoning written into the answer: ``<think>…</think>`` moved out of the text.

Reasoning models served without a reasoning parser put their thinking inside the reply's
text. Both OpenAI wire formats (Chat Completions and Responses) route it through here,
so it is shown as reasoning, never becomes the answer, and is never sent back as one.
"""

from __future__ import annotations

from .base import ModelEvent, ReasoningDelta, TextDelta

__all__ = ["ThinkSplitter", "split_unopened_think", "partial_suffix"]


class ThinkSplitter:
    """Routes a leading ``<think>…</think>`` block of streamed content to reasoning.

    Reasoning models served without a reasoning parser (deepseek-r1 on older Ollama,
    llama.cpp without ``--reasoning-format``, vLLM without ``--reasoning-parser``) put
    their thinking inside ``content``; it must not become the answer nor be sent back.
    Tags may be split across chunks, so undecided text is held back until it is clear.
    """

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self.state = "start"  # start -> think -> text
        self.pending = ""

    def feed(self, chunk: str) -> tuple[str, str]:
        """``(reasoning, text)`` that can be released for this chunk."""
        self.pending += chunk
        reasoning = text = ""
        if self.state == "start":
            head = self.pending.lstrip()
            if self.OPEN.startswith(head) and len(head) < len(self.OPEN):
                return "", ""  # maybe the start of "<think>": wait
            if head.startswith(self.OPEN):
                self.state, self.pending = "think", head[len(self.OPEN):]
            else:
                self.state = "text"
        if self.state == "think":
            end = self.pending.find(self.CLOSE)
            if end < 0:
                keep = partial_suffix(self.pending, self.CLOSE)
                reasoning, self.pending = self.pending[:len(self.pending) - keep], \
                    self.pending[len(self.pending) - keep:]
                return reasoning, ""
            reasoning = self.pending[:end]
            self.pending = self.pending[end + len(self.CLOSE):].lstrip("\r\n")
            self.state = "text"
        if self.state == "text":
            text, self.pending = self.pending, ""
        return reasoning, text

    def route(self, chunk: str, reasoning: list[str], text: list[str]) -> list[ModelEvent]:
        """Feed ``chunk``; append what is released to ``reasoning`` / ``text``; its events."""
        thinking, said = self.feed(chunk)
        events: list[ModelEvent] = []
        if thinking:
            reasoning.append(thinking)
            events.append(ReasoningDelta(thinking))
        if said:
            text.append(said)
            events.append(TextDelta(said))
        return events

    def flush(self) -> tuple[str, str]:
        """What is still held back at the end of the stream."""
        rest, self.pending = self.pending, ""
        return (rest, "") if self.state == "think" else ("", rest)


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that could begin ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


def split_unopened_think(thoughts: str, text: str) -> tuple[str, str]:
    """``(thoughts, text)`` with a lone leading ``…</think>`` of ``text`` moved to thoughts.

    A chat template that opens ``<think>`` in the prompt makes the reply start inside it.
    """
    if "</think>" in text and "<think>" not in text:
        head, _, text = text.partition("</think>")
        return thoughts + head, text.lstrip("\r\n")
    return thoughts, text

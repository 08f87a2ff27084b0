"""The conversation as data: what is sent to the model, shown to the user and saved.

``items`` are the provider-neutral items (messages, tool calls and results, reasoning,
summaries) and ``buffer`` the ``Context`` that holds them (list-like, editable, with a rich
repr); ``table`` is its table view, ``tokens`` the token estimates, ``spill`` the display
payloads kept out of memory. ``events`` is what a run reports as it goes and returns,
``decisions`` a decision on one tool call, ``audit`` how every call (and everything else a
person decided) is read back from the context. ``plugs``: ``Context.to_notebook`` and
``Context.compaction_preview``, whose work lies in the layers above.

``steps`` finds where step N lies in the items (a rewind's checkpoints).

May import: ``trust``, ``_util``.
"""

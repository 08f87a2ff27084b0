"""Small private helpers every layer may use; nothing here knows an agent.

``atomic`` writes a file all at once or not at all, ``diffs`` reads back the staged
workspace's diffs line by line, ``eventloop`` is the one background
event loop that owns every async resource, ``mainthread`` runs display and prompt work on
the user's main thread, ``nesting`` bounds how deep a JSON value may nest, ``normalise``
replaces what legitimately varies between two runs, ``sqlite`` sets a damaged database of
ours aside, ``stamps`` tells whether a file may have changed, ``text`` makes text safe to
print and short, ``plugs`` lets a lower layer offer a method a higher layer supplies.

May import: nothing but the floor (errors, _version).
"""

"""What we did not write, made safe: the rules every layer applies to it.

``untrusted`` makes text inert for markdown and HTML outputs; ``secrets`` is the last guard
before anything is written to disk and ``secrets_in`` finds secrets in names, text and
objects; ``redaction`` takes secret values out of tool output before the model, the display
or a file sees it. What may cross from the model's side to the user's, and how: as data,
never as code. ``encode`` runs where the model's code runs (its source is sent to the
sibling kernel) and turns a value into bytes of data; ``values.decode`` reads those bytes on
the user's side with code that cannot run code: nothing in the bytes names a class or a
callable, every type it can make is chosen here. ``cellcode`` makes the model's code safe to
put in a cell. numpy, pandas, pyarrow and IPython's ``Image`` are imported lazily, when a
value needs them.

``provenance`` keeps what ran here after a yes (by its sha256, in memory only), so a rewind
may run it again unasked.

May import: ``_util``.
"""

"""What may cross from the model's side to the user's, and how: as data, never as code.

``encode`` runs where the model's code runs (its source is sent to the sibling kernel) and
turns a value into bytes of data; ``values.decode`` reads those bytes on the user's side
with code that cannot run code: nothing in the bytes names a class or a callable, every
type it can make is chosen here. ``cellcode`` makes the model's code safe to put in a cell.

May import: the data layer only (``_text``, ``_secrets``); numpy, pandas, pyarrow and
IPython's ``Image`` lazily, when a value needs them.
"""

"""Model profiles: what works per model family, and grammar-constrained calls.

``catalog`` holds the profiles (the call syntax a family is trained on, its stop strings,
whether its chat template carries tools; each marked tested against a real recording or
``untested``), ``syntax`` the call syntaxes, ``detect`` chooses a profile from the model
name, the server's model list, llama.cpp's ``/props`` and the GGUF header (``gguf``),
``server`` asks the server those once and probes whether it takes a grammar, ``grammar``
builds the GBNF grammar from the tool schemas. The profile drives ``text_tools`` (the
prompt's call format, the stop strings, the grammar) and ``written_calls`` (the shape looked
for first); it duplicates neither.

May import: ``context``, ``trust``, ``_util``.
"""

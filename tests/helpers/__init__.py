"""What the tests build on: a scripted model, a scripted HTTP server (and the other APIs'
reply shapes), a kernel frontend, a Jupyter server, inertness checks, shared tools; for the
browser tests, headless Chromium and what a person does in a page (``browser``, a pytest plugin
that ``tests/conftest.py`` registers) and the Jupyter servers they open (``labs``)."""

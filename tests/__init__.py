"""ipyagent's tests, laid out like ``ipyagent/`` (``tests/models/test_sse.py`` for
``ipyagent/models/sse.py``; the engine and the data at the top). Every folder is a package, so
pytest's default import mode names each file by its path (``tests.models.test_cache``) and two
files may share a name in different folders; helpers import as ``tests.helpers.*``."""

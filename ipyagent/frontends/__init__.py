"""Where a person meets the engine: the ``%agent`` magics, the notebook display and its
approval widgets, terminal IPython and the ``ipyagent`` command line.

``magics`` is thin: ``cellrun`` runs a cell's command, ``transformer`` makes ``%agent``
cells await; ``notebook`` and ``widgets`` draw a run in a cell, ``terminal`` prints it,
``cli`` is ``ipyagent run``.

May import: ``transcripts``, ``engine``, ``memory``, ``instructions``, ``tools``,
``kernel``, ``models``, ``context``, ``trust``, ``_util``.
"""

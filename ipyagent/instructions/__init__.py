"""What the agent is told before it starts: its persona, the project's ``AGENTS.md``, skills.

``personas`` are named agent profiles (a system prompt, the tools on offer, model and
settings); ``agents_md`` finds a project's instructions beside the notebook; ``skills/`` are
folders with a ``SKILL.md`` offered to the model by name and loaded when a task needs one;
``file_preview`` reads the first lines of the files a task names (``data_shape``: a table's
separator and column types, a JSON outline) for the engine to put before the task.
All of it is text we did not write: it can add instructions and tools, never change
approval, the allow list, the workspace, an endpoint, a key or a limit.

May import: ``tools``, ``context``, ``trust``, ``_util``.
"""

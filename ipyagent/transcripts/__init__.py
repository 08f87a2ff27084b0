"""Runs as notebooks: export, save and read, restore, autosave, re-running and replay.

``export`` turns a context into notebook cells, ``transcript`` saves, reads and restores
them (and autosaves after each step), ``file_record`` re-creates the files the agent
wrote, ``rebuild`` re-runs a transcript's code cells, ``replay`` re-runs its recorded
model turns and reports differences. Above the engine: the agent reaches these only
through ``Agent.save/load/from_transcript/replay``, which import them lazily.
"""

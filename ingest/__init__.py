"""contextlens core: the export contract, validation, the DuckDB store and its query layer.

Nothing in this package imports Textual or rich: it is used headless by the command line,
by scripts and by the replay engine.
"""

"""Replay: rendering, explanations and (later) policies, the reference assembler and diff.

Nothing in this package imports Textual or rich.
"""

"""Builders behind replay.sample_export: the story graph, its decisions, policies, scale mode."""

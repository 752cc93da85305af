"""Widgets and helpers shared by the inspector's screens."""

"""The inspector's screens, one per file."""

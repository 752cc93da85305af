"""Helpers shared by every test tier (tests/ is on sys.path through tests/conftest.py)."""

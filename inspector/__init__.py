"""The Textual inspector and the ``contextlens`` command line."""

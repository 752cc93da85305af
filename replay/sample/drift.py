"""The drifted assembler build of the sample's drift story.

A few of the sample's assemblies were recorded by a bad build, ``ref-1.0.0-bad``, that read
a memory's ``supersedes`` list as if it pointed at the replacement: it kept the obsolete
memory and dropped the new one. ``contextlens verify`` must catch exactly those.
"""

from __future__ import annotations

from replay.assembler import ReferenceAssembler


class InvertedSupersessionAssembler(ReferenceAssembler):
    """The reference assembler with the supersession direction inverted (a deliberate bug)."""

    version = "1.0.0-bad"
    invert_supersession = True

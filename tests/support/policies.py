"""Policy files written by tests next to the bundled ones."""

PERMISSIVE = '''version = "v7"
extends = "v6"
description = """Test only: sends everything raw, to anyone."""

[branch]
lineage_only = false

[ownership]
participant_isolation = false

[visibility]
audit_only_excluded = false

[privacy]
raw_blocked_classes = []
'''

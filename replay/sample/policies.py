"""Policy versions v1 to v6 shipped with the sample export, as TOML text.

Each version names the version it ``extends`` and changes a few keys; the registry in
``replay/policy.py`` merges the chain (tables merge key by key, lists and scalars replace). The
policy's budgets are the ones a replay uses: the token budget capped by the request's
``context_limit`` (the model's context window), and the rehydration byte budget; the budgets
recorded on a request (``context_assemblies.token_budget`` / ``byte_budget``) only say what
the recorded runtime used.
"""

from __future__ import annotations

POLICY_TOML: dict[str, str] = {
    "v1": '''\
version = "v1"
description = """Base policy. Candidates come from the active branch lineage; participant-private \
and audit-only state stays out; raw oauth-, google-derived and secret-adjacent bodies are never \
sent; stale volatile (6h), session (24h) and bounded (72h) memories are omitted; memories with \
broken provenance are omitted; superseded memories are omitted; the last 12 messages; \
a 4000-token budget with 500 reserved."""

[window]
max_messages = 12

[budget]
token_budget = 4000
reserve_tokens = 500

[branch]
lineage_only = true
shared_fill = true

[ownership]
participant_isolation = true
child_promotion = "explicit"

[visibility]
audit_only_excluded = true

[privacy]
raw_blocked_classes = ["oauth_derived", "google_derived", "secret_adjacent"]

[privacy.providers.openai]
blocked_classes = []

[freshness]
volatile = 6
session = 24
bounded = 72
stale_action = "omit"
broken_provenance = "omit"

[contradiction]
show_both_sides = false
supersession = "omit_obsolete"

[recovery]
protected_states = ["pending", "failed", "deferred"]

[rehydration]
byte_budget = 65536
trigger = "exact_evidence"

[retention]
removed_classes = ["delete"]

[ranking]
order = ["checkpoint", "skill_state", "exact_evidence", "message", "tool_memory", "tool_artifact", "tool_call"]
''',
    "v2": '''\
version = "v2"
extends = "v1"
description = """Stale memories are kept as stale markers with a revalidation hint instead of \
being dropped (stale_action omit -> mark); both sides of a contradiction are shown \
(show_both_sides false -> true); the window grows from 12 to 16 messages."""

[window]
max_messages = 16

[freshness]
stale_action = "mark"

[contradiction]
show_both_sides = true
''',
    "v3": '''\
version = "v3"
extends = "v2"
description = """Google-derived data is never sent to OpenAI, not even as a summary \
(privacy.providers.openai.blocked_classes [] -> ["google_derived"]); hash-only artifacts \
count as removed by retention (removed_classes adds "hash_only")."""

[privacy.providers.openai]
blocked_classes = ["google_derived"]

[retention]
removed_classes = ["delete", "hash_only"]
''',
    "v4": '''\
version = "v4"
extends = "v3"
description = """Memories with broken provenance are shown as a stale marker with a \
revalidation hint instead of being omitted (broken_provenance omit -> mark); the token \
budget grows from 4000 to 6000."""

[budget]
token_budget = 6000

[freshness]
broken_provenance = "mark"
''',
    "v5": '''\
version = "v5"
extends = "v4"
description = """Widens the freshness windows to cut revalidation calls: volatile 6h -> 168h, \
session 24h -> 168h, bounded 72h -> 720h. Incident: days-old calendar availability entered \
prompts as a current fact. Superseded by v6."""

[freshness]
volatile = 168
session = 168
bounded = 720
''',
    "v6": '''\
version = "v6"
extends = "v5"
description = """Fixes the v5 incident and tightens: volatile 168h -> 4h, session 168h -> 24h, \
bounded 720h -> 48h; the rehydration byte budget shrinks from 65536 to 32768 bytes."""

[freshness]
volatile = 4
session = 24
bounded = 48

[rehydration]
byte_budget = 32768
''',
}

VERSIONS: tuple[str, ...] = tuple(POLICY_TOML)

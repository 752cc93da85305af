"""The read model: every question the user asks, answered once (see ``model.ReadModel``).

Layering: ``inspector -> readmodel -> replay -> ingest``. The CLI and the screens call only
this package for answers; they format, nothing more.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .masking import Masker, masked_placeholder
from .model import RECORDED, AnswerCache, BisectNeedsStart, ReadModel, ReplayCache
from .opening import open_model
from .tokens import token_accounting
from .records import record_content
from .results import (
    AssemblyView,
    BisectResult,
    CompareResult,
    ConversationView,
    DiffView,
    SafetyView,
    PolicyInfo,
    PromptPartView,
    PromptView,
    ProvenanceLink,
    RecordWhy,
    ReplayView,
    RequestPage,
    SessionList,
    SessionRow,
    TokenAccounting,
    TokenReportRow,
)

__all__ = [
    "CHANGE_CLASSES",
    "RECORDED",
    "AssemblyVerdict",
    "CompareCancelled",
    "AnswerCache",
    "AssemblyView",
    "BisectNeedsStart",
    "BisectResult",
    "CompareResult",
    "ConversationView",
    "DiffView",
    "EffectiveBudget",
    "FieldDifference",
    "LINT_RULES",
    "SafetyView",
    "Masker",
    "PolicyInfo",
    "PromptPartView",
    "PromptView",
    "ProvenanceLink",
    "ReadModel",
    "RecordDifference",
    "RecordWhy",
    "ReplayCache",
    "ReplayView",
    "RequestPage",
    "SessionList",
    "SessionRow",
    "TokenAccounting",
    "TokenReportRow",
    "VerifyResult",
    "load_registry",
    "local_sessions",
    "masked_placeholder",
    "open_model",
    "record_content",
    "token_accounting",
]

# Names the read model passes on from the replay engine (and the session finder), imported
# on first use: importing ``replay.compare`` or ``replay.verify`` loads the whole replay
# stack (the assembler, the policies, pydantic, numpy), which ``contextlens list`` never needs.
_FROM_REPLAY = {
    "CompareCancelled": "replay.compare",
    "CHANGE_CLASSES": "replay.diff",
    "EffectiveBudget": "replay.policy",
    "AssemblyVerdict": "replay.verify",
    "FieldDifference": "replay.verify",
    "RecordDifference": "replay.verify",
    "VerifyResult": "replay.verify",
    # a policy folder read into a registry (the front ends fail early on a bad one)
    "load_registry": "replay.policy",
    # the lint rules that report safety findings (the palette's "safety" search)
    "LINT_RULES": "replay.safety",
    # the transcripts on this machine: imports every adapter (and pyarrow.parquet)
    "local_sessions": "readmodel.sessions",
}

if TYPE_CHECKING:  # pragma: no cover
    from replay.compare import CompareCancelled
    from replay.diff import CHANGE_CLASSES
    from replay.policy import EffectiveBudget, load_registry
    from replay.safety import LINT_RULES
    from replay.verify import AssemblyVerdict, FieldDifference, RecordDifference, VerifyResult

    from .sessions import local_sessions


def __getattr__(name: str) -> Any:
    module = _FROM_REPLAY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value

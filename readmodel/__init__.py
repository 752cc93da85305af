"""The read model: every question the user asks, answered once (see ``model.ReadModel``).

Layering: ``inspector -> readmodel -> replay -> ingest``. The CLI and the screens call only
this package for answers; they format, nothing more.
"""

from replay.compare import CompareCancelled
from replay.diff import CHANGE_CLASSES
from replay.policy import EffectiveBudget
from replay.verify import AssemblyVerdict, FieldDifference, RecordDifference, VerifyResult

from .masking import Masker, masked_placeholder
from .model import RECORDED, AnswerCache, BisectNeedsStart, ReadModel, ReplayCache
from .tokens import token_accounting
from .records import record_content
from .sessions import local_sessions
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
    "local_sessions",
    "masked_placeholder",
    "record_content",
    "token_accounting",
]

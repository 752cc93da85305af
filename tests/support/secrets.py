"""A transcript whose tool arguments and results hold JSON-, config- and flag-shaped secrets
(tests/adapter_fixtures/secrets_in_tools.json), and the secret values it holds."""

from __future__ import annotations

from pathlib import Path

TRANSCRIPT = Path(__file__).resolve().parents[1] / "adapter_fixtures" / "secrets_in_tools.json"

# each value appears in the transcript; none may be shown unless revealed
SECRETS = (
    "Tr0ub4dor&3xyz",  # "password": "…" in tool-call arguments (JSON)
    "s3cr3t-Cl1ent-V4lue-9f8e7d",  # "client_secret": "…" in tool-call arguments
    "Hunter2Hunter2Hunter2",  # db_password=… in a tool result (config form)
    "horse battery staple",  # password: correct horse battery staple (spaces in the value)
    "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",  # "access_token": "ghp_…" (JSON in a result)
    "AKIAIOSFODNN7EXAMPLE",  # an AWS key after 64 characters of other text
)


def leaked(text: str) -> list[str]:
    """The secret values (or a 10-character start of one) that ``text`` shows."""
    return [s for s in SECRETS if s in text or s[:10] in text]

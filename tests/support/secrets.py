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


# Issue 27: shapes that passed unmasked. (name, a line as a transcript holds it, its secret.)
# Each secret is distinct and appears nowhere else, so a leak names its shape.
SHAPES = (
    ("a call's keyword argument", 'client = OpenAI(api_key="Wx7Lm3Np9Rt2Vx5")', "Wx7Lm3Np9Rt2Vx5"),
    ("a call's password argument",
     'conn = psycopg2.connect(host="db.internal", user="app", password="pgC0nnectPw")',
     "pgC0nnectPw"),
    ("JSON in a call", 'r = requests.post(url, json={"password": "Rq7PostPassw"})', "Rq7PostPassw"),
    ("a value holding 'key'", '{"password": "monkey123"}', "monkey123"),
    ("a value holding 'secret'", "password: Secret123", "Secret123"),
    ("an env value holding 'key'", "export PGPASSWORD=keystone42", "keystone42"),
    ("a space before the colon", '{ "password" : "Sp4cedColonPw" }', "Sp4cedColonPw"),
    ("a space before the colon, api_key", '{ "api_key" : "Sp4cedApiKey77" }', "Sp4cedApiKey77"),
    ("a space before the colon, client_secret", '{ "client_secret" : "Sp4cedClientS3c" }',
     "Sp4cedClientS3c"),
    ("a URL password without a user", "redis://:R3disPassw0rd@cache.internal:6379/0",
     "R3disPassw0rd"),
    ("curl -u user:password", "curl -u admin:CurlPw8812x https://api.internal/v1", "CurlPw8812x"),
    ("mysql -pPASSWORD", "mysql -h db -u root -pMyS9lRootPw app", "MyS9lRootPw"),
    ("sshpass -p PASSWORD", "sshpass -p SshBare77pw ssh deploy@host uptime", "SshBare77pw"),
    ("sshpass -p 'PASSWORD'", "sshpass -p 'SshQu0ted!pw' ssh deploy@host", "SshQu0ted!pw"),
    ("an XML element", "<password>XmlPa55word</password>", "XmlPa55word"),
    ("?key= in a URL", "https://maps.example.com/api/geocode?address=x&key=UrlK3yValue99",
     "UrlK3yValue99"),
    ("a token right after https://", "git clone https://Tk9mQ2vX7pL4zR8w@github.com/acme/app.git",
     "Tk9mQ2vX7pL4zR8w"),
)
SHAPE_SECRETS = tuple(secret for _, _, secret in SHAPES)

# The same syntax without a secret: none of these is masked.
NEGATIVES = (
    "curl -u admin https://api.internal/v1",
    "docker run -u 1000:1000 -p 8080:80 app",
    "password:",
    "database:\n  password:\n  user: app",
    'password=os.environ["PW"]',
    "password: ${PASSWORD}",
    'client = OpenAI(api_key=os.environ["OPENAI_API_KEY"])',
    "password = get_password(user)",
    "mysql -h db -u root -p app",
    "sshpass -e ssh deploy@host",
    "mkdir -p build && cp -pR src dst",
    "redis://cache.internal:6379/0",
    "git clone https://github.com/acme/app.git && git clone ssh://git@github.com/acme/app.git",
    "https://example.com/search?q=keys&sort_key=name&page=2",
    "<password>${DB_PASSWORD}</password>",
    "<max_tokens>4096</max_tokens>",
    '{"password": "PASSWORD", "token": "csrfToken"}',
)


def write_claude_transcript(path: Path) -> Path:
    """A Claude Code session (JSONL) whose Bash commands, tool results and user turns hold
    every shape of ``SHAPES``, one request per shape."""
    import json

    lines: list[dict] = []
    parent = None

    def add(kind: str, n: int, **extra: object) -> None:
        nonlocal parent
        uuid = f"{kind[0]}{len(lines)}"
        lines.append({"type": kind, "sessionId": "shapes", "uuid": uuid, "parentUuid": parent,
                      "cwd": "/home/someone/app",
                      "timestamp": f"2025-06-01T10:{n:02d}:{len(lines) % 60:02d}Z", **extra})
        parent = uuid

    for n, (name, line, _) in enumerate(SHAPES):
        add("user", n, message={"role": "user", "content": f"Run this ({name}):\n{line}"})
        add("assistant", n, requestId=f"req_shape{n}", message={
            "id": f"msg_shape{n}", "model": "claude-sonnet-4-5", "role": "assistant",
            "content": [{"type": "tool_use", "id": f"toolu_shape{n}", "name": "Bash",
                         "input": {"command": line, "description": name}}],
            "usage": {"input_tokens": 100 + n, "output_tokens": 5}})
        add("user", n, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_shape{n}",
             "content": f"$ {line}\nok"}]})
    add("assistant", len(SHAPES), requestId="req_done", message={
        "id": "msg_done", "model": "claude-sonnet-4-5", "role": "assistant",
        "content": [{"type": "text", "text": "All done."}],
        "usage": {"input_tokens": 500, "output_tokens": 3}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def leaked_shapes(text: str) -> list[str]:
    """The secrets of ``SHAPES`` that ``text`` shows."""
    return [s for s in SHAPE_SECRETS if s in text]

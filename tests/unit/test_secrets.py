"""Secret masking (ingest/secrets.py): what testers found unmasked is masked, value only;
ordinary transcript content is left alone; masking is idempotent, bounded and never raises."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ingest.secrets import MaskResult, find_secrets, mask_secrets, mask_text, mask_then_cut
from readmodel import Masker
from support.secrets import NEGATIVES, SHAPES

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"

# A JWT whose header and payload decode (detect-secrets checks that), with its signature.
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
GHP = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PASSWORD = "Tr0ub4dor&3xyz"

# (text, the secret values that must disappear, text that must stay)
TESTER_CASES = [
    # tool-call arguments, JSON on one line
    (
        json.dumps({"name": "login", "arguments": {"user": "bob", "password": PASSWORD}}),
        [PASSWORD],
        ['"password": "', '"user": "bob"'],
    ),
    # a tool result, pretty-printed JSON
    (
        "result:\n" + json.dumps({"status": "ok", "password": PASSWORD}, indent=2),
        [PASSWORD],
        ['"password": "', '"status": "ok"'],
    ),
    # the same arguments stored as JSON text inside JSON (escaped quotes)
    (
        json.dumps({"arguments": json.dumps({"password": PASSWORD, "user": "bob"})}),
        [PASSWORD],
        ['\\"user\\": \\"bob\\"'],
    ),
    # pretty-printed JSON inside a JSON string (escaped newlines)
    (
        json.dumps({"content": json.dumps({"db": {"password": "correct horse"}}, indent=2)}),
        ["correct horse"],
        ["password"],
    ),
    (
        '{"client_secret": "8Zk2-qwe_Rty9-uiop", "client_id": "web-app"}',
        ["8Zk2-qwe_Rty9-uiop"],
        ['"client_secret": "', '"client_id": "web-app"'],
    ),
    (f'{{"access_token": "{JWT}"}}', [JWT[:20], JWT[-20:]], ['"access_token": "']),
    ('{"access_token": "eyJfake.notajwt"}', ["eyJfake.notajwt"], ['"access_token": "']),
    ("export db_password=s3cr3t-Value!", ["s3cr3t-Value!"], ["export db_password="]),
    ("DB_PASSWORD=hunter2hunter2\nDEBUG=1", ["hunter2hunter2"], ["DB_PASSWORD=", "DEBUG=1"]),
    # YAML: the whole value, spaces included, not just its first word
    (
        "database:\n  user: app\n  password: correct horse battery staple\n  port: 5432",
        ["correct", "horse", "battery", "staple"],
        ["password: ", "user: app", "port: 5432"],
    ),
    (f"access_token: {GHP}", [GHP[4:]], ["access_token: "]),
    (
        "We checked the configuration of the deployment pipeline and then found the key "
        f"{AWS_ID} with secret {AWS_SECRET} in the logs",
        [AWS_ID, AWS_SECRET],
        ["We checked the configuration", "in the logs"],
    ),
    (f"aws_secret_access_key = {AWS_SECRET}", [AWS_SECRET], ["aws_secret_access_key = "]),
    (
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAwhatever\nb64b64b64\n"
        "-----END RSA PRIVATE KEY-----\nafter the key",
        ["MIIEowIBAAKCAQEAwhatever", "b64b64b64"],
        ["after the key"],
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n(cut here",
        ["b3BlbnNzaC1rZXktdjEAAAAA", "cut here"],
        [],
    ),
    (
        'curl -H "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123" https://api.example.com',
        ["abcdefghijklmnopqrstuvwxyz0123"],
        ["Authorization: Bearer ", "https://api.example.com"],
    ),
    (
        "keys: sk-proj-abcdefghijklmnopqrstuvwx sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUV "
        "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
        ["abcdefghijklmnopqrstuvwx", "ABCDEFGHIJKLMNOPQRSTUV", "4eC39HqLyjWDarjtT1zdp7dc"],
        ["keys: "],
    ),
    ("google: ya29.a0AfH6SMBxyzxyzxyz123", ["a0AfH6SMBxyzxyzxyz123"], ["google: "]),
    (
        "slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        ["AbCdEfGhIjKlMnOpQrStUvWx"],
        ["slack "],
    ),
    (
        '{"api_key": "abc12345", "token": "tok_1234567890", "secret": "s3cr3t"}',
        ["abc12345", "tok_1234567890", "s3cr3t"],
        ['"api_key": "', '"token": "', '"secret": "'],
    ),
    # more of detect-secrets' token formats
    (
        "SENDGRID=SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG ok",
        ["SG.abcdefghijklmnopqrstuv", "wxyz0123456789ABCDEFG"],
        ["SENDGRID=", " ok"],
    ),
    ("twilio SK0123456789abcdef0123456789abcdef ok", ["0123456789abcdef0123456789abcdef"], [" ok"]),
    (
        "//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789",
        ["npm_abcdefghijklmnop"],
        ["//registry.npmjs.org/:_authToken="],
    ),
    ("gitlab glpat-abcdefghij0123456789 ok", ["glpat-abcdefghij0123456789"], [" ok"]),
    # command lines
    ("mysql --password hunter2hunter2 -u root", ["hunter2hunter2"], ["--password ", " -u root"]),
    ("docker login --password 'Sup3r Secret' reg", ["Sup3r", "Secret'"], ["login --password '"]),
    ("curl -H 'X-Api-Key: abc123def456' https://x", ["abc123def456"], ["X-Api-Key: "]),
    ('{"apiKey": "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"}', ["AIzaSyA1b2C3"], ['"apiKey": "']),
    (
        "git clone https://deploy:Sup3rS3cret@git.example.com/repo.git",
        ["Sup3rS3cret"],
        ["git clone https://deploy:", "@git.example.com/repo.git"],
    ),
]


@pytest.mark.parametrize(("text", "secrets", "kept"), TESTER_CASES)
def test_tester_cases_are_masked_value_only(text: str, secrets: list[str], kept: list[str]) -> None:
    result = mask_secrets(text)
    assert result.count >= 1
    for secret in secrets:
        assert secret not in result.text, (secret, result.text)
    for part in kept:
        assert part in result.text, (part, result.text)
    assert "[masked secret (" in result.text


def test_the_marker_names_the_kind() -> None:
    assert mask_text(f'{{"access_token": "{JWT}"}}') == '{"access_token": "[masked secret (jwt)]"}'
    assert mask_text(f"id {AWS_ID}") == "id [masked secret (aws key)]"
    assert mask_text("password: hunter2hunter2") == "password: [masked secret (keyword)]"


def test_every_value_of_a_line_is_masked_not_only_the_first() -> None:
    # detect-secrets' own keyword plugin reports only the first match of a line
    text = '{"password": "one1one1", "db_password": "two2two2", "secret": "three3three3"}'
    result = mask_secrets(text)
    assert result.count == 3
    assert not any(v in result.text for v in ("one1one1", "two2two2", "three3three3"))


@pytest.mark.parametrize(
    "text",
    [
        "Let me read the file src/contextlens/inspector/screens/assembly_view.py first.",
        "commit 3b60196e1f2a3b4c5d6e7f8091a2b3c4d5e6f708 (HEAD -> main)",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "conversation 550e8400-e29b-41d4-a716-446655440000 resumed",
        '{"type": "tool_use", "id": "toolu_01F74kyEsK4Wjf5xqWDXKdt2", "name": "Read"}',
        '{"tool_call_id": "call_sJVABuFtuLkjxY1f2R92q2P6",'
        ' "id": "chatcmpl-AzqzlWCfMqn8uRVi2AVKudikL70VR"}',
        "usage: max_tokens: 4096, input_tokens: 1234, cache_read_input_tokens: 20000",
        "The password field is required; set token = shared for all channels.",
        "params: { _csrf_token: csrfToken }, apiKey: process.env.LETTA_API_KEY",
        'password = os.environ["DB_PASSWORD"]',
        "password: ${DB_PASSWORD}",
        "cmd --password $PW --token-file ./tok --password-stdin; pytest --token",
        "https://mintcdn.com/claude-code/tpQvD9DKENFo4zX_/images/hooks-lifecycle.svg?w=280",
        "We tested the Basic authentication and Bearer authentication flows.",
    ],
)
def test_ordinary_transcript_content_is_not_masked(text: str) -> None:
    assert mask_secrets(text) == MaskResult(text, 0)


def test_random_base64_without_a_key_name_is_masked() -> None:
    # prefer masking over leaking: an unlabelled random run looks like a key
    blob = "Zk9vQmFyQmF6UXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3A5c3R1dnd4eXo"
    assert mask_text(f"value {blob} end") == "value [masked secret (high entropy)] end"


def test_the_sample_export_has_only_its_planted_credentials_masked() -> None:
    """Every string of the bundled sample: only the fake credentials it plants are masked."""
    masked = []
    for path in sorted(SAMPLE.rglob("*.parquet")):
        table = pq.read_table(path)
        for name in table.column_names:
            for value in table.column(name).to_pylist():
                if isinstance(value, str):
                    for s in find_secrets(value):
                        masked.append(value[s.start : s.end])
    assert masked and all(
        v.startswith("sk-live-51HxEXAMPLE") or v.startswith("eyJhbGciOiJIUzI1NiJ9") for v in masked
    ), masked


@pytest.mark.parametrize(("text", "_secrets", "_kept"), TESTER_CASES)
def test_masking_is_idempotent(text: str, _secrets: list[str], _kept: list[str]) -> None:
    once = mask_text(text)
    assert mask_secrets(once) == MaskResult(once, 0)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(), max_size=300))
def test_any_text_is_masked_without_raising_and_idempotently(text: str) -> None:
    once = mask_secrets(text)
    assert isinstance(once.text, str) and once.count >= 0
    assert mask_text(once.text) == once.text


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "password: ", '"token": "', '\\"', "\\n", "Bearer ", "ghp_",
                "-----BEGIN PRIVATE KEY-----",
                "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsT", " ", "\n", "=", ":", '"', "secret", "eyJ", ".",
                # issue 27's shapes (a marker changes what rules around it see: masked again)
                "://", "@", "-u ", "mysql -p", "sshpass -p ", "<password>", "</password>",
                "?key=", "&", "(", ")", "[", " : ", "Secret1", "$",
            ]
        ),
        max_size=40,
    )
)
# found by this test: a keyword value that is a reference with a random tail
@example(['"token": "', "secret", ".", "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsT", '"token": "'])
def test_hostile_fragments_never_raise_and_stay_idempotent(parts: list[str]) -> None:
    text = "".join(parts)
    once = mask_text(text)
    assert mask_text(once) == once


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        12345,
        b"password: hunter2hunter2",
        "\ud800 password: \udfff lone surrogates \udc00",
        "\x00\x1b[31mpassword: s3cr3t-value\x1b[0m",
        "password: " * 20_000,
        "a" * 200_000,
        "QUJD" * 100_000,
    ],
)
def test_odd_inputs_never_raise(value: object) -> None:
    result = mask_secrets(value)
    assert isinstance(result, MaskResult) and isinstance(result.text, str)
    if value is None:
        assert result == MaskResult("", 0)


def test_a_huge_random_run_is_masked_whole_and_text_around_it_is_kept() -> None:
    import base64
    import hashlib

    raw = b"".join(hashlib.sha256(bytes([i, j])).digest() for i in range(64) for j in range(64))
    blob = base64.b64encode(raw).decode()  # 175 KB of random base64, one unbroken run
    result = mask_secrets(f"image: data:image/png;base64,{blob} done")
    expected = "image: data:image/png;base64,[masked secret (high entropy)] done"
    assert result == MaskResult(expected, 1)


def test_mask_then_cut_masks_before_cutting() -> None:
    text = "x" * 80 + " " + GHP
    # cutting first leaves a prefix of the token too short to be recognised
    cut_first = mask_text(text[:100])
    assert GHP[:18] in cut_first
    result = mask_then_cut(text, 100)
    assert GHP[:6] not in result.text
    assert len(result.text) <= 100 and result.count == 1


def test_mask_then_cut_never_leaves_half_a_marker() -> None:
    text = "password: hunter2hunter2 and more text after it"
    for limit in range(0, 60):
        out = mask_then_cut(text, limit).text
        assert len(out) <= limit
        assert "hunter2" not in out
        if "[masked" in out:
            assert "[masked secret (keyword)]" in out
    assert mask_then_cut("short", 10) == MaskResult("short", 0)


def test_the_read_model_masks_with_the_new_detector() -> None:
    masker = Masker(reveal=False)
    shown = masker.text('{"password": "Tr0ub4dor&3xyz"}', "public")
    assert shown == '{"password": "[masked secret (keyword)]"}' and masker.masked == 1
    assert Masker(reveal=True).text('{"password": "Tr0ub4dor&3xyz"}', "public") == (
        '{"password": "Tr0ub4dor&3xyz"}'
    )


def test_secrets_module_does_not_import_the_ui_libraries() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ingest.secrets as s; s.mask_secrets('password: x1x1x1x1');"
        "print(sorted(m for m in ('textual', 'rich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_spans_are_sorted_and_disjoint() -> None:
    text = f"a {AWS_ID} b\npassword: {PASSWORD}\nc {JWT} d"
    spans = find_secrets(text)
    assert [s.kind for s in spans] == ["aws key", "keyword", "jwt"]
    assert [text[s.start : s.end] for s in spans] == [AWS_ID, PASSWORD, JWT]


# Issue 27: by shape (support.secrets.SHAPES) -- the value alone is masked, what is around it
# stays; and the same syntax without a secret (support.secrets.NEGATIVES) is left alone.
@pytest.mark.parametrize(("line", "secret"), [(line, secret) for _, line, secret in SHAPES],
                         ids=[name for name, _, _ in SHAPES])
def test_each_secret_shape_is_masked_value_only(line: str, secret: str) -> None:
    result = mask_secrets(line)
    assert secret not in result.text and result.count == 1, result.text
    before, after = line.split(secret)
    assert result.text.startswith(before) and result.text.endswith(after), result.text
    assert mask_secrets(result.text) == MaskResult(result.text, 0)


@pytest.mark.parametrize("text", NEGATIVES)
def test_the_same_syntax_without_a_secret_is_not_masked(text: str) -> None:
    assert mask_secrets(text) == MaskResult(text, 0)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # the reference rule looks at the value, not the line: a literal argument of a call
        ('client = OpenAI(api_key="Wx7Lm3Np9Rt2Vx5")',
         'client = OpenAI(api_key="[masked secret (keyword)]")'),
        ('db = connect(password=os.environ["PW"], user="app")',
         'db = connect(password=os.environ["PW"], user="app")'),
        # a word inside a value is not a name: these are passwords, those are references
        ("password: supersecret", "password: [masked secret (keyword)]"),
        ("secret: mySecretPw1", "secret: [masked secret (keyword)]"),
        ("token: OAUTH2_TOKEN", "token: OAUTH2_TOKEN"),
        ("api_key: YOUR_API_KEY", "api_key: YOUR_API_KEY"),
        ("password: str = Field(default=None)", "password: str = Field(default=None)"),
        ("token = tokens[0]", "token = tokens[0]"),
        # the shapes in their other spellings
        ('{\\"password\\" : \\"EscSp4ced\\"}',
         '{\\"password\\" : \\"[masked secret (keyword)]\\"}'),
        ('curl -u "admin:Qu0tedPw" x', 'curl -u "admin:[masked secret (command password)]" x'),
        ("curl --user=admin:LongEq9pw x", "curl --user=admin:[masked secret (command password)] x"),
        ("mysqldump -uroot -pDump9pw db", "mysqldump -uroot -p[masked secret (command password)] db"),
        ("mysql -p'My Quoted 9' db", "mysql -p'[masked secret (command password)]' db"),
        ('<secret name="x">Attr9Secret</secret>',
         '<secret name="x">[masked secret (keyword)]</secret>'),
        ("https://0123456789abcdef0123456789abcdef01234567@github.com/o/r",
         "https://[masked secret (url token)]@github.com/o/r"),
        # and their negatives: variables, a user and a group, a user name in a URL
        ('curl -u "$USER:$PASS" x', 'curl -u "$USER:$PASS" x'),
        ('mysql -u root -p"$MYSQL_PWD" db', 'mysql -u root -p"$MYSQL_PWD" db'),
        ('sshpass -p "$PASS" ssh host', 'sshpass -p "$PASS" ssh host'),
        ("git push -u origin main", "git push -u origin main"),
        ("https://user123@example.com/x", "https://user123@example.com/x"),
        ("https://x.com/?key=value&page=2", "https://x.com/?key=value&page=2"),
        ("<token>{{ secrets.GH }}</token>", "<token>{{ secrets.GH }}</token>"),
    ],
)
def test_shape_variants_and_their_negatives(text: str, shown: str) -> None:
    assert mask_text(text) == shown

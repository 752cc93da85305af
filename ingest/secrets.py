"""Find credentials in untrusted text and replace their values with a visible marker.

(One module, and a long one, on purpose: every rule of what counts as a secret lives here.)

Detection is done by the plugins of ``detect-secrets`` (Yelp's maintained detector): its
keyword regexes for ``key: value`` / ``key = value`` forms in JSON, YAML and config syntax,
its token detectors (AWS, GitHub, GitLab, Slack, Stripe, JWT, OpenAI, Twilio, SendGrid, ...),
its private-key detector and its Shannon-entropy measure. Our own patterns cover only what
it lacks (listed in ``_OWN_PATTERNS``, ``_EXTRA_KEYWORDS`` and ``_PLACED``: secrets a
command line or a URL places without a key name, ``curl -u user:pw``, ``redis://:pw@``).

We call the plugins' compiled regexes and functions directly rather than
``detect_secrets.core.scan.scan_line``: ``scan_line`` rebuilds global settings and filter
caches on every call (slow on a display path, and not thread-safe), reports only the first
keyword match of a line, and yields secret *values* rather than positions (for a GitHub
token it yields just ``ghp``). Here every match has a span, so only the value is replaced,
never the key name around it.

Masking must run on the whole text before anything cuts it: a cut secret no longer matches.
``mask_then_cut`` does both in that order. This module imports neither textual nor rich, so
ingest, replay and the inspector can all use it.
"""

from __future__ import annotations

import re
import string
import sys
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace
from typing import Any, Iterable, NamedTuple

__all__ = [
    "MASK_PREFIX",
    "MaskResult",
    "SecretSpan",
    "find_secrets",
    "identifier_may_hold_secret",
    "identifier_pattern",
    "mask_identifier",
    "mask_secrets",
    "mask_text",
    "mask_then_cut",
]

# The marker starts with "[" so that no keyword rule (whose value must start with a word
# character) matches it again: masking is idempotent.
MASK_PREFIX = "[masked secret"
# Its first word: a value that holds it ran into a marker of an earlier pass (a one-word value
# ends at the marker's first space), and is never masked again.
_MARKER_START = "[masked"

# Entropy: detect-secrets' Shannon measure with its base64 limit of 4.5 bits per character,
# applied without quotes (transcripts are prose, not source code), so a run must also be
# long enough to be a key (>= 24 characters: below that a base64 run cannot reach 4.5 bits
# anyway) and mix letters and digits. Not masked by entropy alone (see docs/security.md):
# hex runs (git commits, sha256 content ids), uuids, API object ids with a known prefix
# (``toolu_``, ``call_``, ``chatcmpl-``, ...) and path segments that are words. A hex or
# prefixed secret is still masked when a key names it (``api_key: 3f9a...``) or its format
# is known (``ghp_...``).
BASE64_LIMIT = 4.5
MIN_ENTROPY_RUN = 24
# A run is measured on its first ENTROPY_SAMPLE characters only (bounded work).
ENTROPY_SAMPLE = 1024
# An unbroken run this long is judged by entropy alone (masked whole when random) and taken
# out of the text the other detectors scan (a 10 MB base64 blob must not cost seconds).
LONG_RUN = 2048
# A masked text up to this long is scanned again (at most RESCAN_ROUNDS times) until a pass
# finds nothing more (see _mask_uncached).
RESCAN_LIMIT = 65_536
RESCAN_ROUNDS = 3
# A keyword rule sees this many characters before and after each trigger word.
KEYWORD_BEFORE = 600
KEYWORD_AFTER = 1200
# A keyword's value is at most this long (detect-secrets' own rule is unbounded, which
# makes a line of repeated ``password:`` quadratic); a longer value is masked to here.
MAX_KEYWORD_VALUE = 500

# Object ids of model APIs and agent tools: random-looking, not credentials. (Not ``sess_``:
# a session id can be a bearer credential.)
_ID_PREFIXES = re.compile(
    r"(?:toolu|srvtoolu|msg|msgbatch|req|call|fc|rs|resp|run|thread|asst|file|batch|evt|agent|"
    r"step|ws|ctc|chatcmpl|gen|cmpl|conv|trace|span)[-_]"
)

# detect-secrets plugins not used: a public IP address is not a credential; the keyword and
# entropy plugins are driven separately below.
_SKIPPED_PLUGINS = {
    "IPPublicDetector",
    "KeywordDetector",
    "Base64HighEntropyString",
    "HexHighEntropyString",
}

# Short names for the marker, by detect-secrets plugin class.
_KIND_BY_PLUGIN = {
    "AWSKeyDetector": "aws key",
    "ArtifactoryDetector": "artifactory token",
    "AzureStorageKeyDetector": "azure key",
    "BasicAuthDetector": "url password",
    "CloudantDetector": "cloudant key",
    "DiscordBotTokenDetector": "discord token",
    "GitHubTokenDetector": "github token",
    "GitLabTokenDetector": "gitlab token",
    "IbmCloudIamDetector": "ibm key",
    "IbmCosHmacDetector": "ibm key",
    "JwtTokenDetector": "jwt",
    "MailchimpDetector": "mailchimp key",
    "NpmDetector": "npm token",
    "OpenAIDetector": "openai key",
    "PrivateKeyDetector": "private key",
    "PypiTokenDetector": "pypi token",
    "SendGridDetector": "sendgrid key",
    "SlackDetector": "slack token",
    "SoftlayerDetector": "softlayer key",
    "SquareOAuthDetector": "square key",
    "StripeDetector": "stripe key",
    "TelegramBotTokenDetector": "telegram token",
    "TwilioKeyDetector": "twilio key",
}

# A detector's match is widened to the right over these characters, so that the whole
# token is masked even where detect-secrets' regex captures only its prefix (GitHub:
# ``ghp``) or stops early (JWT: its regex ends lazily before the signature).
_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "+/=_-.~")

# Lines holding one of these words are the only ones the keyword rules (and detect-secrets'
# vendor rules that need a key name, e.g. ``cloudant_password``) are applied to.
_TRIGGER = re.compile(r"key|pwd|pw|pass|token|secret|auth|credential|contrase", re.I)

# Key names detect-secrets' KeywordDetector does not know (it has password, secret, api_key,
# private_key, ... but no token, credential or authorization). Exact names, so that
# ``max_tokens: 4096`` or ``token_count`` never match.
_EXTRA_KEYWORDS = (
    r"(?:access|refresh|id|auth|api|bearer|session|oauth|csrf|xsrf|client|app|bot|"
    r"personal[_-]?access|security|github|gh|gitlab|slack|npm|pypi|hf|x[_-]auth)[_-]?token"
    r"|token|credentials?|authorization|passphrase|api-key|x-api-key|secret-key|access[_-]?key"
)

# Words after a key that are not its value: placeholders, and the scheme word of
# ``Authorization: Bearer <token>`` (the token itself is masked by the bearer pattern).
_NOT_VALUES = frozenset(
    {"null", "none", "true", "false", "undefined", "required", "optional", "bearer", "basic"}
)
# A value that is a name with one of these words as a part of it is a reference
# (``csrf_token: csrfToken``, ``secrets: LETTA_API_KEY``), not the secret. A word merely
# inside the value is not enough: ``monkey123``, ``Secret123`` and ``keystone42`` are
# passwords.
_REFERENCE_PART = re.compile(
    r"(?:api)?keys?|tokens?|secrets?|pass(?:word|wd)?s?|pwd|pw|credentials?|auth\w*", re.I
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*(?:\(\))?")
# the parts of a name: split at ``_`` and ``.`` and where a lower-case letter meets a capital
_NAME_SPLIT = re.compile(r"[._]+|(?<=[a-z])(?=[A-Z])")
# An unquoted value that starts as a call or a lookup is a reference to the secret, not the
# secret: ``os.environ["PW"]``, ``get_password(user)``, ``request.headers['apikey']``.
_CALL_OR_LOOKUP = re.compile(r"[\w.-]+[\[(]")
_QUOTES = frozenset("'\"`")

# Our own patterns, for formats detect-secrets lacks or matches too narrowly.
_OWN_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # A PEM block: detect-secrets flags only its BEGIN line; the key is the lines after it.
    # An unterminated block is masked to the end of the text.
    (
        "private key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
            r".*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
    ),
    ("private key", re.compile(r"PuTTY-User-Key-File-\d.*?(?:Private-MAC: *\S+|\Z)", re.DOTALL)),
    # Each pattern below starts with a literal and checks the word boundary before it with a
    # lookbehind: Python's re then finds candidates by a fast literal scan, about 30 times
    # faster than a leading ``\b``.
    # token68 after the scheme word; a word of letters only (``Bearer authentication``) is
    # prose, not a token
    (
        "bearer token",
        re.compile(
            r"earer (?<=[Bb]earer )(?<![A-Za-z0-9_][Bb]earer )"
            r"((?=[^\s]*[A-Z0-9._~+/=-])[A-Za-z0-9._~+/=-]{8,})"
        ),
    ),
    (
        "basic auth",
        re.compile(r"Basic (?<![A-Za-z0-9_]Basic )((?=[^\s]*[A-Z0-9+/=])[A-Za-z0-9+/]{12,}={0,2})"),
    ),
    # OpenAI (sk-proj-..., sk-svcacct-...), Anthropic (sk-ant-...), Stripe test and
    # restricted keys; detect-secrets knows only legacy OpenAI keys and live Stripe keys.
    (
        "api key",
        re.compile(
            r"[srp]k[-_](?<![A-Za-z0-9_][srp]k[-_])"
            r"(?:live|test|proj|ant|svcacct|admin)?[-_]?[A-Za-z0-9_-]{16,}"
        ),
    ),
    ("google token", re.compile(r"ya29\.(?<![A-Za-z0-9_]ya29\.)[A-Za-z0-9._-]{10,}")),
    ("google key", re.compile(r"AIza(?<![A-Za-z0-9_]AIza)[0-9A-Za-z_-]{30,}")),
    ("github token", re.compile(r"gh[pousr]_(?<![A-Za-z0-9_]gh[pousr]_)[A-Za-z0-9]{20,}")),
    ("github token", re.compile(r"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{22,}")),
    ("slack token", re.compile(r"xox[abeoprs]-(?<![A-Za-z0-9_]xox[abeoprs]-)[A-Za-z0-9-]{10,}")),
    ("huggingface token", re.compile(r"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{30,}")))


# Secrets placed by a command line or a URL, where no key name says so: (kind, literals of
# which a text must hold one, pattern; the value is the last group that matched). A value
# that is a variable (``$PW``, ``${PW}``) or a short number (``-u 1000:1000``) is not masked.
_VALUE = r"(?:(\\?[\'\"])([^\'\"\n]{1,%d}?)\1|([^\s\'\"\\]{1,%d}))" % (
    MAX_KEYWORD_VALUE,
    MAX_KEYWORD_VALUE,
)
_PLACED: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    # a URL's password with no user name: ``redis://:pw@host``
    ("url password", ("://:",), re.compile(r"://:([^\s@/\\\'\"]{1,%d})@" % MAX_KEYWORD_VALUE)),
    # a token as a URL's user name: ``https://<token>@github.com`` (which of these is a token
    # and which a user name, ``ssh://git@host``, is decided by ``_token_like``)
    (
        "url token",
        ("://",),
        re.compile(r"://(?<=\w://)(?=[^\s@/:]{8,200}@)([A-Za-z0-9._~+=-]+)@"),
    ),
    # ``curl -u user:password``, ``--user user:password`` (not ``-u admin``, ``-u 1000:1000``)
    (
        "command password",
        ("-u",),
        re.compile(
            r"-(?:-user[ \t=]|u)(?<![\w-]--user[ \t=])(?<![\w-]-u)[ \t]*\\?[\'\"]?"
            r"[^\s:\'\"\\]{1,200}:(?!//)([^\s\'\"\\]{1,%d})" % MAX_KEYWORD_VALUE
        ),
    ),
    # ``mysql -pPASSWORD`` (glued; ``-p`` alone prompts for it), mysqldump, mariadb, ...
    # (each pattern starts with a literal, then checks the word boundary: a fast scan; the
    # words between the command and its flag hold no ``[``, so that a marker of an earlier
    # pass never joins a command to a later ``-p``: masking stays idempotent)
    *(
        (
            "command password",
            (client,),
            re.compile(
                rf"{client}(?<![\w.-]{client})[\w-]{{0,12}}(?![\w.])[^\n|;&[]{{0,400}}?[ \t]-p"
                + _VALUE
            ),
        )
        for client in ("mysql", "mariadb")
    ),
    # ``sshpass -p PASSWORD`` (not ``-e``, ``-f FILE``)
    (
        "command password",
        ("sshpass",),
        re.compile(r"sshpass(?<![\w.-]sshpass)[^\n|;&[]{0,200}?[ \t]-p[ \t]*" + _VALUE),
    ),
)


@lru_cache(maxsize=1)
def _lib() -> SimpleNamespace:
    """detect-secrets, imported on first use: it pulls in ``requests`` (a third of a second),
    which a command that never shows content should not pay for."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.filters import heuristic
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    return SimpleNamespace(
        plugin_classes=get_mapping_from_secret_type_to_class,
        heuristic=heuristic,
        kw=keyword,
        RegexBasedDetector=RegexBasedDetector,
        Base64HighEntropyString=Base64HighEntropyString,
    )


class SecretSpan(NamedTuple):
    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class MaskResult:
    """The text with every secret value replaced, and how many values were replaced."""

    text: str
    count: int


_MARKER_RE = re.compile(r"\[masked secret \([a-z ]{1,40}\)\]")


def _marker(kind: str) -> str:
    return f"{MASK_PREFIX} ({kind})]"


class _Rule(NamedTuple):
    kind: str
    regex: re.Pattern[str]
    group: int  # -1: the last group that matched, else 0 (widened over token characters)
    plugin: Any  # a detect-secrets plugin whose analyze_string confirms a match, or None
    anchored: bool = False  # starts with detect-secrets' keyword list: tried at its hits only
    gate: str | None = None  # a literal every match contains: no match in a text without it


def _required_literal(regex: re.Pattern[str]) -> str | None:
    """The longest run of literal characters at the top level of ``regex`` (so in every
    match), if it has one of two or more characters. Only a shortcut: None means "always run
    the regex", which is also the answer if the parser's internals ever change."""
    if regex.flags & re.IGNORECASE:
        return None
    try:
        from re import _constants, _parser  # type: ignore[attr-defined]

        best = run = ""
        for op, arg in _parser.parse(regex.pattern, regex.flags):
            if op is _constants.LITERAL:
                run += chr(arg)
                best = max(best, run, key=len)
            else:
                run = ""
    except Exception:  # noqa: BLE001
        return None
    return best if len(best) >= 2 else None


@lru_cache(maxsize=1)
def _plugin_rules() -> tuple[tuple[_Rule, ...], tuple[_Rule, ...]]:
    """detect-secrets' regex plugins, instantiated once, in a fixed order: the rules for the
    whole text, and those that need a key name on the line (applied to trigger lines)."""
    anywhere: list[_Rule] = []
    keyed: list[_Rule] = []
    lib = _lib()
    plugins = lib.plugin_classes().values()
    for cls in sorted(plugins, key=lambda c: c.__name__):
        name = cls.__name__
        if name in _SKIPPED_PLUGINS or not issubclass(cls, lib.RegexBasedDetector):
            continue
        plugin = cls()
        confirms = cls.analyze_string is not lib.RegexBasedDetector.analyze_string
        for regex in plugin.denylist:
            kind = _KIND_BY_PLUGIN.get(name, "token")
            gate = _required_literal(regex)
            rule = _Rule(kind, regex, -1, plugin if confirms else None, False, gate)
            if _TRIGGER.search(regex.pattern.replace("PRIVATE KEY", "")):
                keyed.append(rule)
            else:
                anywhere.append(rule)
    return tuple(anywhere), tuple(keyed)


def _line_safe(pattern: str) -> str:
    """A detect-secrets keyword pattern whose value stays on its line and is bounded."""
    _kw = _lib().kw
    bounded = r"(?=\w)[^\n\'\"]{0,%d}[^\n,\'\"`]" % MAX_KEYWORD_VALUE
    # a space may stand before the colon too (``{ "password" : "x" }``, a formatter's JSON)
    closing_colon = "(%s)?:" % _kw.CLOSING
    pattern = pattern.replace(closing_colon, "(%s)?[ \t]*:" % _kw.CLOSING)
    return pattern.replace(_kw.SECRET, bounded).replace(_kw.OPTIONAL_WHITESPACE, r"[ \t]*")


@lru_cache(maxsize=1)
def _keyword_rules() -> tuple[_Rule, ...]:
    """detect-secrets' keyword rules for config syntax (``password: x``, ``db_password=x``,
    YAML, .env) and quoted code, then the same shapes for the key names it lacks."""
    _kw = _lib().kw
    rules: list[_Rule] = []
    seen: set[str] = set()
    for table in (_kw.CONFIG_DENYLIST_REGEX_TO_GROUP, _kw.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP):
        for regex, group in table.items():
            if regex.pattern in seen:
                continue
            seen.add(regex.pattern)
            pattern = _line_safe(regex.pattern)
            anchored = pattern.startswith(_kw.DENYLIST_REGEX)
            rules.append(_Rule("keyword", re.compile(pattern, regex.flags), group, None, anchored))
    keys = rf"(?<![A-Za-z0-9])(?:{_EXTRA_KEYWORDS})(?![A-Za-z0-9])"
    assign = rf"{keys}{_kw.CLOSING}[ \t]*(?::=?|={{1,3}}|=>)[ \t]*"
    # quoted: up to the closing quote; bare: one word (``token: 4096, max_tokens: 8000``
    # must not swallow the rest of the line)
    quoted = r"(?=\w)[^\n\'\"`]{0,%d}[^\n,\'\"`]" % MAX_KEYWORD_VALUE
    # a plain word is prose (``shared token = shared events``), not a token
    bare = r"(?=[^\s,;\'\"`)}\]]*(?-i:[0-9A-Z_.+/=-]))\w[^\s,;\'\"`)}\]]{0,%d}" % MAX_KEYWORD_VALUE
    rules.append(_Rule("keyword", re.compile(rf"{assign}({_kw.QUOTE})({quoted})\1", re.I), 2, None))
    rules.append(_Rule("keyword", re.compile(rf"{assign}({bare})", re.I), 1, None))
    # a command-line flag and its value: ``mysql --password hunter2``, ``--token 'x y'``
    # (``--password=x`` is an assignment, found above)
    flag = (
        r"(?<![\w-])--?(?:password|passwd|pass|pwd|secret|client[-_]?secret|api[-_]?key|"
        r"(?:access[-_]?|auth[-_]?|api[-_]?)?token)(?![\w-])[ \t]+"
    )
    quoted_flag = rf"{flag}([\'\"])([^\n\'\"]{{1,{MAX_KEYWORD_VALUE}}})\1"
    bare_flag = rf"{flag}(?![-\'\"])([^\s\'\"]{{1,{MAX_KEYWORD_VALUE}}})"
    rules.append(_Rule("keyword", re.compile(quoted_flag, re.I), 2, None))
    rules.append(_Rule("keyword", re.compile(bare_flag, re.I), 1, None))
    # an XML element named by a key: ``<password>x</password>``, ``<db:apiKey a="1">x</…>``
    names = rf"[\w:.-]{{0,40}}?(?:{'|'.join(_kw.DENYLIST)})[\w.-]{{0,40}}|{_EXTRA_KEYWORDS}"
    element = (
        rf"<({names})(?:[ \t][^<>\n]{{0,200}})?>[ \t]*"
        rf"([^<\s][^<\n]{{0,{MAX_KEYWORD_VALUE - 1}}}?)[ \t]*</\1[ \t]*>"
    )
    rules.append(_Rule("keyword", re.compile(element, re.I), 2, None))
    # a URL query parameter named by a key: ``?key=…``, ``&access_token=…``, ``?apiKey=…``;
    # a plain lower-case word is not a key (``?sort_key=name``)
    param = r"[?&][\w.-]{0,30}?(?:key|token|secret|password|passwd|pwd|pass|auth)="
    value = (
        r"((?=[^&#\s\'\"<>\\]*(?-i:[0-9A-Z_.+/=%%~-]))[^&#\s\'\"<>\\]{4,%d})"
        % MAX_KEYWORD_VALUE
    )
    rules.append(_Rule("url key", re.compile(param + value, re.I), 1, None))
    return tuple(rules)


@lru_cache(maxsize=1)
def _base64_plugin() -> Any:
    return _lib().Base64HighEntropyString(limit=BASE64_LIMIT)


_RUN = re.compile(r"[A-Za-z0-9+/_-]{%d,}={0,2}" % MIN_ENTROPY_RUN)
_LONG_RUN = re.compile(r"[A-Za-z0-9+/_-]{%d,}={0,2}" % LONG_RUN)
_HEX_ONLY = re.compile(r"[0-9a-fA-F-]+")
# a path segment that is a word: lower-case (``hooks-lifecycle``), CamelCase or a short tag
_WORDISH = re.compile(
    r"\.?[a-z0-9]+(?:[._-][a-z0-9]+)*|[A-Z][a-z]+(?:[A-Z][a-z]+)*|[A-Z0-9_]{1,12}"
)
_HAS_DIGIT = re.compile(r"\d")
_HAS_ALPHA = re.compile(r"[A-Za-z]")
_ESCAPE = re.compile(r"\\([\"\\/nrt])")
_UNESCAPED = {"n": "\n", "r": "\n", "t": "\t", '"': '"', "\\": "\\", "/": "/"}


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    # rightwards only: every detector's match starts where its token starts, and a token
    # is often glued to its key on the left (``_authToken=npm_…``, ``KEY=SG.…``)
    n = len(text)
    while end < n and text[end] in _TOKEN_CHARS and end - start < 8192:
        end += 1
    while end > start and text[end - 1] == ".":
        end -= 1
    return start, end


def _is_reference_name(value: str) -> bool:
    """``LETTA_API_KEY``, ``csrfToken``, ``process.env.DB_PASSWORD``, ``get_secret()``, and a
    key word alone (``password: password``): names, not values."""
    if not _IDENTIFIER.fullmatch(value):
        return False
    name = value.removesuffix("()")
    if _HAS_DIGIT.search(name) and not ("_" in name or "." in name):
        return False  # ``Secret123``, ``mySecretPw1``: one word with digits is a password
    return any(_REFERENCE_PART.fullmatch(part) for part in _NAME_SPLIT.split(name) if part)


def _keyword_value_ok(value: str, quoted: bool) -> bool:
    """Whether a keyword rule's value is a secret. The rules that make a value a reference
    look at the value alone, never at the line around it: ``OpenAI(api_key="…")`` is a
    call on the line, but its argument is a literal."""
    v = value.strip()
    if not v or (not _HAS_ALPHA.search(v) and len(v) < 6):
        return False  # a bare number is a count or a port, not a password
    if _MARKER_START in v:
        # already judged: the value was not a secret as a whole, a part of it was masked
        # (``secret.<random>``: a reference with a random tail); masking again must not
        # now take the whole value (idempotence)
        return False
    h = _lib().heuristic
    if v.lower() in _NOT_VALUES or h.is_templated_secret(v) or h.is_prefixed_with_dollar_sign(v):
        return False
    if _is_reference_name(v):
        return False
    if not quoted and ("(" in v or "[" in v):
        if _CALL_OR_LOOKUP.match(v) or h.is_indirect_reference(v):
            # ``password = get_password()``; ``password: str = Field(...)`` (an annotation)
            return False
    return True


def _placed_value_ok(value: str) -> bool:
    if not value or value[0] == "$" or _MARKER_START in value:
        return False  # a variable, or an earlier pass's marker
    if not _HAS_ALPHA.search(value) and len(value) < 6:
        return False  # ``-u 1000:1000`` is a user and a group
    return not _lib().heuristic.is_templated_secret(value)


def _token_like(value: str) -> bool:
    """A URL's user name that is a token, not a name: letters and digits mixed, and either
    both cases or 20 or more characters (``ghp_…``, a 40-hex token; not ``git``, ``deploy2``)."""
    if not (_HAS_DIGIT.search(value) and _HAS_ALPHA.search(value)):
        return False
    return len(value) >= 20 or (value != value.lower() and value != value.upper())


def _placed_spans(text: str, out: list[SecretSpan]) -> None:
    for kind, literals, regex in _PLACED:
        if not any(literal in text for literal in literals):
            continue
        for m in regex.finditer(text):
            g = next((i for i in range(regex.groups, 0, -1) if m.group(i)), 0)
            value = m.group(g)
            if not _placed_value_ok(value) or (kind == "url token" and not _token_like(value)):
                continue
            out.append(SecretSpan(m.start(g), m.end(g), kind))


@lru_cache(maxsize=1)
def _keyword_hit() -> re.Pattern[str]:
    return re.compile(_lib().kw.DENYLIST_REGEX, re.IGNORECASE)


def _matches(rule: _Rule, text: str, hits: list[int]) -> Iterable[re.Match[str]]:
    if not rule.anchored:
        yield from rule.regex.finditer(text)
        return
    # detect-secrets' own rules begin with its keyword list: trying them only where a
    # keyword is (instead of at every character) is what makes them cheap
    after = 0
    for pos in hits:
        if pos < after:
            continue  # inside the previous match, as finditer would skip it
        m = rule.regex.match(text, pos)
        if m:
            after = m.end()
            yield m


def _apply_rules(text: str, rules: Iterable[_Rule], out: list[SecretSpan], keyword: bool) -> None:
    hits = [m.start() for m in _keyword_hit().finditer(text)] if keyword else []
    for rule in rules:
        if rule.gate is not None and rule.gate not in text:
            continue
        for m in _matches(rule, text, hits):
            if rule.group >= 0:
                g = rule.group
            else:
                g = next((i for i in range(rule.regex.groups, 0, -1) if m.group(i)), 0)
            start, end = m.span(g)
            if end <= start:
                continue
            confirmed = rule.plugin is None or next(rule.plugin.analyze_string(m.group(0)), None)
            if not confirmed:
                continue  # e.g. a JWT whose parts do not decode
            if keyword:
                quoted = start > 0 and text[start - 1] in _QUOTES
                if not _keyword_value_ok(m.group(g), quoted):
                    continue
            else:
                start, end = _widen(text, start, end)
            out.append(SecretSpan(start, end, rule.kind))


class _View(NamedTuple):
    """A text derived from the original, and for positions in it, the original positions:
    ``marks`` are (view position, original position) pairs in increasing order."""

    text: str
    marks: list[tuple[int, int]]

    def original(self, pos: int) -> int:
        i = bisect_right(self.marks, (pos, sys.maxsize)) - 1
        view_pos, orig_pos = self.marks[i]
        return orig_pos + (pos - view_pos)


def _trigger_windows(text: str) -> _View | None:
    """The parts of ``text`` around trigger words (KEYWORD_BEFORE characters before one,
    KEYWORD_AFTER after, never across a line end), joined by newlines."""
    pieces: list[str] = []
    marks: list[tuple[int, int]] = []
    windows: list[list[int]] = []
    for m in _TRIGGER.finditer(text):
        line_start = text.rfind("\n", max(0, m.start() - KEYWORD_BEFORE), m.start()) + 1
        start = max(line_start, m.start() - KEYWORD_BEFORE)
        line_end = text.find("\n", m.end(), m.end() + KEYWORD_AFTER)
        end = min(len(text), m.end() + KEYWORD_AFTER) if line_end < 0 else line_end
        if windows and start <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], end)
        else:
            windows.append([start, end])
    if not windows:
        return None
    size = 0
    for start, end in windows:
        marks.append((size, start))
        pieces.append(text[start:end])
        size += end - start + 1
    return _View("\n".join(pieces), marks)


def _unescaped(text: str) -> _View | None:
    """``text`` with JSON string escapes decoded (a tool result that is JSON inside JSON is
    scanned as the lines it stands for)."""
    pieces: list[str] = []
    marks: list[tuple[int, int]] = [(0, 0)]
    pos = 0
    size = 0
    for m in _ESCAPE.finditer(text):
        pieces.append(text[pos : m.start()])
        size += m.start() - pos
        marks.append((size, m.start()))
        pieces.append(_UNESCAPED[m.group(1)])
        size += 1
        pos = m.end()
        marks.append((size, pos))
    if pos == 0:
        return None
    pieces.append(text[pos:])
    return _View("".join(pieces), marks)


def _keyed_spans(text: str) -> list[SecretSpan]:
    """Keyword rules and key-named vendor rules, on the windows around trigger words and on
    those windows with JSON escapes decoded (up to two levels: JSON text inside JSON inside
    JSON), every span mapped back to ``text``."""
    windows = _trigger_windows(text)
    if windows is None:
        return []
    _anywhere, keyed = _plugin_rules()
    views = [(windows, [windows])]
    found: list[SecretSpan] = []
    chain = [windows]
    view = windows
    for _ in range(2):
        nxt = _unescaped(view.text)
        if nxt is None:
            break
        chain = chain + [nxt]
        views.append((nxt, list(chain)))
        view = nxt
    for n, (view, path) in enumerate(views):
        spans: list[SecretSpan] = []
        _apply_rules(view.text, _keyword_rules(), spans, keyword=True)
        if n == 0:
            # vendor rules (cloudant, ibm, softlayer) take hex or alphanumeric values that
            # JSON escaping does not change
            _apply_rules(view.text, keyed, spans, keyword=False)
        for s in spans:
            start, end = s.start, s.end
            for v in reversed(path):
                start, end = v.original(start), v.original(end - 1) + 1
            found.append(SecretSpan(start, end, s.kind))
    return found


def _is_secret_run(run: str) -> bool:
    """A run of base64/url-safe characters that is random enough to be a key."""
    core = run.rstrip("=").strip("-_/")
    if len(core) < MIN_ENTROPY_RUN:
        return False
    if _HEX_ONLY.fullmatch(core) or _ID_PREFIXES.match(core):
        return False
    sample = core[:ENTROPY_SAMPLE]
    if not (_HAS_DIGIT.search(sample) and _HAS_ALPHA.search(sample)):
        return False
    h = _lib().heuristic
    if h.is_potential_uuid(sample) or h.is_sequential_string(sample):
        return False
    return _base64_plugin().calculate_shannon_entropy(sample) > BASE64_LIMIT


def _entropy_spans(text: str, out: list[SecretSpan]) -> None:
    for m in _RUN.finditer(text):
        run = m.group(0)
        if "/" in run:
            parts = run.split("/")
            words = sum(1 for p in parts if _WORDISH.fullmatch(p))
            if words * 2 >= len(parts):
                # a path or URL: only a random segment of it is masked
                pos = m.start()
                for p in parts:
                    if _is_secret_run(p):
                        out.append(SecretSpan(pos, pos + len(p), "high entropy"))
                    pos += len(p) + 1
                continue
        if _is_secret_run(run):
            out.append(SecretSpan(m.start(), m.end(), "high entropy"))


def _without_long_runs(text: str) -> tuple[str, list[SecretSpan], _View | None]:
    """Unbroken runs of LONG_RUN or more token characters are judged by entropy alone
    (masked whole when random: keys, encrypted blobs, base64 images) and cut out of the text
    the other detectors scan, so that none of them spends time on a 10 MB blob."""
    runs = list(_LONG_RUN.finditer(text))
    if not runs:
        return text, [], None
    spans: list[SecretSpan] = []
    pieces: list[str] = []
    marks: list[tuple[int, int]] = [(0, 0)]
    pos = size = 0
    for m in runs:
        if _is_secret_run(m.group(0)):
            spans.append(SecretSpan(m.start(), m.end(), "high entropy"))
        pieces.append(text[pos : m.start()])
        size += m.start() - pos
        pieces.append(" ")  # a separator no detector matches across
        size += 1
        pos = m.end()
        marks.append((size, pos))
    pieces.append(text[pos:])
    scanned = "".join(pieces)
    return scanned, spans, _View(scanned, marks)


def _inside(span: SecretSpan, markers: list[tuple[int, int]]) -> bool:
    i = bisect_right(markers, (span.start, sys.maxsize)) - 1
    return i >= 0 and markers[i][0] <= span.start and span.end <= markers[i][1]


def find_secrets(text: str) -> list[SecretSpan]:
    """The secret values in ``text``, as merged, non-overlapping spans in text order."""
    if not text:
        return []
    spans: list[SecretSpan] = []
    # PEM blocks first, on the original text: they are long runs too.
    for kind, regex in _OWN_PATTERNS[:2]:
        spans.extend(SecretSpan(m.start(), m.end(), kind) for m in regex.finditer(text))
    scanned, long_spans, view = _without_long_runs(text)
    spans.extend(long_spans)
    found: list[SecretSpan] = []
    for kind, regex in _OWN_PATTERNS[2:]:
        g = 1 if regex.groups else 0  # the value after a scheme word, else the match
        found.extend(SecretSpan(m.start(g), m.end(g), kind) for m in regex.finditer(scanned))
    _apply_rules(scanned, _plugin_rules()[0], found, keyword=False)
    _placed_spans(scanned, found)
    found.extend(_keyed_spans(scanned))
    _entropy_spans(scanned, found)
    if view is None:
        spans.extend(found)
    else:
        spans.extend(
            SecretSpan(view.original(s.start), view.original(s.end - 1) + 1, s.kind) for s in found
        )
    if not spans:
        return []
    if MASK_PREFIX in text:
        # a marker of an earlier pass is not a value (``--password [masked secret (...)]``):
        # masking stays idempotent whatever a rule accepts as a value
        markers = [(m.start(), m.end()) for m in _MARKER_RE.finditer(text)]
        spans = [s for s in spans if not _inside(s, markers)]
        if not spans:
            return []
    # Earlier start first; at the same start the longer span (its kind names the merge).
    spans.sort(key=lambda s: (s.start, -s.end))
    merged: list[SecretSpan] = []
    for s in spans:
        if merged and s.start < merged[-1].end:
            last = merged[-1]
            if s.end > last.end:
                merged[-1] = SecretSpan(last.start, s.end, last.kind)
            continue
        merged.append(s)
    return merged


def _apply(text: str, spans: list[SecretSpan]) -> str:
    pieces: list[str] = []
    pos = 0
    for s in spans:
        pieces.append(text[pos : s.start])
        pieces.append(_marker(s.kind))
        pos = s.end
    pieces.append(text[pos:])
    return "".join(pieces)


def _mask_uncached(text: str) -> MaskResult:
    try:
        spans = find_secrets(text)
        if not spans:
            return MaskResult(text, 0)
        masked, count = _apply(text, spans), len(spans)
        # A marker changes what the rules around it see (a key a rejected value hid, a
        # command now next to a flag): a second pass can find more. Masked again until
        # nothing changes, so masking is idempotent; a text longer than RESCAN_LIMIT is
        # masked once (a second scan of a prompt of megabytes costs as much as the first).
        for _ in range(RESCAN_ROUNDS if len(text) <= RESCAN_LIMIT else 0):
            more = find_secrets(masked)
            if not more:
                break
            masked, count = _apply(masked, more), count + len(more)
    except Exception:  # noqa: BLE001 - a detector bug must not show the text unmasked
        return MaskResult(_marker("unscannable text"), 1)
    return MaskResult(masked, count)


@lru_cache(maxsize=4096)
def _mask_cached(text: str) -> MaskResult:
    return _mask_uncached(text)


@lru_cache(maxsize=8)
def _mask_cached_large(text: str) -> MaskResult:
    return _mask_uncached(text)


def mask_secrets(text: Any) -> MaskResult:
    """``text`` with each secret value replaced by ``[masked secret (kind)]``.

    Never raises: ``None`` is the empty text, another non-str value is masked as its
    ``str()``. Deterministic and idempotent. Apply it to the whole text before any cut.
    """
    if text is None:
        return MaskResult("", 0)
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception:  # noqa: BLE001 - an object whose __str__ fails shows nothing
            return MaskResult(_marker("unprintable value"), 1)
    if len(text) <= 2048:
        # labels repeat across screen refreshes
        return _mask_cached(text)
    # a prompt is shown again on every refresh of its screen
    return _mask_cached_large(text)


def mask_text(text: Any) -> str:
    """The masked text alone."""
    return mask_secrets(text).text


def mask_then_cut(text: Any, limit: int, ellipsis: str = "…") -> MaskResult:
    """Mask the whole text, then cut it to at most ``limit`` characters (``ellipsis``
    included). A cut never splits a marker: the marker is dropped whole instead."""
    masked = mask_secrets(text)
    out = masked.text
    limit = max(0, limit)
    if len(out) <= limit:
        return masked
    keep = max(0, limit - len(ellipsis))
    for m in _MARKER_RE.finditer(out, max(0, keep - 64), keep + 64):
        if m.start() < keep < m.end():
            keep = m.start()
            break
    return MaskResult(out[:keep] + ellipsis[: max(0, limit - keep)], masked.count)


# ------------------------------------------------------------------------------ identifiers
#
# An identifier (an id, a tag, a model, provider, tool or skill name: ``ingest.contract``
# says which columns are identifiers) is not prose. It is masked when it holds a secret of a
# known shape (a token format, a PEM or PuTTY key, a key-named value such as
# ``password=hunter2``, a URL's or a command's credentials), never for its entropy alone: a
# random run id is an id, not a key. Which identifiers may hold one is decided by ONE
# regular expression made from the detector's own rules above (``_OWN_PATTERNS``,
# detect-secrets' token plugins, the gates of the keyword and placed rules), written in the
# syntax both Python's ``re`` and RE2 (pyarrow.compute, DuckDB) read, so a column of a
# million ids is judged in one vectorized pass. It matches a superset of what those rules
# find (their lookarounds are dropped: they only narrow a match); a value it matches, rare
# (a secret, or a word like ``tokens:4096``), then goes through ``mask_secrets``, which
# decides.

# RE2 refuses a counted repetition above this bound
_RE2_MAX_REPEAT = 1000
# What a key-named value needs after its key: an assignment, a quote, a tag's end or a space
# (``password=x``, ``"token": "x"``, ``<password>x``, ``--password x``)
_AFTER_KEY = r"""[^:=>'"\s]*[:=>'"\s]"""


def _skip_group(pattern: str, i: int) -> int:
    """The index after the group that opens at ``pattern[i]`` (``(``)."""
    depth = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i = _skip_class(pattern, i)
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced group")


def _skip_class(pattern: str, i: int) -> int:
    """The index after the character class that opens at ``pattern[i]`` (``[``)."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a leading ] is a literal
    while j < len(pattern):
        if pattern[j] == "\\":
            j += 2
            continue
        if pattern[j] == "]":
            return j + 1
        j += 1
    raise ValueError("unterminated class")


_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")


def _superset(pattern: str) -> str:
    """``pattern`` without its lookarounds and with ``\\Z`` and repetitions RE2 refuses
    made wider: it matches wherever ``pattern`` does (and maybe elsewhere). ValueError if
    it uses what has no such widening (a back-reference)."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt.isdigit() and nxt != "0":
                raise ValueError("back-reference")
            # ``\Z`` (the end) becomes nothing: an empty alternative widens, as a dropped
            # lookaround does
            if nxt != "Z":
                out.append(pattern[i : i + 2])
            i += 2
        elif ch == "[":
            j = _skip_class(pattern, i)
            out.append(pattern[i:j])
            i = j
        elif pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            i = _skip_group(pattern, i)
            # a quantifier on a lookaround has nothing left to repeat
            m = re.compile(r"[?*+]|\{\d+(?:,\d*)?\}").match(pattern, i)
            if m:
                i = m.end()
        elif pattern.startswith("(?P<", i) or pattern.startswith("(?P=", i):
            raise ValueError("named group")
        elif ch == "{" and (m := _REPEAT.match(pattern, i)):
            low, comma, high = int(m.group(1)), m.group(2), m.group(3)
            if low > _RE2_MAX_REPEAT:
                raise ValueError("repetition too long")
            if comma and high and int(high) > _RE2_MAX_REPEAT:
                out.append("{%d,}" % low)
            else:
                out.append(m.group(0))
            i = m.end()
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _flagged(pattern: str, flags: int) -> str:
    """``pattern`` as a group carrying its flags inline (each alternative of a union keeps
    its own case sensitivity and dot rule)."""
    if flags & re.VERBOSE and re.search(r"\s|#", pattern):
        raise ValueError("verbose pattern")
    inline = ("i" if flags & re.IGNORECASE else "") + ("s" if flags & re.DOTALL else "")
    return f"(?{inline}:{pattern})" if inline else f"(?:{pattern})"


def _rule_alternative(regex: re.Pattern[str], gate: str | None) -> str:
    """One alternative of the identifier pattern for a rule: the rule widened
    (``_superset``); if it cannot be, the literal every match of it holds."""
    try:
        widened = _flagged(_superset(regex.pattern), regex.flags)
        re.compile(widened, re.ASCII)
        return widened
    except (ValueError, re.error):
        literal = gate or _required_literal(regex)
        if literal is None:
            raise ValueError(f"no identifier form for the rule {regex.pattern!r}") from None
        return re.escape(literal)


@lru_cache(maxsize=1)
def identifier_pattern() -> str:
    """The one regular expression an identifier that may hold a secret matches, in the
    syntax shared by Python's ``re`` (with ``re.ASCII``) and RE2 (pyarrow.compute's
    ``match_substring_regex``, DuckDB's ``regexp_matches``)."""
    alternatives: list[str] = []
    # token formats: our own patterns (PEM and PuTTY blocks among them), then detect-secrets'
    # plugins that need no key name
    for _kind, regex in _OWN_PATTERNS:
        alternatives.append(_rule_alternative(regex, None))
    anywhere, _keyed = _plugin_rules()
    for rule in anywhere:
        alternatives.append(_rule_alternative(rule.regex, rule.gate))
    # the keyword rules and the key-named plugins run only where ``_TRIGGER`` matches, and
    # each needs a separator after its key word
    alternatives.append(f"(?i:(?:{_TRIGGER.pattern}){_AFTER_KEY})")
    # secrets placed by a URL or a command line: the literals that gate those rules
    literals = sorted({lit for _kind, lits, _regex in _PLACED for lit in lits})
    alternatives.extend(re.escape(lit) for lit in literals)
    unique = list(dict.fromkeys(alternatives))
    return "|".join(unique)


@lru_cache(maxsize=1)
def _identifier_regex() -> re.Pattern[str]:
    return re.compile(identifier_pattern(), re.ASCII)


def identifier_may_hold_secret(text: str) -> bool:
    """Whether ``identifier_pattern`` matches ``text`` (Python's side of the vectorized
    test; the two agree, tests/unit/test_identifier_secrets.py)."""
    return _identifier_regex().search(text) is not None


def mask_identifier(text: Any) -> MaskResult:
    """An identifier with the secrets it holds replaced (``mask_secrets``), if it may hold
    one (``identifier_pattern``); else as it is."""
    if text is None:
        return MaskResult("", 0)
    if not isinstance(text, str):
        text = str(text)
    if not identifier_may_hold_secret(text):
        return MaskResult(text, 0)
    return mask_secrets(text)

"""Secret redaction shared by every export and by publishing.

``redact(text)`` replaces each secret with ``[REDACTED]`` (CodeSmith's marker) and turns home
directory paths into ``~``. ``find_secrets(text)`` runs the same detectors and reports what it
found (kind and offsets, never the secret), so a caller can refuse to let text leave the machine.
The two agree: ``find_secrets(redact(x)) == []`` and ``redact(redact(x)) == redact(x)``.

What is redacted
----------------
- CodeSmith's own rule (FORMATS.md §2.4): a case-insensitive ``sk-``, ``dsk-``, ``deepseek-`` or
  ``Bearer `` is replaced, prefix included, up to the next whitespace, ``,`` or ``;``.
  **Difference from CodeSmith**, on purpose: CodeSmith redacts every occurrence, so
  ``deepseek-v4-pro``, ``scikit sk-learn``, ``task-12`` (it contains ``sk-``) and "bearer auth"
  come out as ``[REDACTED]``. Here the prefix must start a word and what follows must look like a
  key: for ``sk-``/``dsk-``/``deepseek-`` one ``-``/``_``-separated part of 16+ characters with a
  digit or mixed case (``sk-proj-…``, ``sk-ant-api03-…``, ``sk-<32 hex>``); for ``Bearer`` a
  token of 8+ characters with a digit, or 20+ characters. The span also stops at quotes and
  brackets, so ``"sk-…"`` keeps its quotes and JSON stays JSON.
- GitHub tokens (``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_``), GitLab (``glpat-``), npm (``npm_``),
  Hugging Face (``hf_``), Stripe (``sk_live_``/``rk_test_``…), Google API keys (``AIza…``).
- AWS access key ids (``AKIA``/``ASIA``/``AGPA``/``AIDA``/``AROA``… + 16); AWS secret keys
  when assigned (``aws_secret_access_key = …``, ``"SecretAccessKey": "…"``).
- Slack tokens (``xoxb-`` ``xoxp-`` ``xoxa-`` ``xoxr-`` ``xoxs-`` ``xoxo-``, ``xapp-``) and
  Slack incoming-webhook URLs.
- PEM private key blocks, the whole block from ``-----BEGIN … PRIVATE KEY-----`` to its END
  line (also with ``\\n`` escapes inside JSON strings; a block with no END line is redacted to
  the end of its base64).
- JWTs: three base64url parts separated by dots, the header starting ``eyJ``.
- Credentials in URLs: ``scheme://user:pass@host`` (also with an empty user,
  ``redis://:pass@host``) becomes ``scheme://[REDACTED]@host`` (scheme and host kept;
  ``ssh://git@host`` has no password and is left alone); cut before the ``@`` with an
  ellipsis (``scheme://user:pass…``, a DuckDB error message), ``scheme://[REDACTED]…``
  (``http://host:8080…``, a port, is left alone).
- Stripe webhook signing secrets (``whsec_…``) and SendGrid keys (``SG.<id>.<secret>``).
- A token of these families glued to a word by ``_`` or ``-`` (``TOKEN_ghp_…``,
  ``call_sk-proj-…``, ``key-glpat-…``, ``ghp_…_old``), where the family's real format tells it
  from a code identifier that holds the prefix: GitHub (``gh?_`` + 36 with a digit,
  ``github_pat_`` 22 + ``_`` + 59), npm (+ 36 with a digit), Hugging Face (+ 34), Google
  (``AIza`` + 35), SendGrid (22 and 43), Slack (``xoxb-`` and its kin with digits first,
  ``xapp-<digit>-``), JWTs, AWS key ids; with a random-looking body GitLab and Stripe keys
  (both cases, or a digit where the text may be case-folded), ``whsec_`` (a digit or both
  cases), and ``sk-proj-``/``sk-ant-…-``/``sk-svcacct-``/``sk-admin-`` with a key-like part.
  A bare ``sk-``/``dsk-``/``deepseek-`` keeps the word-start rule (``task-sk-Learn2026…``,
  ``risk-skeleton-…`` stay), as do bodies of the wrong length or that read as words
  (``is_ghs_AuthenticationEnabledFlag``, ``x-glpat-rotation-guide``,
  ``run_npm_installDependenciesAndCacheTheResult``).
- A token hard-wrapped across a line break (a terminal, an e-mail, a quoted reply, a ledger
  entry wrapped at 80 columns; also a JSON string's ``\\n``): for the families with a fixed
  prefix and a known body length (GitHub ``gh?_`` + 36 and ``github_pat_``, npm, Hugging Face,
  Google ``AIza``, AWS ``AKIA``/``ASIA``), a head that ends at a line break short of its length,
  completed by the body characters that start the next line (after indentation or ``> ``
  quote markers), is replaced, both parts, and the line break stays:
  ``x ghp_R7kQ2mX9\\n  vL4p… y`` becomes ``x [REDACTED]\\n  [REDACTED] y``. A complete token
  takes nothing from the next line, and a head the next line does not complete stays. A PEM
  block whose BEGIN or END line was wrapped (between words or inside one, also quoted) is
  redacted as a whole block.
- A token of one of these families that was already cut before it got here, with an ellipsis
  (``…`` or ``...``) at the cut, as a DuckDB error message or an agent's tool cuts a long line:
  the prefix and the 4+ characters after it (with a digit or mixed case; capitals and digits
  after ``AKIA``/``ASIA``, and a digit among them when they were lowercased) before the
  ellipsis, so
  no recognisable prefix of a key stays; ``the ghp_… prefix``, ``sk-learn...`` and, folded,
  ``akiapolaau...`` or ``Akiachak…`` (words) are left alone.
- Secrets written without ``=``, only the value replaced: ``aws configure set
  aws_secret_access_key …`` (and ``aws_session_token``), ``curl -u user:pw`` /
  ``--user``, a command line's ``--password pw`` / ``--api-key k`` / ``--client-secret s``
  (not a word of prose about the flag: "the ``--token`` flag", nor a count of up to five
  digits after a flag that only ends in token or pass: ``--max-token 4096``),
  ``docker login -p pw``,
  ``sshpass -p pw``, ``redis-cli -a pw``, a ``.netrc`` ``machine … login … password …``
  (one line or several),
  ``mysql -p<pw>`` (``-p`` followed by a space prompts and is left alone), and a password
  stated in prose ("the password is …", "password for the db was …"; ordinary words after
  "is", such as "wrong", "required" or "stored", are not passwords).
- Assignments whose key ends in ``password``, ``passwd``, ``passphrase``, ``secret``,
  ``token``, ``api_key``/``apikey``/``api-key``, ``access_key``, ``secret_key``,
  ``private_key``, ``account_key`` (Azure ``AccountKey=``; ``SharedAccessKey=`` matches
  ``access_key``), ``credential(s)``, in prose, JSON, YAML, env files, URLs' query strings and
  ``Authorization: Basic|Token|Bearer …`` headers: only the value is replaced
  (``"password": "[REDACTED]"``). Values that are clearly not secrets are left alone: empty,
  ``null``/``None``/``true``/``false``, type names (``password: str``), variable references
  (``$DB_PASSWORD``, ``${TOKEN}``, ``{{ token }}``, ``<your-token>``), function calls, and
  ``[REDACTED]`` itself.
- Home directory paths: ``<home>/…`` becomes ``~/…`` (so ``<home>/.codesmith/secrets`` becomes
  ``~/.codesmith/secrets`` as in CodeSmith), where home is the ``home`` argument or the real
  home directory. Other users' homes are also folded: ``/home/<user>/…``, ``/Users/<user>/…``
  and ``C:\\Users\\<user>\\…`` become ``~/…`` (``~\\…``), also after a ``/`` (a file URI's
  ``file:///home/<user>/x`` becomes ``file://~/x``), because a handoff report should not
  carry user names. ``/root``, ``/srv/home/x`` and relative paths are left alone.

Spelled secrets
---------------
Agent Markdown may spell a secret the way a viewer decodes it: ``ghp&#95;…``, ``ghp&#x5f;…``,
``ghp&lowbar;…``, letters as ``&#103;``, ``ghp\\_…`` (a CommonMark backslash escape), or
``ghp\\u005f…`` (a JSON, JavaScript or Python string's escape, also ``\\x5f``); a link, a query
string or a data download may carry it URL-encoded: ``ghp%5F…``, ``sk%2Dproj…``,
``password=%70w…``. Any Markdown or HTML viewer, browser or URL decoder shows the real token,
so a text holding ``&``, ``\\`` or ``%`` followed by two hex digits is also read decoded
(character references as ``html.unescape`` reads them, backslash escapes of ASCII punctuation
and ``\\u``/``\\x``/``\\U`` escapes of a code point, percent-escapes as UTF-8 as
``urllib.parse.unquote`` reads them, all in one pass; twice, for such text inside a JSON
string, ``&amp;#95;``, ``%255F``, or the two mixed: ``&#37;5F``, which an ``href`` turns into
``%5F``, and ``%26%2395%3B``), and the span of the original text that decodes to a secret is
replaced: ``x ghp&#95;… y`` becomes ``x [REDACTED] y``, ``?t=ghp%5F…&n=1`` becomes
``?t=[REDACTED]&n=1``, ``password: &quot;pw&quot;`` becomes ``password:
&quot;[REDACTED]&quot;``. Percent-escaped bytes that are not UTF-8 (``%DB_PASSWORD%``, a
Windows variable) are left as written. A character a viewer draws as nothing (a soft hyphen,
a zero-width space or joiner, a word joiner, a bidi mark, the BOM), as text pasted from a chat
or a rich-text page may hold inside a token, is read as nothing the same way, and the span
that holds it is replaced. A fullwidth form of an ASCII character (U+FF01-U+FF5E, as an IME
or CJK text writes them: ``ghp_…`` as U+FF47 U+FF48 U+FF50 U+FF3F …; NFKC, a search engine or
a copy into a terminal turns them back) is read as that character, one for one, and the
span is replaced: ``token <fullwidth ghp_…> for CI`` becomes ``token [REDACTED] for CI``. CJK
text whose fullwidth punctuation (U+FF08 U+FF1A U+FF09 …) spells no secret is
left as written. Text with none of these is read once. Every output that
redacts (site pages, downloads and search index of a redacted build, handoff, publish, exports)
gets this here, and publish's final scan reads the same decoded copies (``scan_variants``).

What is never touched (the decoys the tests hold): UUIDs, 40-hex commit SHAs, 64-hex SHA-256
digests, ordinary words (author, authority, tokenizer, tokens, password as a bare word), file
paths outside home directories, URLs without credentials (``ssh://git@github.com``), e-mail
addresses, model names (``deepseek-v4-pro``), ``sk-learn``, ``&amp;`` and escapes that spell no
secret (``AT&amp;T``, ``?a=1&amp;b=2``, ``\\*``, ``100%``, ``a%20b``, ``50%5F…``).
"""

from __future__ import annotations

import bisect
import functools
import html
import itertools
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

MARKER = "[REDACTED]"

__all__ = ["MARKER", "Finding", "find_secrets", "find_secrets_anywhere", "redact",
           "scan_variants"]


@dataclass(frozen=True, slots=True)
class Finding:
    """Where a secret (or a home path) is: its kind and offsets, never the secret itself."""

    kind: str
    start: int
    end: int
    line: int

    def __str__(self) -> str:
        return f"{self.kind} at line {self.line}"


@dataclass(frozen=True, slots=True)
class _Hit:
    kind: str
    start: int
    end: int
    replacement: str


# --- detectors -------------------------------------------------------------------------------

_I = re.IGNORECASE

# A line break inside a token or a PEM header that was hard-wrapped (a terminal, an e-mail, a
# ledger entry wrapped at 80 columns), also a JSON string's ``\\n``, with the next line's
# indentation and quote markers (``> ``).
_LINE_BREAK = r"(?:\r?\n|\\r\\n|\\n)[ \t]*(?:>[ \t]*)*"
_PEM_BREAK = r"(?:[ \t]*" + _LINE_BREAK + ")"


def _wrappable(literal: str) -> str:
    """A pattern for ``literal`` that may be broken across lines at any character."""
    return (_PEM_BREAK + "?").join(re.escape(c) for c in literal)


def _pem_line(word: str) -> str:
    """``-----BEGIN … PRIVATE KEY-----`` (``word`` BEGIN or END), also wrapped: between its
    words, or inside the dashes, BEGIN/END, PRIVATE, KEY or BLOCK."""
    sep = r"(?: |" + _PEM_BREAK + ")"
    name = r"[A-Z0-9]+"  # not broken inside, or "A\nB" reads two ways (and work explodes)
    return (_wrappable("-----" + word) + sep + "(?:" + name + sep + ")*"
            + _wrappable("PRIVATE") + sep + _wrappable("KEY")
            + "(?:" + sep + _wrappable("BLOCK") + ")?" + _wrappable("-----"))


# Simple families: the whole match is the secret.
_SIMPLE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("github_token", re.compile(r"(?<![A-Za-z0-9_])(?:(?:gh[pousr]_[A-Za-z0-9]{20,255}"
                                r"|github_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])"
                                r"|gh[pousr]_[A-Za-z0-9]{36}(?=[_-]))")),  # ghp_…_old
    ("gitlab_token", re.compile(r"(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,}")),
    ("npm_token", re.compile(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36,}(?![A-Za-z0-9])")),
    ("huggingface_token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])")),
    ("stripe_key", re.compile(r"(?<![A-Za-z0-9_])[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("google_api_key", re.compile(r"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_-]{35}(?![A-Za-z0-9_-])")),
    ("aws_access_key_id", re.compile(
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[A-Z0-9]{16}"
        r"(?![A-Za-z0-9])")),
    ("slack_token", re.compile(r"(?<![A-Za-z0-9_-])(?:xox[abposr]-[A-Za-z0-9-]{10,}"
                               r"|xapp-\d-[A-Za-z0-9-]{10,})")),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/(?:services|workflows)/"
                                 r"[A-Za-z0-9_/-]{8,}")),
    ("jwt", re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
                       r"\.[A-Za-z0-9_-]*")),
    ("stripe_webhook_secret", re.compile(
        r"(?<![A-Za-z0-9_])whsec_[A-Za-z0-9+/=]{24,}(?![A-Za-z0-9+/=])")),
    ("sendgrid_key", re.compile(
        r"(?<![A-Za-z0-9_.-])SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{30,}(?![A-Za-z0-9_-])")),
    ("private_key", re.compile(
        _pem_line("BEGIN") + r"(?:.*?" + _pem_line("END")
        + r"|(?:[A-Za-z0-9+/=:,\- \t\r\n>]|\\[nr])*)", re.DOTALL)),
)

# The families whose format fixes a body's length after a fixed prefix: a token glued to a
# word and a token hard-wrapped across a line break are both told by that length (below).
_FIXED_LENGTH: tuple[tuple[str, str, str, str, str | None], ...] = (
    # kind, prefix, the whole body, the characters a body is made of, and the check of a
    # glued body (``_random``; "": none; None: not looked for glued)
    ("github_token", r"gh[pousr]_", r"[A-Za-z0-9]{36}", "A-Za-z0-9", "number"),
    ("github_token", r"github_pat_", r"[A-Za-z0-9]{22}_[A-Za-z0-9]{59}", "A-Za-z0-9_", ""),
    ("npm_token", r"npm_", r"[A-Za-z0-9]{36}", "A-Za-z0-9", "number"),
    ("huggingface_token", r"hf_", r"[A-Za-z0-9]{34}", "A-Za-z0-9", ""),
    ("google_api_key", r"AIza", r"[A-Za-z0-9_-]{35}", "A-Za-z0-9_-", ""),
    ("aws_access_key_id", r"AKIA|ASIA", r"[A-Z0-9]{16}", "A-Z0-9", None),
)


def _whole_token(prefix: str, body: str) -> str:
    """A fixed-length token, its body the group "body": it ends where its last part's
    characters end (``github_pat_…`` may be followed by ``_old``, an ``AIza`` key not)."""
    last = re.findall(r"\[[^\]]+\]", body)[-1]
    return f"(?:{prefix})(?P<body>{body})(?!{last})"


# The same families glued to a word by "_" or "-" (``TOKEN_ghp_…``, ``call_sk-proj-…``,
# ``key-glpat-…``; ``ghp_…_old`` is in the family's own pattern): only where the family's
# real format tells a glued token from a code identifier that holds the prefix. A fixed
# length where the format has one (``gh?_`` + 36 and ``npm_`` + 36 with a digit, ``hf_`` + 34,
# ``AIza`` + 35, ``github_pat_`` 22 + ``_`` + 59, SendGrid 22 and 43, Slack's digits first),
# else a random-looking body (``_random``). A bare ``sk-``, ``dsk-``, ``deepseek-``
# (``task-sk-…``) keeps the word-start rule. ``AKIA…`` ids need nothing here (their pattern
# only wants no letter or digit before), nor do ``npm_`` and ``hf_`` for a glue after.
_GLUED_FAMILIES: tuple[tuple[str, str, str], ...] = (
    # kind, pattern (its body group, if it has a check, named "body"), check of the body
    *((kind, _whole_token(prefix, body), check)
      for kind, prefix, body, _chars, check in _FIXED_LENGTH if check is not None),
    ("gitlab_token", r"glpat-(?P<body>[A-Za-z0-9_-]{20,})", "mixed"),
    ("stripe_key", r"[rsp]k_(?:live|test)_(?P<body>[A-Za-z0-9]{24,})(?![A-Za-z0-9])", "mixed"),
    ("slack_token", r"xox[bpas]-\d+-[A-Za-z0-9-]{8,}|xapp-\d-[A-Za-z0-9-]{10,}", ""),
    ("jwt", r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", ""),
    ("stripe_webhook_secret", r"whsec_(?P<body>[A-Za-z0-9+/=]{32,})(?![A-Za-z0-9+/=])", "digit"),
    ("sendgrid_key", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])", ""),
    ("api_key", r"sk-(?:proj|svcacct|admin|ant-[a-z]+[0-9]*)-"
                r"(?P<body>[^\s,;\"'`()\[\]{}<>]+)", "keyish"),
)
# One pattern for all (one scan of the text): family i is group g<i>, its body b<i>.
_GLUED = re.compile(r"(?<=[_-])(?:" + "|".join(
    f"(?P<g{i}>" + pattern.replace("(?P<body>", f"(?P<b{i}>") + ")"
    for i, (_kind, pattern, _check) in enumerate(_GLUED_FAMILIES)) + ")")
# A prefix glued at all (searched in the lowercased text: "_" and "-" are rare in prose, so
# this costs about a microsecond on a line and skips the scan)
_GLUED_GATE_TEXT = (r"[_-](?:gh[pousr]_|github_pat_|glpat-|npm_|hf_|[rsp]k_(?:live|test)_"
                    r"|aiza|xox[bpas]-|xapp-|eyj|whsec_|sg\.|sk-)")
_GLUED_GATE = re.compile(_GLUED_GATE_TEXT)
_GLUED_GATE_BYTES = re.compile(_GLUED_GATE_TEXT.encode())


def _random(body: str, check: str, fold: bool) -> bool:
    """Does a glued token's body look random (``check``: "mixed": both cases, or a digit
    when the text may be case-folded; "digit": a digit or both cases; "number": a digit, as
    36 random base-62 characters all but always hold and a 36-letter camelCase name does not;
    "keyish": ``_keyish``)?"""
    if check == "keyish":
        return _keyish(body)
    if check == "number":
        return any(c.isdigit() for c in body)
    mixed = any(c.isupper() for c in body) and any(c.islower() for c in body)
    return mixed or ((fold or check == "digit") and any(c.isdigit() for c in body))


# A token of a fixed-prefix family with a known body length, hard-wrapped: the head ends at a
# line break short of the family's length and the next line (after its indentation or quote
# marker) starts with the body characters that complete it. Each half alone escapes the
# family's pattern; together they are redacted, both parts, and the line break stays. A
# complete token takes nothing from the next line.
_WRAPPED_FAMILIES = tuple(row[:4] for row in _FIXED_LENGTH)  # kind, prefix, body, characters
_WRAPPED = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    + "|".join(f"(?:{prefix})(?P<h{i}>[{chars}]*)"
               for i, (_kind, prefix, _body, chars) in enumerate(_WRAPPED_FAMILIES))
    + r")(?P<brk>" + _LINE_BREAK + r")(?P<tail>[A-Za-z0-9_-]+)")
# per family: (the whole body, its characters from the start of the next line), as written
# and case-folded
_WRAPPED_BODIES = tuple((re.compile(body), re.compile(f"[{chars}]*"))
                        for _k, _p, body, chars in _WRAPPED_FAMILIES)


def _wrapped_hits(text: str, fold: bool) -> Iterator[_Hit]:
    bodies = tuple((_folded(w), _folded(c)) for w, c in _WRAPPED_BODIES) if fold \
        else _WRAPPED_BODIES
    for m in (_folded(_WRAPPED) if fold else _WRAPPED).finditer(text):
        i = next(i for i in range(len(_WRAPPED_FAMILIES)) if m.group(f"h{i}") is not None)
        whole, chars = bodies[i]
        head = m.group(f"h{i}")
        run = chars.match(m.group("tail"))  # "_old" glued after is no body
        tail = run.group() if run else ""
        if tail and whole.fullmatch(head + tail):  # so the head is short of the whole
            yield _Hit(_WRAPPED_FAMILIES[i][0], m.start(), m.start("tail") + len(tail),
                       MARKER + m.group("brk") + MARKER)


# CodeSmith's prefixes. The span runs to whitespace , ; (CodeSmith) or a quote/bracket (ours).
_PREFIX = re.compile(r"(?<![A-Za-z0-9_-])(?P<prefix>sk-|dsk-|deepseek-)"
                     r"(?P<body>[^\s,;\"'`()\[\]{}<>]+)", _I)
_BEARER = re.compile(r"(?<![A-Za-z0-9_-])bearer[ \t]+(?P<body>[^\s,;\"'`()\[\]{}<>]+)", _I)

# The password may itself hold "@": the credentials run to the last "@" before the path.
_URL_CREDS = re.compile(r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)"
                        r"(?P<creds>[^\s/?#@:\"'<>\[\]]*:[^\s/?#\"'<>\[\]]+)@")

# The same, cut before its "@" by something upstream (a DuckDB error message shows 50
# characters of its input), with an ellipsis at the cut: "postgres://user:pass…". Without
# the "@" a host's port reads the same way: a port ("host:8080…", "host:8080)…",
# "db:5432;user=x…"), a placeholder ("${PORT}", "<port>") or a lowercase word ("host:port…")
# is taken for no password (_CUT_NOT_PASSWORD).
_URL_CREDS_CUT = re.compile(r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)"
                            r"(?P<creds>[^\s/?#@:\"'<>\[\]]*:(?P<pw>[^\s/?#@\"'<>\[\]]+?))"
                            r"(?=…|\.\.\.)")

_CUT_NOT_PASSWORD = re.compile(r"\d{1,5}(?:[^A-Za-z0-9].*)?|[$%{<(\[].*|[a-z]+", re.DOTALL)

_AUTH_HEADER = re.compile(r"authorization[\"'*]*[ \t]*[:=][ \t]*[\"']?"
                          r"(?P<scheme>(?:basic|token|digest)[ \t]+)?"
                          r"(?P<value>[A-Za-z0-9._~+/=-]{8,})", _I)

_KEYWORDS = (r"password|passwd|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key"
             r"|secret[_-]?key|private[_-]?key|account[_-]?key|credentials?")
_ASSIGN = re.compile(
    r"(?:" + _KEYWORDS + r")[\"'*]*[ \t]*(?:=>|:=|[:=])(?![=:])[ \t]*"
    r"(?:\"(?P<dq>(?:[^\"\\\n]|\\.)*)\""
    r"|\\\"(?P<eq>.*?)\\\""
    r"|'(?P<sq>[^'\n]*)'"
    r"|(?P<bare>[^\s,;&\"'`<>()\[\]{}]+))", _I)

_NOT_SECRET_VALUES = frozenset({
    "null", "none", "nil", "true", "false", "undefined", "str", "string", "bytes", "int",
    "bool", "secretstr", "optional", "any", "object", "required", "optional[str]", "redacted",
    "str|none", "string?", "char*", "&str", "text",
})


def _tokenish(body: str, min_len: int, long_len: int) -> bool:
    if len(body) < min_len:
        return False
    if any(c.isdigit() for c in body):
        return True
    return len(body) >= long_len


def _keyish(body: str) -> bool:
    """One ``-``/``_``/``.``-separated part of 16+ characters with a digit or mixed case."""
    for part in re.split(r"[-_.]", body):
        if len(part) >= 16 and (any(c.isdigit() for c in part)
                                or (any(c.islower() for c in part)
                                    and any(c.isupper() for c in part))):
            return True
    return False


_LINE_START = re.compile(r"(?:^|\n)[ \t]*(?:-[ \t]+|export[ \t]+)?[\"']?[\w.-]*$")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def _starts_line(text: str, keyword_start: int) -> bool:
    """Does the key holding this keyword start its line (YAML, env file, ``export X=``)?"""
    return _LINE_START.search(text, max(0, keyword_start - 200), keyword_start) is not None


def _is_marker(value: str) -> bool:
    """Starts with ``[REDACTED]`` (in any case: the final scan reads a case-folded copy)."""
    return value[:len(MARKER)].upper() == MARKER


# Markers, as written or as Markdown escapes them (``\\[REDACTED\\]``: the handoff escapes
# each redacted value, then scans the whole report again), one after another.
_MARKER_RUN = re.compile(r"\\*\[REDACTED\\*\](?:[ \t]*\\*\[REDACTED\\*\])*", _I)
# What a bare value is made of (as in _ASSIGN and _CONTEXTUAL): the text glued to a marker.
_GLUED_REST = re.compile(r"[^\s,;&\"'`|<>()\[\]{}]*")


def _unredacted(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The part of the value ``text[start:end]`` not redacted yet: all of it, unless it starts
    with markers (escaped or not); then what follows them (a quoted value's or a line's
    rest; for a bare value, which stops at ``[``, the text glued to the last marker), or None
    when nothing does. A marker in front of a secret never hides the secret."""
    m = _MARKER_RUN.match(text, start)
    if m is None:
        return start, end
    after = m.end()
    if after >= end:  # a bare value: it ended inside the markers
        end = _GLUED_REST.match(text, after).end()  # type: ignore[union-attr]  # matches ""
    else:  # a quoted value or a line's rest: what follows the markers' spaces
        while after < end and text[after] in " \t":
            after += 1
    return (after, end) if after < end else None


def _value_is_secret(value: str) -> bool:
    v = value.strip()
    if not v or _is_marker(v) or v == "~":
        return False
    low = v.lower()
    first = re.split(r"[\s|\[]", low, maxsplit=1)[0].rstrip(",;")
    if low in _NOT_SECRET_VALUES or first in _NOT_SECRET_VALUES:  # password: str | None
        return False
    if _DOTTED_NAME.fullmatch(v):  # token = settings.api_token (code, not a value)
        return False
    if v[0] in "$%<{" or v.startswith(("os.", "process.env", "env.", "ENV[", "getenv")):
        return False
    if "(" in v:  # a function call: password = get_password()
        return False
    return not set(v) <= set("*x.X-_")  # ****, xxxx placeholders


# Secrets written without "=" or a known prefix: only the value is replaced. Each pattern
# names its value ``dq``/``sq``/``bq`` (quoted) or ``bare``; ``_value_is_secret`` then drops
# variable references and placeholders, and ``_PROSE_WORDS`` ordinary words after "is".
_VALUE = (r"(?:\"(?P<dq>[^\"\n]+)\"|'(?P<sq>[^'\n]+)'|`(?P<bq>[^`\n]+)`"
          r"|(?P<bare>[^\s\"'`,;|&<>()\[\]{}]+))")
_CONTEXTUAL: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    # aws configure set aws_secret_access_key wJalr… (the CLI takes the value after a space)
    ("aws_secret_cli", "aws_", re.compile(
        r"(?<![A-Za-z0-9_])aws_(?:secret_access_key|session_token)[\"']?[ \t]+" + _VALUE, _I)),
    # curl -u user:pw, curl --user 'user:pw' (the user name is kept)
    ("curl_user_password", "curl", re.compile(
        r"(?<![\w-])curl\b[^\n]{0,300}?[ \t](?:-u|--user)(?:[ \t]+|=|(?=[^\s-]))"
        r"[\"']?[^\s:\"']*:" + _VALUE, _I)),
    # .netrc: machine host login user password pw (on one line or several)
    ("netrc_password", "password", re.compile(
        r"(?<![\w-])(?:machine[ \t]+\S+|default)(?:\s+(?:login|account|port)\s+\S+)*"
        r"\s+password\s+" + _VALUE)),
    # mysql -p<pw> / mysqldump -p'pw' (-p with a space after it prompts: nothing to hide)
    ("mysql_password", "mysql", re.compile(
        r"(?<![\w-])mysql(?:dump|admin|import|show|check)?\b[^\n]{0,300}?[ \t]-p" + _VALUE)),
    # a command line's password or key flag, the value after a space (with "=" it is an
    # assignment): --password pw, --api-key k, --client-secret s (not --password-stdin)
    ("cli_flag_secret", "--", re.compile(
        r"(?<![\w-])--(?P<qual>(?:[a-z0-9]+-)*)(?P<kw>password|passwd|passphrase|pass|secret"
        r"|token|api-?key|access-key|secret-key|private-key|credentials?)[ \t]+(?!-)" + _VALUE,
        _I)),
    # docker (podman, nerdctl) login -p pw, sshpass -p pw, redis-cli -a pw
    ("cli_login_password", "login", re.compile(
        r"(?<![\w-])(?:docker|podman|nerdctl)[ \t]+login\b[^\n]{0,300}?[ \t]-p[ \t]+(?!-)"
        + _VALUE, _I)),
    ("cli_sshpass_password", "sshpass", re.compile(
        r"(?<![\w-])sshpass[ \t]+-p[ \t]*(?!-)" + _VALUE, _I)),
    ("cli_redis_password", "redis-cli", re.compile(
        r"(?<![\w-])redis-cli\b[^\n]{0,300}?[ \t]-a[ \t]+(?!-)" + _VALUE, _I)),
    # prose: "the password is hunter2", "password for the db was 'x'"
    ("password_in_prose", "pass", re.compile(
        r"(?<![\w-])(?:password|passphrase|passwd|passcode)"
        r"(?:[ \t]+(?:for|of|on|to)(?:[ \t]+[\w.@:/-]+){1,4}?)?[ \t]+(?:is|was|remains)[ \t]+"
        r"(?:now[ \t]+|still[ \t]+|just[ \t]+)?"
        + _VALUE, _I)),
)

# Words that follow "the password is" in ordinary prose (not a password).
_PROSE_TEXT = """
a an the this that it its not no never now still only just also always usually wrong
incorrect invalid correct valid required mandatory optional missing empty blank unset set
stored saved kept hashed salted encrypted expired changed reset rotated too very case
case-sensitive known unknown available needed sent shown printed logged visible hidden
displayed generated random provided given managed handled entered accepted rejected checked
verified used same different weak strong long short secure insecure fine ok okay in on at
from of for to by with without there here being been leaked compromised protected asked
prompted requested read taken ignored enforced same-as at-least longer shorter
"""
_PROSE_WORDS = frozenset(_PROSE_TEXT.split())


def _prose_value_is_secret(value: str) -> bool:
    v = value.rstrip(".,;:!?")
    low = v.lower()
    if low in _PROSE_WORDS or low.startswith(MARKER.lower()):
        return False
    # a lowercase English participle or adverb ("hashed", "securely", "expiring")
    return not (v.isalpha() and v.islower() and low.endswith(("ed", "ly", "ing")))


_METAVAR = re.compile(r"[A-Z][A-Z_]*")  # a help text's placeholder: --token TOKEN
_FLAG_PLACEHOLDERS = frozenset({  # ... also as the case-folded copy reads it
    "token", "password", "passwd", "pass", "passphrase", "secret", "key", "api_key", "apikey",
    "api-key", "access_key", "secret_key", "private_key", "credential", "credentials", "value",
    "pw", "pwd"})


def _contextual_hits(text: str, has: Callable[[str], bool]) -> Iterator[_Hit]:
    """``has``: whether the lowercased text holds a literal (:func:`_gate_tests`)."""
    for kind, gate, pattern in _CONTEXTUAL:
        if not has(gate):
            continue
        if kind in _ALSO_NEEDED and not any(map(has, _ALSO_NEEDED[kind])):
            continue
        for m in pattern.finditer(text):
            group = next(g for g in ("dq", "sq", "bq", "bare") if m.group(g) is not None)
            part = _unredacted(text, m.start(group), m.end(group))
            if part is None:
                continue
            start, end = part
            value = text[start:end]
            if group == "bare":
                trimmed = value.rstrip(".,;:!?")
                end -= len(value) - len(trimmed)
                value = trimmed
            if not _value_is_secret(value):
                continue
            if kind.startswith("cli_") and (_METAVAR.fullmatch(value)  # --token TOKEN (help)
                                            or value.lower() in _FLAG_PLACEHOLDERS):
                continue
            if kind == "cli_flag_secret" and value.isalpha() \
                    and (value.islower() or value.istitle() or value.isupper()):
                continue  # a word of prose about the flag: "the --token flag", "--password is"
            if kind == "cli_flag_secret" and m.group("qual") and value.isdigit() \
                    and len(value) <= 5 and m.group("kw").lower() in ("token", "pass"):
                continue  # a count named after one: --max-token 4096, --second-pass 2
            if kind == "password_in_prose" and group == "bare" \
                    and not _prose_value_is_secret(value):
                continue
            yield _Hit(kind, start, end, MARKER)


# Literal text each detector needs (lowercased): a detector whose text is absent cannot match,
# so it is skipped (most values hold none of these; redaction of a short title stays cheap).
# Each is a literal every match of the detector holds, case aside: "gh" alone (for
# ``gh[pousr]_``) let "high" and "through" run the GitHub pattern over a whole document.
_GITHUB_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
_SIMPLE_GATES: dict[str, tuple[str, ...]] = {
    "github_token": (*_GITHUB_PREFIXES, "github_pat_"), "gitlab_token": ("glpat-",),
    "npm_token": ("npm_",), "huggingface_token": ("hf_",), "stripe_key": ("k_live_", "k_test_"),
    "google_api_key": ("aiza",),
    "aws_access_key_id": ("akia", "asia", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "abia",
                          "acca"),
    "slack_token": ("xox", "xapp-"),
    "slack_webhook": ("hooks.slack.com",), "jwt": ("eyj",), "stripe_webhook_secret": ("whsec_",),
    "sendgrid_key": ("sg.",), "private_key": ("-----begin", "private"),
}
_ASSIGN_GATES = ("pass", "secret", "token", "key", "credential")
# A second literal some contextual detectors need besides their gate: a command line's flag
# (``--``) is one only with a secret's word in it (``--password``, ``--api-key``).
_ALSO_NEEDED: dict[str, tuple[str, ...]] = {"cli_flag_secret": _ASSIGN_GATES}
# Every literal of a simple family's gates, and whether a (short) text holds any: one search
# instead of one test a literal.
_SIMPLE_ANY = tuple(dict.fromkeys(g for gates in _SIMPLE_GATES.values() for g in gates))
_ANY_SIMPLE_GATE = re.compile("|".join(map(re.escape, _SIMPLE_ANY)))
# The literals of the glued and wrapped gates: one of them is in every match of their
# patterns (the wrapped gate is no more than them).
_GLUED_LITERALS = (*_GITHUB_PREFIXES, "github_pat_", "glpat-", "npm_", "hf_", "k_live_",
                   "k_test_", "aiza", "xox", "xapp-", "eyj", "whsec_", "sg.", "sk-")
_WRAPPED_GATES = (*_GITHUB_PREFIXES, "github_pat_", "npm_", "hf_", "aiza", "akia", "asia")


def _gate_tests(text: str) -> tuple[Callable[[str], bool], Callable[[str], bool],
                                    Callable[[], bool], Callable[[], bool]]:
    """How the detectors' gates are looked for in ``text``: (whether its lowercased form holds
    a literal, whether the text itself holds one, whether the glued gate matches, whether any
    simple family's gate is there).

    A short text (a title, a cell) is searched as it is. A long one (a whole export) is
    searched as UTF-8 bytes, each literal once: bytes are scanned at a byte a character, a
    str holding any non-ASCII character at two or four, and the gates of a 10 MB export took
    0.4 s. The same answers: outside ASCII only the dotted capital I and the Kelvin sign
    lowercase into ASCII, and with either in the text the bytes are those of Python's own
    lowering."""
    if len(text) <= _SHORT:
        low = text.lower()
        return (low.__contains__, text.__contains__,
                lambda: _GLUED_GATE.search(low) is not None,
                lambda: _ANY_SIMPLE_GATE.search(low) is not None)
    raw = text.encode("utf-8", "surrogatepass")
    lowered = raw.lower() if raw.isascii() or ("\u0130" not in text and "\u212a" not in text) \
        else text.lower().encode("utf-8", "surrogatepass")
    seen: dict[str, bool] = {}

    def has(literal: str) -> bool:
        found = seen.get(literal)
        if found is None:
            found = seen[literal] = literal.encode() in lowered
        return found

    return (has, lambda literal: literal.encode("utf-8", "surrogatepass") in raw,
            lambda: any(map(has, _GLUED_LITERALS))
            and _GLUED_GATE_BYTES.search(lowered) is not None,
            lambda: any(map(has, _SIMPLE_ANY)))


_SHORT = 4096


# The simple families with the case of their prefix ignored: for scanning a case-folded copy
# (a slug or a URL path lowercases a key id or token; it must still be found).
# AWS ids folded: only the key prefixes (AKIA, ASIA), not ACCA/ABIA, which a hex digest can
# start with.
_AWS_KEY = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")


@functools.cache
def _folded(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """``pattern`` ignoring case, compiled when a case-folded text first needs it: most
    commands never scan one, and compiling them all at import took about half of the
    module's import time (every command that redacts pays it)."""
    return re.compile(pattern.pattern, pattern.flags | _I)


@functools.cache
def _simple_folded() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((kind, _folded(_AWS_KEY if kind == "aws_access_key_id" else p))
                 for kind, p in _SIMPLE)


# A token of a fixed-prefix family that something upstream already cut, marked with an
# ellipsis (a DuckDB error message shows 50 characters of its input; agents' tools cut long
# lines): too short for its family's pattern, but a recognisable prefix of a real token. The
# part before the ellipsis (4+ characters after the prefix, with a digit or mixed case, or
# capitals and digits after AKIA/ASIA, and a digit among them if lowercased, so "the ghp_...
# prefix", "sk-learn..." and a folded "akiapolaau..." stay) is replaced.
_CUT_PREFIXES = (r"gh[pousr]_|github_pat_|glpat-|npm_|hf_|[rsp]k_(?:live|test)_|AIza|AKIA|ASIA"
                 r"|xox[abposr]-|xapp-|eyJ|whsec_|SG\.|d?sk-")
_CUT_TOKEN = re.compile(r"(?<![A-Za-z0-9_])(?:" + _CUT_PREFIXES + r")"
                        r"(?P<body>[A-Za-z0-9_\-.+/=]{4,}?)(?=…|\.\.\.)")
# Literals one of which (lowercased) each cut token starts with; a text with an ellipsis but
# none of these (a table of titles cut to fit) has no cut token.
_CUT_GATES = (*_GLUED_LITERALS, "akia", "asia")  # the glued prefixes, and the key ids


def _cut_hits(text: str, fold: bool) -> Iterator[_Hit]:
    for m in (_folded(_CUT_TOKEN) if fold else _CUT_TOKEN).finditer(text):
        body = m.group("body")
        if m.group().upper().startswith(("AKIA", "ASIA")):  # a key id: capitals and digits
            # case-folded, a word that starts "akia"/"asia" (a bird, a village) reads as one:
            # lowercase, the cut key id needs a digit, as a key id has and such a word has not
            keyish = body.isalnum() and (body.isupper() or body.isdigit()
                                         or (fold and any(c.isdigit() for c in body)))
        else:
            keyish = any(c.isdigit() for c in body) or body.lower() != body != body.upper()
        if keyish:
            yield _Hit("cut_token", m.start(), m.end(), MARKER)


def _detect(text: str, home: str | None, fold: bool = False) -> Iterator[_Hit]:
    has, has_raw, glued, simple = _gate_tests(text)
    if simple():
        for kind, pattern in _simple_folded() if fold else _SIMPLE:
            if any(map(has, _SIMPLE_GATES[kind])):
                for m in pattern.finditer(text):
                    yield _Hit(kind, m.start(), m.end(), MARKER)
    if (has_raw("_") or has_raw("-")) and glued():
        yield from _glued_hits(text, fold)
    if (has_raw("\n") or has_raw("\\n")) and any(map(has, _WRAPPED_GATES)):
        yield from _wrapped_hits(text, fold)
    if has("sk-") or has("deepseek-"):
        for m in _PREFIX.finditer(text):
            if _keyish(m.group("body")):
                yield _Hit("api_key", m.start(), m.end(), MARKER)
    if has("bearer"):
        for m in _BEARER.finditer(text):
            if _tokenish(m.group("body"), 8, 20) and not _is_marker(m.group("body")):
                yield _Hit("bearer_token", m.start(), m.end(), MARKER)
    if has_raw("://"):
        for m in _URL_CREDS.finditer(text):
            if not _is_marker(m.group("creds")):
                yield _Hit("url_credentials", m.start("creds"), m.end("creds"), MARKER)
        if has_raw("…") or has_raw("..."):
            for m in _URL_CREDS_CUT.finditer(text):
                if not _CUT_NOT_PASSWORD.fullmatch(m.group("pw")) \
                        and not _is_marker(m.group("creds")):
                    yield _Hit("url_credentials", m.start("creds"), m.end("creds"), MARKER)
    if has("authorization"):
        for m in _AUTH_HEADER.finditer(text):
            value = m.group("value")
            if m.group("scheme") or _tokenish(value, 8, 20):
                yield _Hit("authorization_header", m.start("value"), m.end("value"), MARKER)
    if any(map(has, _ASSIGN_GATES)):
        yield from _assignment_hits(text)
    yield from _contextual_hits(text, has)
    if (has_raw("…") or has_raw("...")) and any(map(has, _CUT_GATES)):
        yield from _cut_hits(text, fold)
    yield from _home_hits(text, home, has_raw)


def _glued_hits(text: str, fold: bool) -> Iterator[_Hit]:
    for m in (_folded(_GLUED) if fold else _GLUED).finditer(text):
        i = int((m.lastgroup or "g0")[1:])
        kind, _pattern, check = _GLUED_FAMILIES[i]
        if not check or _random(m.group(f"b{i}"), check, fold):
            yield _Hit(kind, m.start(), m.end(), MARKER)


def _assignment_hits(text: str) -> Iterator[_Hit]:
    for m in _ASSIGN.finditer(text):
        group = next(g for g in ("dq", "eq", "sq", "bare") if m.group(g) is not None)
        start, end = m.start(group), m.end(group)
        if group == "bare" and _starts_line(text, m.start()):
            # YAML / env-file style ("password: correct horse battery"): the value is the
            # rest of the line, so a value with spaces is not half redacted.
            eol = text.find("\n", end)
            end = len(text) if eol < 0 else eol
            while end > start and text[end - 1] in " \t\r":
                end -= 1
        part = _unredacted(text, start, end)
        if part is not None and _value_is_secret(text[part[0]:part[1]]):
            yield _Hit("secret_assignment", part[0], part[1], MARKER)


def _home_hits(text: str, home: str | None, has_raw: Callable[[str], bool]) -> Iterator[_Hit]:
    if home is None:  # what expanduser("~") gives, without its steps when HOME is set
        home = os.environ.get("HOME") or os.path.expanduser("~")
    home = home.rstrip("/\\")
    if home and home not in ("~", "/") and len(home) > 1 and has_raw(home):
        pattern = _home_pattern(home)
        for m in pattern.finditer(text):
            yield _Hit("home_path", m.start(), m.end(), "~")
    if has_raw("/home/") or has_raw("/Users/"):
        for m in _OTHER_HOME.finditer(text):
            yield _Hit("home_path", m.start(), m.end(), "~")
    if has_raw(":\\Users\\"):
        for m in _WINDOWS_HOME.finditer(text):
            yield _Hit("home_path", m.start(), m.end(), "~")


# Not inside a name (``/srv/home/app``), but after a ``/``: a file URI's path
# (``file:///home/<user>/…``) and a path glued to another (``patterns//home/<user>/…``, an
# entry key made of a file and a title) name the user as the bare path does.
_OTHER_HOME = re.compile(r"(?<![\w.~-])/(?:home|Users)/[A-Za-z0-9._-]+(?=/)")
_WINDOWS_HOME = re.compile(r"(?<![\w.~-])[A-Za-z]:\\Users\\[A-Za-z0-9._ -]+?(?=\\)")


@functools.lru_cache(maxsize=16)
def _home_pattern(home: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.~-])" + re.escape(home) + r"(?=[/\\]|$|[^\w.-])")


def _merge(hits: list[_Hit]) -> list[_Hit]:
    """Sort and merge overlapping hits; a merge that involves a secret becomes ``[REDACTED]``."""
    hits.sort(key=lambda h: (h.start, -h.end))
    out: list[_Hit] = []
    for hit in hits:
        if out and hit.start < out[-1].end:
            prev = out[-1]
            if hit.end <= prev.end and prev.kind != "home_path":
                continue
            kind = prev.kind if prev.kind != "home_path" else hit.kind
            if kind == "home_path" and hit.kind == "home_path":
                # two home rules on one path (real home is also /home/<user>): keep the longer
                out[-1] = prev if prev.end >= hit.end else hit
                continue
            out[-1] = _Hit(kind, prev.start, max(prev.end, hit.end), MARKER)
        else:
            out.append(hit)
    return out


# How a Markdown or HTML viewer or a URL decoder spells a character: a character reference
# as ``html.unescape`` reads it (``&#95;``, ``&#x5f;``, ``&lowbar;``, ``&amp`` without ``;``),
# a CommonMark backslash escape of ASCII punctuation (``\_``), a string literal's escape as
# JSON, JavaScript or Python reads it (``\u005f``, ``\x5f``, ``\U0000005f``), or one character
# percent-encoded as UTF-8 (``%5F``, ``%C3%A9``), as ``urllib.parse.unquote`` reads it.
_PERCENT_CHAR = (r"%[0-7][0-9a-fA-F]|%[cdCD][0-9a-fA-F]%[89abAB][0-9a-fA-F]"
                 r"|%[eE][0-9a-fA-F](?:%[89abAB][0-9a-fA-F]){2}"
                 r"|%[fF][0-7](?:%[89abAB][0-9a-fA-F]){3}")
# Characters a viewer does not show (Unicode's format characters that draw nothing: soft
# hyphen, zero-width space and joiners, word joiner, bidi marks, the BOM, tag characters):
# read as nothing, so a secret pasted with one inside is read whole.
_INVISIBLE_CHARS = ("\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
                    "\ufeff\U000e0001\U000e0020-\U000e007f")
# Fullwidth forms of ASCII (U+FF01-U+FF5E, ``ghp_…`` as an IME or CJK text may write it):
# the same characters in another spelling (NFKC, a search engine or a terminal's copy turns
# them back), read as their ASCII character, one for one, so a span maps back exactly.
_FULLWIDTH_CHARS = "\uff01-\uff5e"
_FULLWIDTH_OFFSET = 0xFEE0  # U+FF47 (fullwidth g) - "g"
# Is there a character read otherwise than written that can be part of a secret (plain ASCII
# text has none)? An invisible one, a fullwidth letter or digit, or a fullwidth mark next to
# ASCII (``password`` U+FF1D ``…``); fullwidth punctuation inside CJK text (U+FF08 原因 …) decodes
# to nothing a detector reads, and is not read twice.
_UNICODE_SPELLED = re.compile(
    f"[{_INVISIBLE_CHARS}\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]"
    f"|[!-~][ \t]*[{_FULLWIDTH_CHARS}]|[{_FULLWIDTH_CHARS}][ \t]*[!-~]")
# Each match of _UNICODE_SPELLED holds one of these: a text with none (most non-ASCII text:
# accents, dashes, an ellipsis) is passed by one quick search, not a try at every character.
_SPELLED_CHARACTER = re.compile(f"[{_INVISIBLE_CHARS}{_FULLWIDTH_CHARS}]")


def _utf8_alternatives(chars: str) -> re.Pattern[bytes]:
    """The characters of ``chars`` (a character class's inside: characters and ``a-b``
    ranges, none ASCII) as a pattern over UTF-8 bytes: each character's bytes, grouped by
    all but their last byte."""
    codes: list[int] = []
    i = 0
    while i < len(chars):
        if i + 2 < len(chars) and chars[i + 1] == "-":
            codes += range(ord(chars[i]), ord(chars[i + 2]) + 1)
            i += 3
        else:
            codes.append(ord(chars[i]))
            i += 1
    by_lead: dict[bytes, list[int]] = {}
    for code in codes:
        encoded = chr(code).encode()
        by_lead.setdefault(encoded[:-1], []).append(encoded[-1])
    return re.compile(b"|".join(re.escape(lead) + b"[" + b"".join(
        re.escape(bytes([last])) for last in lasts) + b"]" for lead, lasts in by_lead.items()))


# The same, over a long text's UTF-8 bytes: a 10 MB export's characters were searched at two
# bytes each; its bytes are passed over where no lead byte of these is (most of them).
_SPELLED_CHARACTER_BYTES = _utf8_alternatives(_INVISIBLE_CHARS + _FULLWIDTH_CHARS)


def _spelled_characters(text: str) -> bool:
    """Does ``text`` (not ASCII) hold a character of :data:`_SPELLED_CHARACTER`?"""
    if len(text) <= _SHORT:
        return _SPELLED_CHARACTER.search(text) is not None
    return _SPELLED_CHARACTER_BYTES.search(text.encode("utf-8", "surrogatepass")) is not None
_SPELLED = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[A-Za-z][A-Za-z0-9]{0,31};?)"
                      r"|\\(?:[!-/:-@\[-`{-~]|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|U[0-9a-fA-F]{8})|"
                      + _PERCENT_CHAR + f"|[{_INVISIBLE_CHARS}{_FULLWIDTH_CHARS}]")
# Is there a percent-escape at all (plain text, and ``100%``, skip the decoded reading)?
_PERCENT = re.compile(r"%[0-9a-fA-F]{2}")
# Layers decoded: one for Markdown/HTML/URLs, one more for such text inside a JSON string
# (``ghp\\_…``), spelled twice (``&amp;#95;``, ``%255F``) or mixed (``&#37;5F``, ``%26%2395;``).
_DECODE_LAYERS = 2


class _Decoded:
    """A text with its references and escapes decoded (``text``), and where in the text it
    was decoded from (``source``: the original, or another ``_Decoded``) each character
    came from. Memory is one entry per decoded reference, not per character."""

    __slots__ = ("_at", "_pieces", "_source", "text")

    def __init__(self, text: str, pieces: list[tuple[int, int, int, int]],
                 source: _Decoded | None) -> None:
        self.text = text
        self._pieces = pieces  # (start here, start in source, length here, length there)
        self._at = [p[0] for p in pieces]
        self._source = source

    def origin(self, i: int) -> tuple[int, int]:
        """The span of the original text that character ``i`` of ``text`` was decoded from."""
        k = bisect.bisect_right(self._at, i) - 1
        if k < 0:
            start, end = i, i + 1
        else:
            here, there, n_here, n_there = self._pieces[k]
            if i < here + n_here:  # inside a decoded reference: all of it
                start, end = there, there + n_there
            else:
                start = i - here - n_here + there + n_there
                end = start + 1
        if self._source is None:
            return start, end
        return self._source.origin(start)[0], self._source.origin(end - 1)[1]


def _decode(text: str, source: _Decoded | None) -> _Decoded | None:
    """``text`` with its references and escapes decoded; None if nothing decodes."""
    parts: list[str] = []
    pieces: list[tuple[int, int, int, int]] = []
    pos = here = 0
    for m in _SPELLED.finditer(text):
        piece = m.group()
        first = piece[0]
        if first == "%":
            out = unquote(piece)
            if "\ufffd" in out:  # bytes that are no UTF-8 (an overlong form): left as written
                continue
        elif first == "\\":
            out = piece[1] if len(piece) == 2 else _code_point(piece[2:])
        elif first == "&":
            out = html.unescape(piece)
        elif "\uff01" <= first <= "\uff5e":  # a fullwidth form: its ASCII character
            out = chr(ord(first) - _FULLWIDTH_OFFSET)
        else:  # an invisible character: a viewer shows nothing
            out = ""
        if out == piece:
            continue
        parts.append(text[pos:m.start()])
        here += m.start() - pos
        pieces.append((here, m.start(), len(out), len(piece)))
        parts.append(out)
        here += len(out)
        pos = m.end()
    if not pieces:
        return None
    parts.append(text[pos:])
    return _Decoded("".join(parts), pieces, source)


def _code_point(hex_digits: str) -> str:
    """The character a ``\\uXXXX``, ``\\xXX`` or ``\\UXXXXXXXX`` escape stands for (a
    JSON, JavaScript or Python string's); beyond Unicode: the replacement character."""
    n = int(hex_digits, 16)
    return chr(n) if n <= 0x10FFFF else "\ufffd"


def _layers(text: str) -> Iterator[_Decoded]:
    """``text`` decoded once, then twice (while anything decodes)."""
    layer: _Decoded | None = None
    for _ in range(_DECODE_LAYERS):
        layer = _decode(text if layer is None else layer.text, layer)
        if layer is None:
            return
        yield layer


def _decoded_hits(text: str, home: str | None, fold: bool) -> Iterator[_Hit]:
    """Secrets that show once ``text``'s references and escapes are decoded, each as the span
    of ``text`` that decodes to it (a viewer shows ``ghp&#95;…`` as the token)."""
    for layer in _layers(text):
        for h in _detect(layer.text, home, fold):
            if h.end > h.start:
                start, end = layer.origin(h.start)[0], layer.origin(h.end - 1)[1]
                # a wrapped token's replacement holds its line break as decoded (``&#10;``
                # read as one): the span as written becomes one marker
                marker = h.replacement if h.replacement in (MARKER, "~") else MARKER
                yield _Hit(h.kind, start, end, marker)


def _collect(text: str, home: str | None, fold: bool = False) -> list[_Hit]:
    hits = list(_detect(text, home, fold))
    if "&" in text or "\\" in text or ("%" in text and _PERCENT.search(text)) \
            or (not text.isascii() and _spelled_characters(text)
                and _UNICODE_SPELLED.search(text)):
        # plain text (most) costs nothing more
        hits += _decoded_hits(text, home, fold)
    return _merge(hits)


def find_secrets(text: str, *, home: str | None = None, fold: bool = False) -> list[Finding]:
    """Every secret (and home path) ``redact`` would replace, in text order.

    Used as the final scan before anything leaves the machine: an empty list means safe.
    ``fold``: also find the families whose prefix has a fixed case (``AKIA…``, ``ghp_…``)
    when they were lowercased, as in a slug; for scanning ``text.casefold()``.
    """
    hits = _collect(text, home, fold)
    return [Finding(h.kind, h.start, h.end, text.count("\n", 0, h.start) + 1) for h in hits]


def redact(text: str, *, home: str | None = None, fold: bool = False) -> str:
    """``text`` with every secret replaced by ``[REDACTED]`` and home paths folded to ``~``.

    ``fold``: also the families whose prefix has a fixed case when they were lowercased
    (``akiaiosfodnn7example``), for text a loader lowercased (categories, enums) and slugs."""
    return _redacted(text, home, fold, keep_lines=False)


def redact_each(texts: Sequence[str], *, home: str | None = None, fold: bool = False
                ) -> list[str]:
    """``[redact(t, home=home, fold=fold) for t in texts]``, with one scan for all of them:
    the texts are joined with blank lines between them and searched once, and only a text
    that a secret (or home path) found there touches is redacted on its own, as ``redact``
    would. Redacting 20,000 short values one call at a time cost 0.15 s, nearly all of it
    each call's fixed costs; the one scan is linear in their length. A secret found across
    two texts only makes both be redacted alone; every detector stops at a blank line or
    reads it as the end of its text (tests/test_redact.py checks the whole corpus both
    ways)."""
    if not texts:
        return []
    hits = _collect(_SEPARATOR.join(texts), home, fold)
    if not hits:
        return list(texts)
    ends = list(itertools.accumulate(len(t) + len(_SEPARATOR) for t in texts))
    touched: set[int] = set()
    for hit in hits:
        first = bisect.bisect_right(ends, hit.start)
        last = bisect.bisect_right(ends, max(hit.start, hit.end - 1))
        touched.update(range(first, min(last, len(texts) - 1) + 1))
    return [redact(t, home=home, fold=fold) if i in touched else t for i, t in enumerate(texts)]


_SEPARATOR = "\n\n"


def redact_keeping_lines(text: str, *, home: str | None = None, fold: bool = False) -> str:
    """:func:`redact`, line for line: a secret that spans lines (a PEM block, a wrapped
    token) becomes ``[REDACTED]`` on each of its lines, so line *n* of the result is line *n*
    of ``text`` redacted (a file's lines, as a diff of it numbers them)."""
    return _redacted(text, home, fold, keep_lines=True)


def _redacted(text: str, home: str | None, fold: bool, *, keep_lines: bool) -> str:
    # Redaction can expose a new match at a seam (rare); repeat until stable so that
    # redact(redact(x)) == redact(x). Two passes are enough in practice; three is the bound.
    for _ in range(3):
        hits = _collect(text, home, fold)
        if not hits:
            return text
        text = _apply(text, hits, keep_lines=keep_lines)
    return text


def _apply(text: str, hits: list[_Hit], *, keep_lines: bool = False) -> str:
    parts: list[str] = []
    pos = 0
    for h in hits:
        parts.append(text[pos:h.start])
        breaks = text.count("\n", h.start, h.end)
        if keep_lines and h.replacement.count("\n") != breaks:
            parts.append("\n".join(MARKER if piece.strip() else piece
                                   for piece in text[h.start:h.end].split("\n")))
        else:
            parts.append(h.replacement)
        pos = h.end
    parts.append(text[pos:])
    return "".join(parts)


def scan_variants(text: str) -> list[str]:
    """The copies of outgoing text a final scan looks at: as written, then with its
    percent-escapes, character references, backslash escapes, invisible characters and
    fullwidth forms decoded, once and twice (the decoding ``find_secrets`` reads, "Spelled
    secrets"). A caller case-folds each copy too, so a secret that became part of a link or
    was lowercased is still seen."""
    return [text] + [layer.text for layer in _layers(text)]


def find_secrets_anywhere(text: str, *, home: str | None = None) -> list[Finding]:
    """``find_secrets`` over every :func:`scan_variants` copy of ``text``, also case-folded;
    the findings of the first copy that has any (offsets are into that copy)."""
    for variant in scan_variants(text):
        found = find_secrets(variant, home=home)
        if not found:
            found = find_secrets(variant.casefold(), home=home, fold=True)
        if found:
            return found
    return []


def redactor(home: str | None = None, *, fold: bool = False) -> Callable[[str], str]:
    """A one-argument redact function with ``home`` bound (handy for templates and maps)."""
    return lambda text: redact(text, home=home, fold=fold)

"""Redaction (FAULTS.md F1): every true secret in the corpus is removed, no decoy is altered.

All secrets below are fakes made for this test (random-looking, the right shape); the AWS pair
is AWS's own documentation example.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from urllib.parse import quote, unquote

import pytest

from toolkit.redact import MARKER, Finding, find_secrets, redact, redact_each

HOME = "/home/tester"

GHP = "ghp_" + "R7kQ2mX9vL4pT8sW1nB6cY3hJ5dF0gA2eZ7u"
GHO = "gho_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GHS = "ghs_" + "Zq8Wm2Lp5Rt7Yx1Vb4Nc6Hd9Kf3Js0Ga8Eu"
GHU = "ghu_" + "9aB8cD7eF6gH5iJ4kL3mN2oP1qR0sT9uV8w"
GHR = "ghr_" + "1B4a2e77838347a7E420ce178F2E7c6912E1"
GH_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQ"
AKIA = "AKIAIOSFODNN7EXAMPLE"
ASIA = "ASIAY34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
XOXB = "xoxb-" + "2934857102-5829301847362-Qw8ErT5yUi9OpAs2DfGh7JkL"
XOXP = "xoxp-" + "1234567890-0987654321-1357924680-abcdef0123456789abcdef0123456789"
SLACK_HOOK = "https://hooks.slack.com/services/" + "T0A1B2C3D/B4E5F6G7H/q8R9s0T1u2V3w4X5y6Z7a8B9"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkphbmUifQ"
       ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
JWT2 = "eyJraWQiOiJhYmMiLCJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJhY21lIn0.c2lnbmF0dXJlLXBhcnQtMDAx"
SK_OPENAI = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
SK_ANTHROPIC = "sk-ant-api03-" + "Xy9Zw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa98765432"
SK_DEEPSEEK = "sk-" + "0f3c9a7e21b84d56a9e07c13f2b6d8e4"
PEM_RSA = ("-----BEGIN RSA PRIVATE KEY-----\n"
           "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
           "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
           "-----END RSA PRIVATE KEY-----")
PEM_OPENSSH = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
               "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
               "-----END OPENSSH PRIVATE KEY-----")
PEM_PKCS8 = ("-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
             "\\n-----END PRIVATE KEY-----")

# (text, the secret that must disappear). Each family several times, in several contexts.
SECRETS: list[tuple[str, str]] = [
    # GitHub
    (f"Push failed until I set GITHUB_TOKEN={GHP} in the shell.", GHP),
    (json.dumps({"auth": {"oauth": GHO}}), GHO),
    (f"git remote set-url origin https://x-access-token:{GHS}@github.com/acme/api.git", GHS),
    (f"token: {GHU}\n", GHU),
    (f"refresh with {GHR}, then retry", GHR),
    (f"export GH_PAT='{GH_PAT}'", GH_PAT),
    (f"Use {GH_PAT} for the API", GH_PAT),
    # AWS
    (f"aws_access_key_id = {AKIA}\n", AKIA),
    (f"The CI logs printed {ASIA} in step 3.", ASIA),
    (f"aws_secret_access_key = {AWS_SECRET}\n", AWS_SECRET),
    (f'{{"AccessKeyId": "{AKIA}", "SecretAccessKey": "{AWS_SECRET}"}}', AWS_SECRET),
    (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET),
    # Slack
    (f"SLACK_BOT_TOKEN={XOXB}", XOXB),
    (f"the bot posts with {XOXB}.", XOXB),
    (f'slack:\n  user_token: "{XOXP}"\n', XOXP),
    (f"alerts go to {SLACK_HOOK}", SLACK_HOOK.split("services/")[1]),
    # PEM private keys
    (f"deploy key:\n{PEM_RSA}\nend of key",
     "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"),
    (f"```\n{PEM_OPENSSH}\n```",
     "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"),
    (f'{{"private_key": "{PEM_PKCS8}"}}',
     "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"),
    ("-----BEGIN EC PRIVATE KEY-----\n"
     "MHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY/PuoAoGCCqGSM49\n"
     "(truncated in the log)", "MHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY"),
    # JWT
    (f"Cookie: session={JWT}; Path=/", JWT),
    (f"id_token was {JWT2}", JWT2),
    (json.dumps({"jwt": JWT}), JWT.split(".")[2]),
    # Credentials in URLs
    ("DATABASE_URL=postgres://admin:Sup3rS3cret!@db.internal:5432/app", "admin:Sup3rS3cret!"),
    ("clone https://jane:hunter2hunter2@git.example.com/acme/api.git", "jane:hunter2hunter2"),
    ('{"broker": "amqp://svc:pa55w0rd@mq.local/vhost"}', "svc:pa55w0rd"),
    # password / secret / api_key / token assignments
    ('password = "correct horse battery staple"', "correct horse battery staple"),
    ("db:\n  passwd: Tr0ub4dor&3\n", "Tr0ub4dor&3"),
    ("client_secret=9f8e7d6c5b4a39281706f5e4d3c2b1a0", "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    ('{"api_key": "live_4f9a8b7c6d5e4f3a2b1c"}', "live_4f9a8b7c6d5e4f3a2b1c"),
    ("X-Api-Key: 5d41402abc4b2a76b9719d911017c592", "5d41402abc4b2a76b9719d911017c592"),
    ("https://api.example.com/v1/items?access_token=abcDEF123456&page=2", "abcDEF123456"),
    ("The admin **Password**: Winter2026!", "Winter2026!"),
    ("MYSQL_PASSWORD='s3cr3t-pa55'", "s3cr3t-pa55"),
    ('"description": "run with password=\\"hunter22\\" on staging"', "hunter22"),
    ("Authorization: Basic YWRtaW46cGFzc3dvcmQxMjM=", "YWRtaW46cGFzc3dvcmQxMjM="),
    ("Authorization: 0123456789abcdefABCDEF", "0123456789abcdefABCDEF"),
    ("db:\n  password: correct horse battery staple\n  port: 5432", "horse battery staple"),
    ("export DB_PASSWORD=pa55 word with spaces", "word with spaces"),
    ("docker login https://deploy:p@ss:w0rd@registry.example.com/v2/", "p@ss:w0rd"),
    # sk- keys (CodeSmith's own rule) and Bearer tokens
    (f"OPENAI_API_KEY={SK_OPENAI}", SK_OPENAI),
    (f"the agent printed {SK_ANTHROPIC} in its reply", SK_ANTHROPIC),
    (f'{{"deepseek": {{"key": "{SK_DEEPSEEK}"}}}}', SK_DEEPSEEK),
    ("SK-" + "LIVE0123456789ABCDEFabcdef in capitals", "LIVE0123456789ABCDEFabcdef"),
    ("curl -H 'Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543' https://api",
     "8f14e45fceea167a5a36dedd4bea2543"),
    (f"bearer {JWT}", JWT),
    # other families
    ("NPM_TOKEN=npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
     "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("glpat-" + "x9Y8w7V6u5T4s3R2q1P0 for the mirror", "glpat-x9Y8w7V6u5T4s3R2q1P0"),
    ("AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q in maps.js",
     "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
    ("stripe: sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
]

# Home paths become ~ (not [REDACTED]).
HOME_PATHS: list[tuple[str, str]] = [
    (f"read {HOME}/.codesmith/secrets first", "read ~/.codesmith/secrets first"),
    (f"workspace {HOME}/projects/acme-api/src", "workspace ~/projects/acme-api/src"),
    (f'{{"cwd": "{HOME}"}}', '{"cwd": "~"}'),
    ("snapshot of /home/dev/projects/acme-api", "snapshot of ~/projects/acme-api"),
    ("opened /Users/jane.doe/Library/Logs/app.log", "opened ~/Library/Logs/app.log"),
    ("C:\\Users\\Jane\\AppData\\config.json", "~\\AppData\\config.json"),
    # a file URI (an editor's or a browser's link, pytest's report): the path after file://
    ("open file:///home/dev/projects/acme-api/x.py:3", "open file://~/projects/acme-api/x.py:3"),
    ("<file:///Users/jane.doe/notes.md>", "<file://~/notes.md>"),
    ("see FILE:///home/dev/app.log", "see FILE://~/app.log"),
    (f"file://{HOME}/a.txt", "file://~/a.txt"),
    # a path glued to another by "/": a history entry key is "<file>/<title>"
    ("patterns//home/dev/.aws/credentials is read first",
     "patterns/~/.aws/credentials is read first"),
]

DECOYS: list[str] = [
    "entry 4b7e2c91-0d3a-4f6e-9a51-7c2d8e13f0a4 was resolved",
    "id: e0a95d1f-6c24-4b88-b3e7-52f9a0c61d3e",
    "commit 3f2d1d33a761afeb15b07964436e4394c7333dd2 fixed it",
    "snapshot 466061a6b2f0c4d1e9a8b7c6d5e4f3a2b1c0d9e8 (post-turn:3)",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "The author of this module is the authority on tokenizer settings.",
    "Reset your password before the next login.",
    "password",
    "The password field is validated on the server.",
    "Install sk-learn (really scikit-learn) for the clustering step.",
    "We run deepseek-v4-pro and deepseek-coder for the reviews.",
    "task-12 and risk-assessment-2026 are tracked in the board",
    "Legacy token header still accepted alongside bearer auth",
    "Bearer tokens are checked in middleware/auth.rs",
    "crates/api/src/handlers/legacy_auth.rs:88",
    "/etc/ssl/certs/ca-certificates.crt",
    "/usr/local/bin/toolkit and /var/lib/home/data and /srv/home/app",
    "~/.codesmith/slop_ledger/slop_ledger.json",
    "https://github.com/example/acme-api/issues/412",
    "ssh://git@github.com/acme/api.git",
    "git@github.com:acme/api.git",
    "http://localhost:8080/status?page=2",
    "Mail jane.doe@example.com or ops@acme.dev",
    "max_tokens: 4096\ninput_tokens=512",
    "tokenizer: cl100k_base",
    "def login(password: str, token: str | None = None) -> None:",
    'password = os.environ["DB_PASSWORD"]',
    "DB_PASSWORD=${DB_PASSWORD}",
    '{"password": "", "token": null}',
    "api_key: <your-api-key>",
    "secret_santa: yes",
    "if password == expected:",
    "task_01HZX3K9Q2 / thr_7f3a2e",
    "The TokenRefresher retries 3 times.",
    "AKIA is the prefix of AWS access key ids.",
    "eyJ is how base64 JSON starts",
    "Use a Bearer token, see docs/auth.md",
    "Snapshot test fixtures reference removed config key `compact_threshold`",
    "the ghp_ prefix marks classic GitHub tokens",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----",
    "password: [REDACTED]",
    "Authorization: required for all endpoints",
    "token = settings.api_token",
    "    token: str | None = None",
    "db:\n  password: ${DB_PASSWORD}\n  user: app",
]


def test_corpus_sizes() -> None:
    assert len(SECRETS) >= 30
    assert len(DECOYS) >= 30


@pytest.mark.parametrize(("text", "secret"), SECRETS,
                         ids=[f"secret{i}" for i in range(len(SECRETS))])
def test_every_secret_is_redacted(text: str, secret: str) -> None:
    out = redact(text, home=HOME)
    assert secret not in out
    assert MARKER in out
    findings = find_secrets(text, home=HOME)
    assert findings, "the final scan must see the secret too"
    assert find_secrets(out, home=HOME) == []
    assert redact(out, home=HOME) == out


@pytest.mark.parametrize("text", DECOYS, ids=[f"decoy{i}" for i in range(len(DECOYS))])
def test_no_decoy_is_altered(text: str) -> None:
    assert redact(text, home=HOME) == text
    assert find_secrets(text, home=HOME) == []


@pytest.mark.parametrize(("text", "expected"), HOME_PATHS)
def test_home_paths_become_tilde(text: str, expected: str) -> None:
    assert redact(text, home=HOME) == expected
    assert find_secrets(redact(text, home=HOME), home=HOME) == []


def test_home_defaults_to_the_real_home(isolated_env) -> None:
    # conftest points HOME at a temp folder, which need not look like /home/<user>
    assert redact(f"{isolated_env}/.codesmith/secrets") == "~/.codesmith/secrets"
    assert redact(f"{isolated_env}-other/x") == f"{isolated_env}-other/x"


def test_context_around_a_secret_is_kept() -> None:
    assert redact('{"password": "hunter2", "user": "jane"}') == \
        '{"password": "[REDACTED]", "user": "jane"}'
    assert redact("postgres://admin:pw1@db:5432/app") == "postgres://[REDACTED]@db:5432/app"
    assert redact(f"key {SK_OPENAI}, then") == "key [REDACTED], then"
    assert redact(f"a\n{PEM_RSA}\nb") == "a\n[REDACTED]\nb"
    assert redact("Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543 done") == \
        "Authorization: [REDACTED] done"


def test_redacted_json_stays_json() -> None:
    doc = {"GITHUB_TOKEN": GHP, "password": "p@ss\"word", "url": "https://u:p4ss@h/x",
           "nested": {"jwt": JWT, "pem": PEM_PKCS8.replace("\\n", "\n")}}
    out = redact(json.dumps(doc, indent=2), home=HOME)
    parsed = json.loads(out)
    assert parsed["GITHUB_TOKEN"] == MARKER
    assert parsed["password"] == MARKER
    assert parsed["url"] == "https://[REDACTED]@h/x"
    assert parsed["nested"] == {"jwt": MARKER, "pem": MARKER}


def test_whole_corpus_in_one_document() -> None:
    """Secrets next to each other and next to decoys: all secrets gone, all decoys intact."""
    doc = "\n\n".join([t for t, _ in SECRETS] + DECOYS)
    out = redact(doc, home=HOME)
    for _, secret in SECRETS:
        assert secret not in out
    for decoy in DECOYS:
        assert decoy in out
    assert redact(out, home=HOME) == out
    assert find_secrets(out, home=HOME) == []



def _each_case() -> list[str]:
    """Every text of the corpus, and the ways it reaches a redactor: spelled (character
    references, percent-escapes, fullwidth, invisible characters), cut short with an
    ellipsis as a table cell cuts it, lowercased, on a line of prose, without its last
    character, and blank or a line break."""
    texts = [t for t, _ in SECRETS] + DECOYS + [t for t, _ in HOME_PATHS] \
        + [t for t, _ in H2_SECRETS] + H2_DECOYS
    out = list(texts)
    for t in texts:
        out += [html.escape(t).replace("_", "&#95;"), quote(t), t[: len(t) // 2] + "…",
                t[:20] + "...", t.lower(), f"see {t} here", t[:-1], t.replace("_", "\u200b_"),
                "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" and i % 3 == 0 else c
                        for i, c in enumerate(t))]
    return [*out, "", "\n", "\n\n", "password:", "hunter2", "curl -u", "admin:pw1@db"]


@pytest.mark.parametrize("fold", [False, True])
def test_redact_each_equals_redacting_each_alone(fold: bool) -> None:
    """``redact_each`` scans many texts at once (the slop export's titles): its answer is
    each text's own ``redact``, whatever stands beside it, in any order."""
    import random

    cases = _each_case()
    if fold:
        cases = [t.casefold() for t in cases]
    alone = [redact(t, home=HOME, fold=fold) for t in cases]
    assert sum(a != t for a, t in zip(alone, cases, strict=True)) > 100  # secrets among them
    assert redact_each(cases, home=HOME, fold=fold) == alone
    rng = random.Random(7)
    for _ in range(5):
        order = list(range(len(cases)))
        rng.shuffle(order)
        shuffled = [cases[i] for i in order]
        assert redact_each(shuffled, home=HOME, fold=fold) == [alone[i] for i in order]
    # a secret split across two neighbours is in neither alone: neither is changed more
    # than alone (each is redacted alone)
    halves = [GHP[:20], GHP[20:], "password", "is hunter2", "-----BEGIN RSA", "PRIVATE KEY-----"]
    assert redact_each(halves, home=HOME, fold=fold) == \
        [redact(t, home=HOME, fold=fold) for t in halves]
    assert redact_each([], home=HOME) == []



@pytest.mark.parametrize("filler", ["Plain notes about the build. ",
                                    "Notes — with dashes… and accents: café. ",
                                    "A dotted \u0130stanbul and a \u212aelvin sign. "])
def test_a_long_document_is_redacted_as_each_of_its_paragraphs(filler: str) -> None:
    """A long text (a whole export) has its gates looked for in its UTF-8 bytes, a short one
    as text: a paragraph is redacted the same in the middle of 10,000 characters of prose
    (ASCII, not ASCII, with the two capitals that lowercase into ASCII) as alone."""
    import random

    import toolkit.redact as redact_module

    pad = filler * (redact_module._SHORT // 2 // len(filler) + 1)
    cases = [t for t, _ in SECRETS] + random.Random(5).sample(_each_case(), 150) + [
        "TO\u212aEN=abcd1234efgh5678", 'api_\u212aey = "Zx9Qw8Er7Ty6"']  # a Kelvin sign
    for fold in (False, True):
        for text in cases:
            text = text.casefold() if fold else text
            whole = f"{pad}\n\n{text}\n\n{pad}"
            assert len(whole) > redact_module._SHORT
            assert redact(whole, home=HOME, fold=fold) == \
                f"{pad}\n\n{redact(text, home=HOME, fold=fold)}\n\n{pad}", text


def test_spelled_characters_are_found_in_bytes_as_in_text() -> None:
    """The long-text search for invisible and fullwidth characters (over UTF-8 bytes) finds
    exactly the characters the text search does."""
    import random

    import toolkit.redact as redact_module

    rng = random.Random(3)
    codes = [c for c in range(0x80, 0x3000)] + [c for c in range(0xFE00, 0x10000)] \
        + [c for c in range(0xE0000, 0xE0100)] + rng.sample(range(0x3000, 0x110000), 5000)
    for code in codes:
        if 0xD800 <= code <= 0xDFFF:
            continue
        char = chr(code)
        as_text = redact_module._SPELLED_CHARACTER.fullmatch(char) is not None
        as_bytes = redact_module._SPELLED_CHARACTER_BYTES.search(char.encode()) is not None
        assert as_text == as_bytes, hex(code)
        long_text = "x" * redact_module._SHORT + char
        assert redact_module._spelled_characters(long_text) == as_text, hex(code)


def test_finding_never_shows_the_secret() -> None:
    [finding] = find_secrets(f"line one\nGITHUB_TOKEN={GHP}", home=HOME)
    assert isinstance(finding, Finding)
    assert finding.kind == "github_token"
    assert finding.line == 2
    assert GHP not in repr(finding) and GHP not in str(finding)
    assert f"line one\nGITHUB_TOKEN={GHP}"[finding.start:finding.end] == GHP


def test_codesmith_prefix_rule_is_case_insensitive_and_eats_the_prefix() -> None:
    assert redact("DSK-" + "a1b2c3d4e5f6a7b8c9d0e1f2; next") == "[REDACTED]; next"
    assert redact("deepseek-" + "9f8e7d6c5b4a39281706f5e4 end") == "[REDACTED] end"


def test_large_text_is_fast_enough_and_linear() -> None:
    # a pathological run of word characters with dashes and dots must not go quadratic
    blob = ("a-b.c_" * 50_000) + " password: x1"
    out = redact(blob, home=HOME)
    assert out.endswith("password: [REDACTED]")


# --------------------------------------------------------------------------- FAULTS.md H2
# Secrets written without the usual prefix or "=": each family with its realistic forms.
WHSEC = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SENDGRID = "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr"
AZURE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
             "K1SZFPTOtr/KBHBeksoGMGw==")
H2_SECRETS: list[tuple[str, str]] = [
    (f"aws configure set aws_secret_access_key {AWS_SECRET}", AWS_SECRET),
    (f"aws configure set aws_secret_access_key '{AWS_SECRET}' --profile ci", AWS_SECRET),
    ("aws configure set aws_session_token IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJGMEQCIBq",
     "IQoJb3JpZ2luX2VjEJr"),
    ("REDIS_URL=redis://:Sup3rS3cret@cache.internal:6379/0", "Sup3rS3cret"),
    ('{"cache": "rediss://:p4ssw0rd-x@redis.example.com:6380"}', "p4ssw0rd-x"),
    (f"STRIPE_WEBHOOK_SECRET is {WHSEC} in prod", WHSEC),
    (f"stripe listen printed: Ready! Your webhook signing secret is {WHSEC} (^C to quit)",
     WHSEC),
    (f"SENDGRID={SENDGRID}", SENDGRID),
    (f"the mailer used {SENDGRID}.", SENDGRID),
    (("DefaultEndpointsProtocol=https;AccountName=acmestore;"
      f"AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net"), AZURE_KEY),
    (("Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
      "SharedAccessKey=q8R9s0T1u2V3w4X5y6Z7a8B9c0D1e2F3g4H5i6J7k8L="), "q8R9s0T1u2V3w4X5y6Z7a8B9"),
    ("curl -u admin:Wint3r-2026 https://ci.example.com/api/json", "Wint3r-2026"),
    ("curl -s --user 'deploy:hunter22' -X POST https://registry/api", "hunter22"),
    ("curl --user=bot:xyzzy42 https://h/x", "xyzzy42"),
    ("machine api.github.com login octo password s3cret-netrc-pw", "s3cret-netrc-pw"),
    ("machine bitbucket.org\n  login jane\n  password Tr0ub4dor&3\n", "Tr0ub4dor&3"),
    ("mysql -u root -pS3cure!pw -h db.internal app", "S3cure!pw"),
    ("mysqldump -uroot -p'dump-pa55' shop > shop.sql", "dump-pa55"),
    ("The password is hunter2.", "hunter2"),
    ("fyi the password for the staging db is swordfish, rotate it", "swordfish"),
    ("Passphrase was `correct-horse-42` on the old laptop", "correct-horse-42"),
    # a command line's password or key flag, its value after a space
    ("docker login -u admin -p Dock3r-Pw-77 registry.example.com", "Dock3r-Pw-77"),
    ("docker login --username admin --password 'Dock3r-Pw-78' ghcr.io", "Dock3r-Pw-78"),
    ("redis-cli -h cache.internal -a R3dis-Pw-99 ping", "R3dis-Pw-99"),
    ("sshpass -p 'Ssh-Pw-4242' ssh deploy@host", "Ssh-Pw-4242"),
    ("mytool sync --api-key 9f8e7d6c5b4a3f2e1d0c --verbose", "9f8e7d6c5b4a3f2e1d0c"),
    ("vault login --token 7f3a9c2e1b8d4f6a0c5e9d8b", "7f3a9c2e1b8d4f6a0c5e9d8b"),
    ("tool --client-secret \"Cl1ent-S3cret\" --tenant acme", "Cl1ent-S3cret"),
    # a short number is a password after a password flag, however it is qualified
    ("psql-wrap --db-password 48213 --host db", "48213"),
]
H2_DECOYS: list[str] = [
    "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709 and md5 d41d8cd98f00b204e9800998ecf8427e",
    "request 123e4567-e89b-12d3-a456-426614174000 timed out",
    "logo.png is iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6"
    "kgAAAABJRU5ErkJggg==",
    "mysql -u root -p app_db",
    "mysql -u root -p",
    "mysql -P3306 -h db app",
    "mysql -p\"$MYSQL_PWD\" app",
    "Handle the password reset e-mail before Friday.",
    "The password is wrong on staging; the password was rotated yesterday.",
    "the password is stored in the vault, and the password is required",
    "curl -u $USER:$API_PASS https://h/x",
    "curl -u jane https://h/x prompts for the password",
    "aws configure set region eu-west-1",
    "aws configure set aws_secret_access_key $AWS_SECRET_ACCESS_KEY",
    "redis://cache.internal:6379/0 and ssh://git@github.com/acme/api.git",
    "machine example.com login jane",
    "The SG.1 signal group and whsec_ are documented in the wiki",
    "AccountName=acmestore;EndpointSuffix=core.windows.net",
    "docker login -u admin --password-stdin < pw.txt",
    "docker login -u admin -p \"$REGISTRY_PASSWORD\" ghcr.io",
    "docker run -p 8080:80 nginx",
    "mytool --api-key API_KEY  the key to use (--token TOKEN, --password TEXT)",
    "vault login --token-file ~/.vault-token",
    "redis-cli -a $REDIS_PASSWORD ping",
    "gh auth login --with-token < token.txt",
    "tool --password --other-flag",
    "README still documents the v1 --token flag; the --password option is deprecated",
    "pass --token and --user, or set --secret to true",
    "llm --max-token 4096 --temperature 0.2 and ffmpeg-wrap --second-pass 2 in.mp4",
]


@pytest.mark.parametrize(("text", "secret"), H2_SECRETS,
                         ids=[f"h2-{i}" for i in range(len(H2_SECRETS))])
def test_secrets_without_prefix_or_equals_are_redacted(text: str, secret: str) -> None:
    out = redact(text, home=HOME)
    assert secret not in out and secret.lower() not in out.lower()
    assert MARKER in out
    assert find_secrets(text, home=HOME), "the final scan must see the secret too"
    assert find_secrets(out, home=HOME) == []
    assert redact(out, home=HOME) == out


@pytest.mark.parametrize("text", H2_DECOYS, ids=[f"h2-decoy{i}" for i in range(len(H2_DECOYS))])
def test_h2_decoys_pass_unchanged(text: str) -> None:
    assert redact(text, home=HOME) == text
    assert find_secrets(text, home=HOME) == []


def test_h2_keeps_what_is_not_the_secret() -> None:
    assert redact("redis://:pw-9x@cache:6379") == "redis://[REDACTED]@cache:6379"
    assert redact("curl -u admin:Wint3r-2026 https://h") == "curl -u admin:[REDACTED] https://h"
    assert redact("mysql -uroot -pS3cure!pw app") == "mysql -uroot -p[REDACTED] app"
    assert redact("machine h login u password p4ss") == "machine h login u password [REDACTED]"
    assert redact("The password is hunter2.") == "The password is [REDACTED]."
    assert redact(f"aws configure set aws_secret_access_key {AWS_SECRET}") == \
        "aws configure set aws_secret_access_key [REDACTED]"


def test_fold_finds_lowercased_families_and_keeps_decoys() -> None:
    """Loaders lowercase some values and slugs lowercase everything: with ``fold`` a
    lowercased key id or token is still redacted; the decoys still pass."""
    for secret in (AKIA, ASIA, GHP, XOXB, JWT, "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"):
        low = f"category sec {secret.lower()}"
        assert secret.lower() not in redact(low, home=HOME, fold=True), secret
        assert find_secrets(low, home=HOME, fold=True)
    assert AKIA.lower() in redact(f"x {AKIA.lower()}", home=HOME)  # exact case without fold
    for decoy in DECOYS + H2_DECOYS:
        assert redact(decoy, home=HOME, fold=True) == decoy
        if "-P" not in decoy:  # mysql -P3306 (a port) lowercased is -p3306 (a password)
            assert redact(decoy.lower(), home=HOME, fold=True) == decoy.lower()


def test_fold_leaves_hex_digests_alone() -> None:
    digest = "acca0123456789abcdef"  # 20 hex characters that happen to start like an AWS id
    assert redact(f"table {digest} done", home=HOME, fold=True) == f"table {digest} done"
    assert find_secrets(f"id {digest}", home=HOME, fold=True) == []


# --------------------------------------------------------------------------- FAULTS.md H3
# Secrets spelled with HTML character references or Markdown backslash escapes: a Markdown or
# HTML viewer shows the real token, so the span that decodes to it is redacted.
GHP_BODY = GHP[len("ghp_"):]
SPELLED: list[tuple[str, str]] = [
    (f"found ghp&#95;{GHP_BODY} in the log", GHP_BODY),
    (f"found ghp\\_{GHP_BODY} in the log", GHP_BODY),
    (f"ghp&#x5f;{GHP_BODY} and ghp&#X5F;{GHP_BODY}", GHP_BODY),
    (f"ghp&lowbar;{GHP_BODY}", GHP_BODY),
    (f"&#103;&#x68;p_{GHP_BODY}", GHP_BODY),  # letters spelled as entities
    (f"gh&#112;&UnderBar;{GHP_BODY}", GHP_BODY),
    (f"ghp&amp;#95;{GHP_BODY}", GHP_BODY),  # spelled twice
    (f"&#65;{AKIA[1:]} is the key id", AKIA[1:]),
    (SK_OPENAI.replace("-", "&#45;"), SK_OPENAI[len("sk-proj-"):]),
    (XOXB.replace("-", "\\-"), XOXB[len("xoxb-"):]),
    (JWT.replace(".", "\\."), JWT[-20:]),
    ("password: &quot;s3cr3t-Value9&quot;", "s3cr3t-Value9"),
    ("postgres://admin:S3cretPw9&#64;db.internal:5432/app", "S3cretPw9"),
    (f"the secret is {GHO[:3]}\\_{GHO[4:]}, rotate it", GHO[4:]),
    # a string literal's escapes (JSON, JavaScript, Python): any program reading it shows them
    (f'token = "ghp\\u005f{GHP_BODY}"', GHP_BODY),
    (f"ghp\\x5F{GHP_BODY} and \\u0067hp_{GHP_BODY}", GHP_BODY),
    (f"\\U00000067hp\\u005F{GHP_BODY}", GHP_BODY),
    (SK_OPENAI.replace("-", "\\u002d"), SK_OPENAI[len("sk-proj-"):]),
]
# The same inside JSON strings (a JSON document, a ledger value written by a program).
SPELLED_JSON: list[tuple[str, str]] = [
    (json.dumps({"note": f"use ghp\\_{GHP_BODY}", "n": 1}), GHP_BODY),
    (json.dumps({"note": f"use ghp&#95;{GHP_BODY}", "n": 1}), GHP_BODY),
    (json.dumps({"note": f"use ghp&lowbar;{GHP_BODY}", "n": 1}), GHP_BODY),
    (json.dumps({"note": f"use ghp\\u005f{GHP_BODY}", "n": 1}), GHP_BODY),
]
SPELLED_DECOYS: list[str] = [
    "AT&amp;T and Tom &amp; Jerry",
    "https://example.com/search?q=token&amp;page=2&amp;sort=asc",
    "the ghp&#95; prefix marks classic GitHub tokens",
    "use `\\*` to glob and \\_private\\_ for a literal underscore",
    "password: &lt;your-password&gt;",
    "a &amp;&amp; b || c &#x3b; d &unknown; e &#99999999;",
    json.dumps({"url": "https://example.com/?a=1&amp;b=2", "dir": "C:\\temp\\build"}),
    "D:\\build\\x41\\out and \\u00e9t\\u00e9 \\ud83d\\ude00 \\UFFFFFFFF \\xZZ \\u12",
    "the ghp\\u005f prefix marks classic GitHub tokens",
]


def _shown(text: str) -> str:
    """What a Markdown or HTML viewer (or a program reading a string literal's ``\\u005f``)
    shows, decoded twice (a text inside a JSON string)."""
    for _ in range(2):
        text = re.sub(r"\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|U([0-9a-fA-F]{8}))",
                      lambda m: chr(int(m[1] or m[2] or m[3], 16)), text)
        text = html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text))
    return text


@pytest.mark.parametrize(("text", "secret"), SPELLED + SPELLED_JSON,
                         ids=[f"h3-{i}" for i in range(len(SPELLED + SPELLED_JSON))])
def test_h3_entity_and_escape_spelled_secrets_are_redacted(text: str, secret: str) -> None:
    _assert_spelled_secret_redacted(text, secret, lambda t: [_shown(t)])


def _assert_spelled_secret_redacted(text: str, secret: str,
                                    views: Callable[[str], list[str]]) -> None:
    """A viewer (``views``: what it can show of a text) shows the secret in ``text``; with
    and without folding, the redacted text shows it nowhere, the final scan sees it in
    ``text`` and nothing in the result, and redacting again changes nothing."""
    assert any(secret in view for view in views(text))
    for fold in (False, True):
        out = redact(text, home=HOME, fold=fold)
        assert not any(secret in view for view in views(out)) and MARKER in out, out
        assert find_secrets(text, home=HOME, fold=fold), "the final scan must see it too"
        assert find_secrets(out, home=HOME, fold=fold) == []
        assert redact(out, home=HOME, fold=fold) == out


def _assert_only_the_token_is_replaced(underscore: str) -> None:
    """``x ghp<underscore>… y``, the underscore spelled: the token goes, spelling and all,
    and nothing around it; the one finding covers exactly the spelled token."""
    text = f"x ghp{underscore}{GHP_BODY} y"
    assert redact(text) == "x [REDACTED] y"
    [finding] = find_secrets(text, home=HOME)
    assert (finding.kind, text[finding.start:finding.end]) == \
        ("github_token", f"ghp{underscore}{GHP_BODY}")


def test_h3_only_the_spelled_span_is_replaced() -> None:
    _assert_only_the_token_is_replaced("&#95;")
    assert redact("password: &quot;s3cr3t-Value9&quot;") == "password: &quot;[REDACTED]&quot;"
    assert redact("postgres://admin:S3cretPw9&#64;db:5432") == "postgres://[REDACTED]&#64;db:5432"
    for text, _secret in SPELLED_JSON:  # JSON stays JSON
        assert json.loads(redact(text)) == {"note": "use [REDACTED]", "n": 1}


def test_h3_html_escaped_decoys_pass_unchanged() -> None:
    """Every decoy with its ``&``, ``<``, ``"`` written as entities is still left alone."""
    for decoy in DECOYS + H2_DECOYS:
        escaped = html.escape(decoy)
        assert redact(escaped, home=HOME) == escaped, decoy


# --------------------------------------------------------------------------- FAULTS.md H3
# The same secrets percent-encoded, as in a link, a query string or a data download: a browser
# or URL decoder shows the real token, so the span that decodes to it is redacted.
PERCENT: list[tuple[str, str]] = [
    (f"see https://ci.example.com/cb?code=7&access=ghp%5F{GHP_BODY}&page=2", GHP_BODY),
    (f"ghp%5f{GHP_BODY}", GHP_BODY),  # lowercase hex
    ("".join(f"%{b:02X}" for b in GHP.encode()), GHP_BODY),  # every character encoded
    (f"gh%70_{GHP_BODY} and ghp_%52{GHP_BODY[1:]}", GHP_BODY[1:]),  # partly encoded
    (SK_OPENAI.replace("-", "%2D"), SK_OPENAI[len("sk-proj-"):]),
    (f"key id AKIA%49{AKIA[5:]} in the export", AKIA[5:]),
    (XOXB.replace("-", "%2d"), XOXB[len("xoxb-"):]),
    (f"https://app.example/#id_token={JWT.replace('.', '%2E')}", JWT[-20:]),
    ("login?user=jane&password=%70w0rdS3cret9&next=%2Fhome", "pw0rdS3cret9"),
    ("postgres://admin:S3cretPw9%40db.internal:5432/app", "S3cretPw9"),
    (f"redirect=https%3A%2F%2Fx.example%2F%3Ftoken%3Dghp%5F{GHP_BODY}", GHP_BODY),
    (f"ghp%255F{GHP_BODY} (encoded twice)", GHP_BODY),
    (f"<a href=\"https://x.example/?t=ghp&#37;5F{GHP_BODY}\">x</a>", GHP_BODY),  # in an href
    (f"ghp%26%2395%3B{GHP_BODY}", GHP_BODY),  # an entity, percent-encoded
]
PERCENT_JSON: list[tuple[str, str]] = [
    (json.dumps({"link": f"https://x.example/?t=ghp%5F{GHP_BODY}", "n": 1}), GHP_BODY),
    (json.dumps({"link": "https://x.example/?k=" + SK_OPENAI.replace("-", "%2D"), "n": 1}),
     SK_OPENAI[len("sk-proj-"):]),
]
PERCENT_DECOYS: list[str] = [
    "100% of the runs passed",
    "coverage went from 50% to 75%, 100%25 sure",
    "https://example.com/a%20b/c%2Fd?q=hello%20world&lang=en%2Dus",
    f"progress_50%5F{GHP_BODY}.csv",  # decodes to 50_…: no secret
    "the ghp%5F prefix marks classic GitHub tokens",
    "set PATH=%PATH%; password=%DB_PASSWORD% and token: %TOKEN%",
    "https://fr.example/%C3%A9t%C3%A9?search=password%20reset",
    json.dumps({"url": "https://example.com/?q=a%20b&amp;x=%3Cy%3E", "pct": "99.5%"}),
]


@pytest.mark.parametrize("text", SPELLED_DECOYS + PERCENT_DECOYS,
                         ids=[f"h3-decoy{i}" for i in range(len(SPELLED_DECOYS))]
                         + [f"h3-pct-decoy{i}" for i in range(len(PERCENT_DECOYS))])
def test_h3_decoys_with_entities_escapes_and_percents_pass_unchanged(text: str) -> None:
    assert redact(text, home=HOME) == text
    assert find_secrets(text, home=HOME) == []


def _seen(text: str) -> list[str]:
    """What a browser, a URL decoder or a Markdown viewer can show, in either order."""
    return [text, unquote(text), _shown(unquote(text)), unquote(_shown(text)),
            unquote(unquote(text))]


@pytest.mark.parametrize(("text", "secret"), PERCENT + PERCENT_JSON,
                         ids=[f"h3-pct-{i}" for i in range(len(PERCENT + PERCENT_JSON))])
def test_h3_percent_encoded_secrets_are_redacted(text: str, secret: str) -> None:
    _assert_spelled_secret_redacted(text, secret, _seen)


def test_h3_only_the_percent_encoded_span_is_replaced() -> None:
    _assert_only_the_token_is_replaced("%5F")
    assert redact(PERCENT[0][0]) == \
        "see https://ci.example.com/cb?code=7&access=[REDACTED]&page=2"
    assert redact("login?user=jane&password=%70w0rdS3cret9&next=%2Fhome") == \
        "login?user=jane&password=[REDACTED]&next=%2Fhome"
    assert redact("postgres://admin:S3cretPw9%40db:5432") == "postgres://[REDACTED]%40db:5432"
    for text, _secret in PERCENT_JSON:  # JSON stays JSON
        assert json.loads(redact(text))["n"] == 1
    assert json.loads(redact(PERCENT_JSON[0][0]))["link"] == "https://x.example/?t=[REDACTED]"


def test_h3_url_encoded_decoys_pass_unchanged() -> None:
    """Every decoy URL-encoded (as in a link or a query string) is still left alone."""
    for decoy in DECOYS + H2_DECOYS + SPELLED_DECOYS:
        encoded = quote(decoy, safe="/:")
        assert redact(encoded, home=HOME) == encoded, decoy


# A secret with an invisible character inside (U+200B zero-width space, U+00AD soft hyphen,
# U+2060 word joiner, U+FEFF, a bidi mark), as text pasted from a chat or a rich-text page
# holds it: a viewer shows the secret whole, and the site, the handoff and the check reports
# show each such character as a visible ``<U+200B>`` between the secret's two halves.
INVISIBLE: list[tuple[str, str]] = [
    (f"token {GHP[:9]}\u200b{GHP[9:]} for CI", GHP),
    (f"aws {AKIA[:8]}\u00ad{AKIA[8:]} key", AKIA),
    (f"key {SK_OPENAI[:14]}\u2060{SK_OPENAI[14:]}", SK_OPENAI),
    ("\ufeffpassword = hunt\u200ber2-Xq9", "hunter2-Xq9"),
    (f"{GHP[:4]}\u200e{GHP[4:]}", GHP),
]


def _invisible_stripped(text: str) -> list[str]:
    return [text, re.sub("[\u00ad\u200b-\u200f\u2060\ufeff]", "", text)]


@pytest.mark.parametrize(("text", "secret"), INVISIBLE,
                         ids=[f"invisible-{i}" for i in range(len(INVISIBLE))])
def test_a_secret_split_by_an_invisible_character_is_redacted(text: str, secret: str) -> None:
    _assert_spelled_secret_redacted(text, secret, _invisible_stripped)
    assert not any(secret[4:12] in view for view in
                   _invisible_stripped(redact(text, home=HOME)))


def test_invisible_characters_that_split_no_secret_stay() -> None:
    for text in ("zero\u200bwidth and soft\u00adhyphen", "\ufeffBOM first", "a\u200db emoji"):
        assert redact(text, home=HOME) == text
        assert find_secrets(text, home=HOME) == []
    for decoy in ("the ghp_\u200bprefix marks classic GitHub tokens",
                  "AKIA\u200b is the prefix of AWS access key ids.",
                  "commit 3f2d1d33a761afeb\u200b15b07964436e4394c7333dd2 fixed it"):
        assert redact(decoy, home=HOME) == decoy


# A token an upstream tool already cut, with an ellipsis at the cut (a DuckDB error message
# shows 50 characters of its input, an agent's tool cuts a long line): too short for its
# family's detector, but a recognisable prefix of the token.
CUT: list[tuple[str, str]] = [
    ('Malformed JSON.  Input: "{x yyyyyyyyyyyyyyyyyyyy ' + GHP[:23] + '..."', GHP[:23]),
    (f"token {GHP[:14]}… (cut)", GHP[:14]),
    (f"key {AKIA[:14]}…", AKIA[:14]),  # lowercased, a cut key id needs a digit (below)
    (f"slack {XOXB[:16]}...", XOXB[:16]),
    (f"jwt {JWT[:30]}…", JWT[:30]),
    (f"{GH_PAT[:24]}…", GH_PAT[:24]),
    (f"sk {SK_OPENAI[:15]}...", SK_OPENAI[:15]),
    # URL credentials cut before their "@" (a check's DuckDB error quoting a description)
    ('Input: "postgres://billing:k9Vq2mX7pL4tR8nB3yC6hD1jF5gS..."', "k9Vq2mX7pL4tR8"),
    ("redis://:Zq17Kx2mW9pLr4Tn…", "Zq17Kx2mW9pLr4Tn"),
    ("postgres://admin:20240917553…", "20240917553"),  # all digits, too long for a port
]
CUT_DECOYS = ["the ghp_… prefix", "ids start AKIA…", "Use eyJ… tokens", "sk-learn... works",
              "ghp_abc… is short", "see xoxb-… in the docs", "sk-… keys",
              "served on http://localhost:8080... then", "postgres://billing...",
              "https://example.com/docs...", "the app (http://localhost:8080)... then",
              "set it to http://host:port... and go", "use redis://localhost:${REDIS_PORT}...",
              "jdbc:postgresql://db:5432;user=x...", "http://h:<port>..."]


@pytest.mark.parametrize(("text", "prefix"), CUT, ids=[f"cut-{i}" for i in range(len(CUT))])
def test_a_token_cut_before_the_redactor_saw_it_is_redacted(text: str, prefix: str) -> None:
    for fold in (False, True):
        out = redact(text, home=HOME, fold=fold)
        assert prefix[:8] not in out and MARKER in out, out
        assert find_secrets(text, home=HOME, fold=fold)
        assert find_secrets(out, home=HOME, fold=fold) == []
        assert redact(out, home=HOME, fold=fold) == out
    assert redact(text.casefold(), home=HOME, fold=True).count(MARKER) == 1


def test_an_ellipsis_after_a_bare_prefix_is_no_secret() -> None:
    for decoy in CUT_DECOYS:
        assert redact(decoy, home=HOME) == decoy
        assert find_secrets(decoy, home=HOME) == []


# A token glued to a word by "_" or "-" (an environment variable's name, a tool call's id, a
# file name): for the families whose shape is distinctive (a fixed prefix and a long random
# body of their real length), the glued token is the secret all the same. A bare "sk-" and
# bodies that read as a word stay behind the word-start rule.
NPM = "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
HF = "hf_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3h"
AIZA = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
GLPAT = "glpat-" + "x9Y8w7V6u5T4s3R2q1P0"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
GH_PAT_REAL = ("github_pat_" + "11AB2CDE3F0g4HiJ5kLmN6" + "_"
               + "oP7qRs8TuV9wXy0Za1Bc2De3Fg4Hi5Jk6Lm7No8Pq9Rs0Tu1Vw2Xy3Za4Bc")
GLUED: list[tuple[str, str]] = [
    (f"tool call call_{SK_OPENAI} failed", SK_OPENAI),
    (f"env TOKEN_{GHP} was set", GHP),
    (f"mirror key-{GLPAT} rotated", GLPAT),
    (f"GH_{GH_PAT_REAL}", GH_PAT_REAL),
    (f"file token-{GHO}.txt", GHO),
    (f"{GHP}_old kept", GHP),  # glued after it too
    (f"AWS_{AKIA}_ID", AKIA),
    (f"SLACK_{XOXB}", XOXB),
    (f"NPM_{NPM}", NPM),
    (f"HF_{HF} in the notebook", HF),
    (f"maps_{AIZA}", AIZA),
    (f"STRIPE_{STRIPE}", STRIPE),
    (f"key_{SK_ANTHROPIC}", SK_ANTHROPIC),
    (f"hook_{WHSEC}", WHSEC),
    (f"mail-{SENDGRID}", SENDGRID),
    (f"id_token_{JWT}", JWT),
]
GLUED_DECOYS: list[str] = [
    "risk-skeleton-Generator2026Plan and task-sk-Learn2026ModelPipeline",
    "is_ghs_AuthenticationEnabledFlag and use_gho_Redirect is set",
    "run_pk_test_suiteForCheckout then sk_test_ alone",
    "hugs-xoxo-from-the-team-2026 and note-xoxb-bots",
    "x-glpat-rotation-guide-update and my_npm_install_cache",
    "docs/run_npm_installDependenciesAndCacheTheResult.md",  # 36 letters: a name, no digit
    "load_hf_ModelFromPretrainedCache and BIRD_AKIAPOLAAU_COUNT",
    "the_AIza_prefix_marks_google_keys and docs-eyJ-intro.md",
]


@pytest.mark.parametrize(("text", "secret"), GLUED,
                         ids=[f"glued-{i}" for i in range(len(GLUED))])
def test_a_token_glued_to_a_word_is_redacted(text: str, secret: str) -> None:
    for fold in (False, True):
        out = redact(text, home=HOME, fold=fold)
        assert secret not in out and secret[-12:] not in out and MARKER in out, out
        assert find_secrets(text, home=HOME, fold=fold), "the final scan must see it too"
        assert find_secrets(out, home=HOME, fold=fold) == []
        assert redact(out, home=HOME, fold=fold) == out
    assert secret.lower()[-12:] not in redact(text.lower(), home=HOME, fold=True)


def test_only_the_glued_token_is_replaced() -> None:
    assert redact(f"env TOKEN_{GHP} was set") == "env TOKEN_[REDACTED] was set"
    assert redact(f"tool call call_{SK_OPENAI} failed") == "tool call call_[REDACTED] failed"
    assert redact(f"mirror key-{GLPAT} rotated") == "mirror key-[REDACTED] rotated"




# A token hard-wrapped across a line break (a terminal, an e-mail, a quoted reply, a ledger
# entry wrapped at 80 columns): each half alone is no token, together they are one. For the
# families with a fixed prefix and a known body length, a head that ends at a line break short
# of its length, completed by the body characters that start the next line (after indentation
# or a quote marker), is replaced, both parts, and the line break stays.
WRAPPED: list[tuple[str, list[str]]] = [
    (f"ledger: {GHP[:25]}\n{GHP[25:]} was pasted", [GHP[:25], GHP[25:]]),
    (f"pasted {GHP[:12]}\n{GHP[12:]}", [GHP[4:12], GHP[12:]]),
    (f"> run with {GHO[:30]}\n> {GHO[30:]} now", [GHO[4:30], GHO[30:]]),
    (f"  - token {NPM[:20]}\n    {NPM[20:]}\n  - next", [NPM[4:20], NPM[20:]]),
    (f"key id {AKIA[:12]}\r\n{AKIA[12:]} (rotate)", [AKIA[4:12], AKIA[12:]]),
    (f"{HF[:3]}\n{HF[3:]}", [HF[3:]]),
    (f"maps key {AIZA[:20]}\n>> {AIZA[20:]}", [AIZA[4:20], AIZA[20:]]),
    (f"{GH_PAT_REAL[:50]}\n{GH_PAT_REAL[50:]}", [GH_PAT_REAL[11:50], GH_PAT_REAL[50:]]),
    (json.dumps({"note": f"use {GHP[:25]}\n{GHP[25:]} here"}), [GHP[:25], GHP[25:]]),
    # a private key whose BEGIN line was wrapped, between words or inside one
    (PEM_RSA.replace("RSA PRIVATE KEY-----\nMIIE", "RSA PRIVATE\nKEY-----\nMIIE", 1),
     ["MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"]),
    (PEM_OPENSSH.replace("PRIVATE KEY-----\nb3B", "PRIV\nATE KEY-----\nb3B", 1),
     ["b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"]),
    ("> -----BEGIN EC PRIVATE KEY-\n> ----\n> MHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY\n",
     ["MHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CB04fSeQ6tF1aY"]),
]
WRAPPED_DECOYS: list[str] = [
    "the ghp_\nprefix marks classic GitHub tokens",
    "ghp_abc\nDEF and AKIA\nIOSFODNN is the id",
    f"> quoting {GHP[:10]}\n> and more words here",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----",
]


@pytest.mark.parametrize(("text", "parts"), WRAPPED,
                         ids=[f"wrapped-{i}" for i in range(len(WRAPPED))])
def test_a_token_wrapped_across_a_line_break_is_redacted(text: str, parts: list[str]) -> None:
    for fold in (False, True):
        out = redact(text, home=HOME, fold=fold)
        for part in parts:
            assert part not in out, (part, out)
        assert MARKER in out
        assert find_secrets(text, home=HOME, fold=fold), "the final scan must see it too"
        assert find_secrets(out, home=HOME, fold=fold) == []
        assert redact(out, home=HOME, fold=fold) == out


def test_a_wrapped_token_keeps_its_line_break_and_what_is_around() -> None:
    assert redact(f"ledger: {GHP[:12]}\n{GHP[12:]} was pasted") == \
        "ledger: [REDACTED]\n[REDACTED] was pasted"
    assert redact(f"> run with {GHO[:30]}\n> {GHO[30:]} now") == \
        "> run with [REDACTED]\n> [REDACTED] now"
    [finding] = find_secrets(f"x {AKIA[:10]}\n  {AKIA[10:]} y")
    assert finding.kind == "aws_access_key_id" and finding.line == 1
    # a line break spelled (``&#10;`` in a JSON string): one marker, and JSON stays JSON
    spelled = json.dumps({"n": f"{GHP[:25]}&#10;{GHP[25:]}", "m": 1})
    assert json.loads(redact(spelled)) == {"n": MARKER, "m": 1}
    # a block whose END line was wrapped ends there: the text after it stays
    wrapped_end = PEM_RSA.replace("-----END RSA PRIVATE KEY", "-----END RSA PRI\nVATE KEY")
    assert redact(f"a\n{wrapped_end}\nb. c") == "a\n[REDACTED]\nb. c"


def test_a_complete_token_before_a_line_break_takes_nothing_from_the_next_line() -> None:
    for token in (GHP, AKIA, NPM, HF, AIZA):
        assert redact(f"{token}\nnext line") == "[REDACTED]\nnext line"
        assert redact(f"> {token}\n> Y3hJ5dF0 more") == "> [REDACTED]\n> Y3hJ5dF0 more"


@pytest.mark.parametrize("text", GLUED_DECOYS + WRAPPED_DECOYS,
                         ids=[f"glued-decoy{i}" for i in range(len(GLUED_DECOYS))]
                         + [f"wrapped-decoy{i}" for i in range(len(WRAPPED_DECOYS))])
def test_identifiers_that_hold_a_prefix_and_lines_after_a_short_one_stay(text: str) -> None:
    """Glued decoys: code identifiers that hold a family's prefix. Wrapped decoys: a line
    break after a bare or short prefix, or a next line that does not complete it."""
    for fold in (False, True):
        assert redact(text, home=HOME, fold=fold) == text
        assert find_secrets(text, home=HOME, fold=fold) == []


def test_hostile_line_breaks_take_linear_work() -> None:
    # a PEM header's words each on a line (a break is a separator or inside a word: one
    # reading, or the work explodes), heads that never complete, a quote marker bomb
    for blob in ("-----BEGIN " + "A\n" * 20_000 + "no key here",
                 "ghp_abc\n" * 20_000, "ghp_abc\n" + "> " * 50_000 + "x"):
        assert redact(blob, home=HOME, fold=True) == blob


# A token written in fullwidth letters (U+FF01-U+FF5E, as an IME or a CJK font's text holds
# them): a reader sees the token in another spelling, and NFKC (a search engine, a copy into a
# terminal) turns it back into the token. It is read folded to ASCII, one character for one,
# like the other spellings, and the span is replaced.
def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


FULLWIDTH: list[tuple[str, str]] = [
    (f"token {_fullwidth(GHP)} for CI", GHP_BODY),
    (f"{_fullwidth('ghp_')}{GHP_BODY} in the log", GHP_BODY),
    (f"key {_fullwidth(AKIA)}", AKIA[4:]),
    (f"{_fullwidth(SK_OPENAI)}、です", SK_OPENAI[8:]),
    (_fullwidth("password=hunter2-Xq9"), "hunter2-Xq9"),
    (f"password{_fullwidth('=')} hunter2-Xq9", "hunter2-Xq9"),  # one fullwidth mark
    (f"ログ{_fullwidth('(')}ghp{_fullwidth('_')}{GHP_BODY}{_fullwidth(')')}", GHP_BODY),
    (f"env TOKEN{_fullwidth('_' + GHP)}", GHP_BODY),  # fullwidth and glued
    (f"{_fullwidth(GHP[:25])}\n{_fullwidth(GHP[25:])}", GHP[25:]),  # and wrapped
]


def _nfkc(text: str) -> list[str]:
    import unicodedata
    return [text, unicodedata.normalize("NFKC", text)]


@pytest.mark.parametrize(("text", "secret"), FULLWIDTH,
                         ids=[f"fullwidth-{i}" for i in range(len(FULLWIDTH))])
def test_a_token_in_fullwidth_letters_is_redacted(text: str, secret: str) -> None:
    _assert_spelled_secret_redacted(text, secret, _nfkc)


def test_only_the_fullwidth_span_is_replaced() -> None:
    assert redact(f"token {_fullwidth(GHP)} for CI") == "token [REDACTED] for CI"
    assert redact(f"これは{_fullwidth(AKIA)}です。") == "これは[REDACTED]です。"


def test_fullwidth_text_that_spells_no_secret_stays() -> None:
    for text in ("ビルドが失敗しました\uff08原因\uff1a依存関係\uff09。再試行してください\uff01",
                 _fullwidth("the ghp_ prefix"), f"{_fullwidth('AKIA')} is the prefix",
                 _fullwidth("100%")):
        assert redact(text, home=HOME) == text
        assert find_secrets(text, home=HOME) == []
    for decoy in DECOYS + H2_DECOYS + GLUED_DECOYS:
        wide = _fullwidth(decoy)
        assert redact(wide, home=HOME) == wide, decoy


# A cut key id in case-folded text: AWS key ids are capitals and digits, so lowercased, the
# cut prefix needs a digit to be told from a word that starts "akia"/"asia" (a bird, a
# village); in its capitals it is a key id as before.
def test_a_folded_word_before_an_ellipsis_is_no_cut_key_id() -> None:
    for text in ("the akiapolaau... sings", "flights to Akiachak… and Akiak…",
                 "asiatics... wrote"):
        assert redact(text, home=HOME, fold=True) == text
        assert redact(text.casefold(), home=HOME, fold=True) == text.casefold()
    for text in ("key akia2xq7...", f"key {ASIA[:10].lower()}…", "id asia7kq2m…"):
        out = redact(text, home=HOME, fold=True)
        assert out.startswith(text.split()[0]) and MARKER in out and text[4:10] not in out, out
    # in its capitals a cut key id needs no digit, folded or not
    for fold in (False, True):
        assert redact(f"key {AKIA[:10]}…", home=HOME, fold=fold) == "key [REDACTED]…"
    # lowercased with no digit in what is left it reads as such a word, and is left: the price
    assert redact(f"key {AKIA[:10].lower()}…", home=HOME, fold=True) == "key akiaiosfod…"


# A marker (as written, or as the handoff's Markdown escapes it) already in the text: what it
# stands for was redacted, what follows it in the same value was not.
MARKED = [
    ('password: "[REDACTED] hunter2xyz"', 'password: "[REDACTED] [REDACTED]"'),
    ('password: "\\[REDACTED\\] hunter2xyz"', 'password: "\\[REDACTED\\] [REDACTED]"'),
    ("password=\\[REDACTED\\]hunter2xyz", "password=\\[REDACTED\\][REDACTED]"),
    ("password: \\[REDACTED\\] hunter2xyz", "password: \\[REDACTED\\] [REDACTED]"),
    ('token: "\\[REDACTED\\]ghp_abcdefghijklmnopqrstuvwxyz0123456789"',
     'token: "\\[REDACTED\\][REDACTED]"'),
    ("use password=\\[REDACTED\\] to log in", "use password=\\[REDACTED\\] to log in"),
    ("the password is \\[REDACTED\\]", "the password is \\[REDACTED\\]"),
    ("--token \\[REDACTED\\]", "--token \\[REDACTED\\]"),
]


@pytest.mark.parametrize(("text", "shown"), MARKED, ids=[t for t, _ in MARKED])
def test_a_marker_in_front_of_a_secret_never_hides_it_and_is_not_redacted_again(
        text: str, shown: str) -> None:
    assert redact(text) == shown
    assert redact(shown) == shown  # a second scan (the handoff's) changes nothing

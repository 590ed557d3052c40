"""aclgate resolves regex subscriptions with RE2 (google-re2); Kafka's coordinator with RE2J.
Both are asked about the same regexes: which are valid (an invalid one is refused with Kafka's
INVALID_REGULAR_EXPRESSION, and its description), and which topics each one matches
(protocol/enforce/regexsub.py). RE2J is the jar Kafka ships (tests/kafka/lib)."""

from __future__ import annotations

import base64
import random
import subprocess

import pytest

from aclgate.protocol.enforce import regexsub
from tests.kafka.cluster import classpath, ensure_jars
from tests.kafka.javaclient import compile_clients

#: regex pieces, from the syntax both take to what only one of them or neither takes
ATOMS = [
    "a", "b", "-", "_", ".", "\\.", "\\d", "\\w", "\\s", "\\b", "\\B", "\\A", "\\z", "\\C",
    "\\Q", "\\E", "\\pL", "\\p{Greek}", "\\x{41}", "\\101", "\\8", "\\0", "[", "]", "[^",
    "(", ")", "(?:", "(?i)", "(?s)", "(?m)", "(?U)", "(?x)", "(?P<n>", "(?<n>", "(?P=n)",
    "(?=", "(?!", "(?#", "|", "*", "+", "?", "{2}", "{2,}", "{,2}", "{1001}", "^", "$",
    "\\", "[[:alpha:]]", "[[:foo:]]", "\\N", "\\cA", "\\u0041", "\\Z", "\\G", "{", "}",
]  # fmt: skip
#: (regex, the description RE2J gives): Kafka's message names it
DESCRIBED = [
    ("(", "missing closing )"),
    ("[a-", "missing closing ]"),
    ("pub++", "invalid nested repetition operator"),
    ("a{1001}", "invalid repeat count"),
    ("*", "missing argument to repetition operator"),
    ("(?=x)", "invalid or unsupported Perl syntax"),
    ("x\\", "trailing backslash at end of expression"),
    ("\\8", "invalid escape sequence"),
    ("\\C", "invalid escape sequence"),
    ("[z-a]", "invalid character class range"),
]
TOPICS = ["pub", "pub2", "secret", "PUB", "a.b", "a-b", "__consumer_offsets", "x" * 249, ""]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def re2j(tmp_path_factory):
    """Run Re2jCheck over (regexes, (regex, topic) pairs): its lines."""
    missing = ensure_jars()
    if missing:
        pytest.skip(missing)
    classes = compile_clients(tmp_path_factory, "Re2jCheck")
    work = tmp_path_factory.mktemp("re2j")

    def check(regexes: list[str], pairs: list[tuple[str, str]]) -> list[str]:
        (work / "regexes").write_text("".join(f"{_b64(r)}\n" for r in regexes))
        (work / "pairs").write_text("".join(f"{_b64(r)}\t{_b64(t)}\n" for r, t in pairs))
        out = subprocess.run(
            ["java", "-cp", f"{classes}:{classpath()}", "Re2jCheck", str(work / "regexes"),
             str(work / "pairs")],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout.splitlines()  # fmt: skip
        assert out[-1] == "DONE", out[-5:]
        return out[:-1]

    return check


def _verdict(regex: str) -> str:
    try:
        regexsub.compiled(regex)
    except regexsub.InvalidRegex:
        return "ERR"
    return "OK"


def test_valid_exactly_when_kafka_takes_it(re2j):
    rng = random.Random(848)
    regexes = list(
        dict.fromkeys("".join(rng.choices(ATOMS, k=rng.randint(1, 5))) for _ in range(8000))
    )
    answers = re2j(regexes, [])
    differ = [
        (r, kafka) for r, kafka in zip(regexes, answers, strict=True)
        if _verdict(r) != kafka.split("\t")[0]
    ]  # fmt: skip
    assert not differ, f"{len(differ)} of {len(regexes)} differ, e.g. {differ[:10]}"


def test_kafkas_description_of_each_kind_of_error(re2j):
    answers = re2j([r for r, _ in DESCRIBED], [])
    for (regex, description), kafka in zip(DESCRIBED, answers, strict=True):
        assert kafka == f"ERR\t{description}", regex
        with pytest.raises(regexsub.InvalidRegex) as refused:
            regexsub.compiled(regex)
        assert str(refused.value) == (
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."
        )


def test_the_same_topics_match(re2j):
    regexes = ["pub", "pub.*", "pub|secret", "(?i)pub", "a.b", "a\\.b", "[a-z]+", "\\w+",
               "x{249}", "^pub$", "pub\\z", "", ".*", "__.*", "p(u)b", "\\Qa.b\\E",
               regexsub.wrap("pub"), regexsub.wrap(".*")]  # fmt: skip
    pairs = [(r, t) for r in regexes for t in TOPICS]
    answers = re2j([], pairs)
    for (regex, topic), kafka in zip(pairs, answers, strict=True):
        ours = "MATCH" if regexsub.matching(regex, [topic]) else "NO"
        assert ours == kafka, (regex, topic)
    # the wrapped form aclgate sends the broker matches no topic there either
    assert all(a == "NO" for (r, _), a in zip(pairs, answers, strict=True) if regexsub.unwrap(r))

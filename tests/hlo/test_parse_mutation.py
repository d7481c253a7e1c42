"""Mutated corpus texts: parsing then verifying either succeeds or raises one of pyxla's own
errors (ParseError, VerifierError, ShapeError), never anything else, and never hangs."""
import re
import signal
import threading
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyxla.conformance import HLO_LEVELS, LEVELS, corpus_case_dirs
from pyxla.errors import ParseError, ShapeError, VerifierError
from pyxla.hlo import parse_module, verify_module
from pyxla.hlo.parser import XLA_OPCODES

TEXTS = [(case / name).read_text() for case in corpus_case_dirs() for name in map(LEVELS.get, HLO_LEVELS)]

TOKENS = ["{", "}", "(", ")", "[", "]", ",", "=", "%", ":", "_", "x", "->", "/*", "*/", '"', "\\", "\n",
          "0", "1", "-1", "7", "99999999999999999999", "1e39", "nan", "-nan", "inf", "-0", "true", "...",
          "ROOT", "ENTRY", "HloModule", "f32[2]", "s32[]", "(f32[], pred[])", "token[]", "{1,0}",
          "parameter(0)", "constant(1)", "to_apply=", "calls=", "dimensions={0}", "window={size=2}",
          "padding=0_1", "slice={[0:1]}", "metadata={", "backend_config=", "index=9"]
OPCODES = sorted(XLA_OPCODES)


def _verifier_ready() -> bool:
    """False while verify_module is still a placeholder: the test then checks parsing only."""
    try:
        verify_module(parse_module("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n"))
    except NotImplementedError:
        return False
    return True


VERIFY = _verifier_ready()

position = st.integers(min_value=0, max_value=1 << 20)
mutation = st.one_of(
    st.tuples(st.just("delete"), position, st.integers(1, 40)),
    st.tuples(st.just("insert"), position,
              st.one_of(st.sampled_from(TOKENS), st.sampled_from(OPCODES), st.text(max_size=4))),
    st.tuples(st.just("swap"), position, position),
    st.tuples(st.just("duplicate_line"), position, st.just(0)),
)

_TOKEN = re.compile(r"%?[\w.\-]+|\S")


def mutate(text: str, op: tuple) -> str:
    kind, a, b = op
    if kind == "delete":
        i = a % (len(text) + 1)
        return text[:i] + text[i + b:]
    if kind == "insert":
        i = a % (len(text) + 1)
        return text[:i] + b + text[i:]
    if kind == "swap":
        tokens = list(_TOKEN.finditer(text))
        if len(tokens) < 2:
            return text
        x, y = sorted((tokens[a % len(tokens)], tokens[b % len(tokens)]), key=lambda m: m.start())
        if x.start() == y.start():
            return text
        return text[:x.start()] + y.group() + text[x.end():y.start()] + x.group() + text[y.end():]
    lines = text.split("\n")
    i = a % len(lines)
    return "\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])


@contextmanager
def time_limit(seconds: float):
    """A hang fails the example instead of stalling the run (where SIGALRM is available)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"parse/verify took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@settings(max_examples=200, deadline=3000, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(TEXTS) - 1), st.lists(mutation, min_size=1, max_size=4))
def test_mutated_corpus_text_fails_only_with_pyxla_errors(index, mutations):
    text = TEXTS[index]
    for op in mutations:
        text = mutate(text, op)
    with time_limit(10):
        try:
            module = parse_module(text, "mutated.hlo")
        except ParseError as e:
            assert not e.message.startswith("internal parser error"), e
            assert e.line >= 1 and e.column >= 1
            return
        if VERIFY:
            try:
                verify_module(module)
            except (VerifierError, ShapeError):
                pass

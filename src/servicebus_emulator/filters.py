"""Subscription rules: SQL filters and actions, correlation filters.

Service Bus evaluates a SQL-92 subset against a message's system properties (``sys.``
prefix) and application properties (``user.`` prefix or none): comparisons, arithmetic,
``AND``/``OR``/``NOT`` with SQL's three-valued logic, ``IS [NOT] NULL``, ``[NOT] IN``,
``[NOT] LIKE`` with ``%`` and ``_``, ``EXISTS(prop)`` and ``@parameters``. An action is
``SET prop = expr`` and ``REMOVE prop`` statements separated by ``;``.

The parser builds closures once per rule; evaluating a message is then a function call.
An unknown property is NULL; comparing values of different kinds is unknown (NULL), which
does not match, as the service's filters do not match on a type mismatch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servicebus_emulator.codec import ParsedMessage

Value = Any
Getter = Callable[["MessageView"], Value]


class FilterSyntaxError(ValueError):
    """A SQL filter or action that does not parse."""


# ------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class TrueFilter:
    expression: str = "1=1"


@dataclass(frozen=True)
class FalseFilter:
    expression: str = "1=0"


@dataclass(frozen=True)
class SqlFilter:
    expression: str
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CorrelationFilter:
    correlation_id: str | None = None
    message_id: str | None = None
    to: str | None = None
    reply_to: str | None = None
    subject: str | None = None
    session_id: str | None = None
    reply_to_session_id: str | None = None
    content_type: str | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SqlAction:
    expression: str
    parameters: Mapping[str, Any] = field(default_factory=dict)


RuleFilter = TrueFilter | FalseFilter | SqlFilter | CorrelationFilter
DEFAULT_RULE = "$Default"


@dataclass(frozen=True)
class RuleSpec:
    """A subscription rule: a filter and an optional action."""

    name: str = DEFAULT_RULE
    filter: RuleFilter = field(default_factory=TrueFilter)
    action: SqlAction | None = None


# ------------------------------------------------------------------- message view

# sys.<name> -> index in the AMQP properties section
_SYSTEM_PROPS = {
    "messageid": 0,
    "to": 2,
    "label": 3,
    "subject": 3,
    "replyto": 4,
    "correlationid": 5,
    "contenttype": 6,
    "sessionid": 10,
    "replytosessionid": 12,
}


class MessageView:
    """What a filter sees of a message: system properties and application properties."""

    def __init__(self, parsed: ParsedMessage, system_extra: Mapping[str, Any] | None = None):
        self.parsed = parsed
        self.app = parsed.get_application_properties()
        self.extra = {k.lower(): v for k, v in (system_extra or {}).items()}

    def system(self, name: str) -> Value:
        key = name.lower()
        if key in _SYSTEM_PROPS:
            return _plain(self.parsed.prop(_SYSTEM_PROPS[key]))
        return _plain(self.extra.get(key))

    def has_user(self, name: str) -> bool:
        return self._user_key(name) is not None

    def user(self, name: str) -> Value:
        key = self._user_key(name)
        return None if key is None else _plain(self.app[key])

    def _user_key(self, name: str) -> Any:
        if name in self.app:
            return name
        lowered = name.lower()
        for key in self.app:
            if isinstance(key, str) and key.lower() == lowered:
                return key
        return None


def _plain(value: Any) -> Value:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if value is not None and type(value).__module__.startswith("proton"):
        # proton's symbol/ulong/... are str/int subclasses: compare as plain values
        for base in (bool, int, float, str):
            if isinstance(value, base):
                return base(value)
    return value


# ------------------------------------------------------------------- tokenizer

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+(?:[eE][+-]?\d+)?)
      | (?P<str>'(?:[^']|'')*')
      | (?P<brk>\[[^\]]+\])
      | (?P<param>@[A-Za-z_][A-Za-z0-9_]*)
      | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*|\.\[[^\]]+\])*)
      | (?P<op><>|!=|>=|<=|=|<|>|\(|\)|,|\+|-|\*|/|%|;)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {
    "and",
    "or",
    "not",
    "is",
    "null",
    "in",
    "like",
    "escape",
    "exists",
    "true",
    "false",
    "set",
    "remove",
}


@dataclass
class _Tok:
    kind: str
    text: str


def _tokenize(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise FilterSyntaxError(f"cannot parse {text!r} at position {pos}")
        pos = m.end()
        kind = m.lastgroup or ""
        value = m.group(kind)
        if kind == "name" and value.lower() in _KEYWORDS:
            kind = "kw"
            value = value.lower()
        out.append(_Tok(kind, value))
    out.append(_Tok("end", ""))
    return out


# ------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str, parameters: Mapping[str, Any]) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0
        self.params = {k.lstrip("@").lower(): v for k, v in parameters.items()}

    # helpers
    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def accept(self, kind: str, text: str | None = None) -> bool:
        tok = self.peek()
        if tok.kind == kind and (text is None or tok.text == text):
            self.i += 1
            return True
        return False

    def expect(self, kind: str, text: str | None = None) -> _Tok:
        tok = self.next()
        if tok.kind != kind or (text is not None and tok.text != text):
            raise FilterSyntaxError(f"{self.text!r}: expected {text or kind}, found {tok.text!r}")
        return tok

    def done(self) -> None:
        if self.peek().kind != "end":
            raise FilterSyntaxError(f"{self.text!r}: unexpected {self.peek().text!r}")

    # grammar
    def expr(self) -> Getter:
        left = self.and_expr()
        while self.accept("kw", "or"):
            right = self.and_expr()
            left = _connective(True, left, right)
        return left

    def and_expr(self) -> Getter:
        left = self.not_expr()
        while self.accept("kw", "and"):
            right = self.not_expr()
            left = _connective(False, left, right)
        return left

    def not_expr(self) -> Getter:
        if self.accept("kw", "not"):
            inner = self.not_expr()
            return lambda m: None if (v := inner(m)) is None else not v
        return self.predicate()

    def predicate(self) -> Getter:
        if self.accept("kw", "exists"):
            self.expect("op", "(")
            ref = self.property_ref(self.next())
            self.expect("op", ")")
            return ref.exists
        left = self.additive()
        tok = self.peek()
        if tok.kind == "op" and tok.text in ("=", "<>", "!=", ">", ">=", "<", "<="):
            self.i += 1
            return _compare(tok.text, left, self.additive())
        if self.accept("kw", "is"):
            negate = self.accept("kw", "not")
            self.expect("kw", "null")
            return lambda m: (left(m) is None) != negate
        negate = self.accept("kw", "not")
        if self.accept("kw", "in"):
            self.expect("op", "(")
            items = [self.additive()]
            while self.accept("op", ","):
                items.append(self.additive())
            self.expect("op", ")")
            return _in(left, items, negate)
        if self.accept("kw", "like"):
            pattern = _unquote(self.expect("str").text)
            escape = _unquote(self.expect("str").text) if self.accept("kw", "escape") else None
            return _like(left, pattern, escape, negate)
        if negate:
            raise FilterSyntaxError(f"{self.text!r}: NOT must precede IN or LIKE here")
        return left

    def additive(self) -> Getter:
        left = self.multiplicative()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            left = _arith(self.next().text, left, self.multiplicative())
        return left

    def multiplicative(self) -> Getter:
        left = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/", "%"):
            left = _arith(self.next().text, left, self.unary())
        return left

    def unary(self) -> Getter:
        if self.accept("op", "-"):
            inner = self.unary()
            return lambda m: None if not _is_number(v := inner(m)) else -v
        if self.accept("op", "+"):
            return self.unary()
        return self.primary()

    def primary(self) -> Getter:
        tok = self.next()
        if tok.kind == "num":
            num: Value = float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
            return lambda m: num
        if tok.kind == "str":
            text = _unquote(tok.text)
            return lambda m: text
        if tok.kind == "param":
            key = tok.text[1:].lower()
            if key not in self.params:
                raise FilterSyntaxError(f"{self.text!r}: parameter {tok.text} has no value")
            value = _plain(self.params[key])
            return lambda m: value
        if tok.kind == "kw" and tok.text in ("true", "false"):
            flag = tok.text == "true"
            return lambda m: flag
        if tok.kind == "kw" and tok.text == "null":
            return lambda m: None
        if tok.kind == "op" and tok.text == "(":
            inner = self.expr()
            self.expect("op", ")")
            return inner
        return self.property_ref(tok).value

    def property_ref(self, tok: _Tok) -> _PropertyRef:
        if tok.kind == "brk":
            return _PropertyRef("user", tok.text[1:-1])
        if tok.kind != "name":
            raise FilterSyntaxError(f"{self.text!r}: unexpected {tok.text!r}")
        scope, _, name = tok.text.partition(".")
        if name and scope.lower() in ("sys", "user"):
            return _PropertyRef(scope.lower(), name.strip("[]"))
        return _PropertyRef("user", tok.text)


@dataclass(frozen=True)
class _PropertyRef:
    scope: str
    name: str

    def value(self, m: MessageView) -> Value:
        return m.system(self.name) if self.scope == "sys" else m.user(self.name)

    def exists(self, m: MessageView) -> bool:
        if self.scope == "sys":
            return m.system(self.name) is not None
        return m.has_user(self.name)


def _unquote(text: str) -> str:
    return text[1:-1].replace("''", "'")


def _is_number(v: Value) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _connective(decisive: bool, a: Getter, b: Getter) -> Getter:
    """OR (decisive True) or AND (decisive False) in SQL's three-valued logic."""

    def run(m: MessageView) -> Value:
        x, y = a(m), b(m)
        if x is decisive or y is decisive:
            return decisive
        return None if x is None or y is None else not decisive

    return run


def _comparable(x: Value, y: Value) -> bool:
    if _is_number(x) and _is_number(y):
        return True
    return type(x) is type(y)


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda x, y: x == y,
    "<>": lambda x, y: x != y,
    "!=": lambda x, y: x != y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
}


def _compare(op: str, a: Getter, b: Getter) -> Getter:
    fn = _COMPARE[op]

    def run(m: MessageView) -> Value:
        x, y = a(m), b(m)
        if x is None or y is None or not _comparable(x, y):
            return None
        return fn(x, y)

    return run


def _arith(op: str, a: Getter, b: Getter) -> Getter:
    def run(m: MessageView) -> Value:
        x, y = a(m), b(m)
        if op == "+" and isinstance(x, str) and isinstance(y, str):
            return x + y
        if not (_is_number(x) and _is_number(y)):
            return None
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if y == 0:
            return None
        if op == "/":
            return x // y if isinstance(x, int) and isinstance(y, int) else x / y
        return x % y

    return run


def _in(a: Getter, items: list[Getter], negate: bool) -> Getter:
    def run(m: MessageView) -> Value:
        x = a(m)
        if x is None:
            return None
        found = any(_comparable(x, v) and x == v for v in (g(m) for g in items))
        return found != negate

    return run


def _like(a: Getter, pattern: str, escape: str | None, negate: bool) -> Getter:
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        parts.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    regex = re.compile("".join(parts), re.DOTALL)

    def run(m: MessageView) -> Value:
        x = a(m)
        if not isinstance(x, str):
            return None
        return (regex.fullmatch(x) is not None) != negate

    return run


# ------------------------------------------------------------------- public API

Predicate = Callable[[MessageView], bool]


def compile_filter(rule_filter: RuleFilter) -> Predicate:
    """A predicate that tells whether a message matches the filter.

    Raises:
        FilterSyntaxError: a SQL filter that does not parse.
    """
    if isinstance(rule_filter, TrueFilter):
        return lambda m: True
    if isinstance(rule_filter, FalseFilter):
        return lambda m: False
    if isinstance(rule_filter, SqlFilter):
        parser = _Parser(rule_filter.expression, rule_filter.parameters)
        getter = parser.expr()
        parser.done()
        return lambda m: getter(m) is True
    return _correlation(rule_filter)


def _correlation(f: CorrelationFilter) -> Predicate:
    wanted = {
        name: getattr(f, attr)
        for name, attr in (
            ("correlationid", "correlation_id"),
            ("messageid", "message_id"),
            ("to", "to"),
            ("replyto", "reply_to"),
            ("label", "subject"),
            ("sessionid", "session_id"),
            ("replytosessionid", "reply_to_session_id"),
            ("contenttype", "content_type"),
        )
        if getattr(f, attr) is not None
    }
    user = {k: _plain(v) for k, v in f.properties.items()}

    def run(m: MessageView) -> bool:
        for name, value in wanted.items():
            if m.system(name) != value:
                return False
        for name, value in user.items():
            got = m.user(name)
            if got is None or not _comparable(got, value) or got != value:
                return False
        return True

    return run


Action = Callable[[MessageView], dict[Any, Any]]


def compile_action(action: SqlAction) -> Action:
    """A function from a message to its new application properties.

    Raises:
        FilterSyntaxError: the action does not parse.
    """
    parser = _Parser(action.expression, action.parameters)
    steps: list[tuple[str, str, Getter | None]] = []
    while True:
        if parser.accept("kw", "set"):
            ref = parser.property_ref(parser.next())
            parser.expect("op", "=")
            steps.append(("set", ref.name, parser.additive()))
        elif parser.accept("kw", "remove"):
            ref = parser.property_ref(parser.next())
            steps.append(("remove", ref.name, None))
        else:
            raise FilterSyntaxError(f"{action.expression!r}: expected SET or REMOVE")
        if not parser.accept("op", ";") or parser.peek().kind == "end":
            break
    parser.done()

    def run(m: MessageView) -> dict[Any, Any]:
        props = dict(m.app)
        for kind, name, getter in steps:
            existing = m._user_key(name)
            key = existing if existing is not None else name
            if kind == "remove":
                props.pop(key, None)
            else:
                assert getter is not None
                props[key] = getter(m)
        return props

    return run

"""MBeans and their registry: what a node exposes for management.

GORDA D3.5 section 4.2 (paper 001) is the model: Appia exports, over JMX, the knobs that
decide group-communication performance while it runs, such as the failure detector's
timeouts (wrong values cause false suspicions and needless view changes), the total-order
switching protocol, and primary-partition decisions. Here an MBean is a named set of typed
attributes (a getter, optionally a setter) and operations (a callable with typed
parameters), registered under an ObjectName such as ``testbed:type=FailureDetector``.

Values arrive as JSON (POST) or as strings (GET paths), so every written value and every
operation argument is coerced to the declared type; what cannot be coerced is a client
error (Jolokia status 400), never a stray exception.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.management.objectname import MalformedObjectName, ObjectName

TYPES = ("int", "float", "bool", "str", "list", "dict")

# The Java type names a Jolokia client expects in `list` output (JMX open types).
JAVA_TYPES = {
    "int": "long",
    "float": "double",
    "bool": "boolean",
    "str": "java.lang.String",
    "list": "java.util.List",
    "dict": "java.util.Map",
}


class ManagementError(Exception):
    """A failed management request; ``status`` and ``error_type`` follow Jolokia."""

    status = 500
    error_type = "java.lang.RuntimeException"


class BadRequest(ManagementError):
    status = 400
    error_type = "java.lang.IllegalArgumentException"


class BadObjectName(BadRequest):
    error_type = "javax.management.MalformedObjectNameException"


class Forbidden(ManagementError):
    status = 403
    error_type = "java.lang.SecurityException"


class NotFound(ManagementError):
    status = 404


class InstanceNotFound(NotFound):
    error_type = "javax.management.InstanceNotFoundException"


class AttributeNotFound(NotFound):
    error_type = "javax.management.AttributeNotFoundException"


class OperationNotFound(NotFound):
    error_type = "java.lang.NoSuchMethodException"


def _check_type(type_name: str) -> str:
    if type_name not in TYPES:
        raise ValueError(f"type {type_name!r} is not one of {', '.join(TYPES)}")
    return type_name


def coerce(value: Any, type_name: str, what: str) -> Any:
    """Convert ``value`` (JSON value or GET string) to ``type_name``; BadRequest if impossible.

    ``what`` names the target in the error ("attribute TimeoutMs", "argument ms of jump").
    """
    try:
        return _COERCERS[type_name](value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise BadRequest(
            f"{what} expects {type_name}, got {json.dumps(value)[:80]} ({exc})"
        ) from None


def _to_int(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        raise TypeError("not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("not a whole number")
        return int(value)
    if isinstance(value, str):
        return int(value.strip())
    raise TypeError("not a number")


def _to_float(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        raise TypeError("not a number")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        result = float(value.strip())
        if math.isnan(result):
            raise ValueError("NaN is not accepted")
        return result
    raise TypeError("not a number")


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("use true or false")


def _to_str(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise TypeError("not a scalar")


def _to_list(value: Any) -> list[Any] | None:
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, str):
        # GET requests carry arrays as comma-separated text (Jolokia request serialization);
        # a JSON array literal is accepted too.
        if value.lstrip().startswith("["):
            parsed = json.loads(value)
            if not isinstance(parsed, list):
                raise TypeError("not a JSON array")
            return parsed
        return [] if value == "" else value.split(",")
    raise TypeError("not a list")


def _to_dict(value: Any) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        parsed = json.loads(value)
        if isinstance(parsed, dict):
            return parsed
    raise TypeError("not a JSON object")


_COERCERS: dict[str, Callable[[Any], Any]] = {
    "int": _to_int,
    "float": _to_float,
    "bool": _to_bool,
    "str": _to_str,
    "list": _to_list,
    "dict": _to_dict,
}


@dataclass(frozen=True)
class Attribute:
    name: str
    type: str
    getter: Callable[[], Any]
    setter: Callable[[Any], None] | None = None
    description: str = ""

    @property
    def writable(self) -> bool:
        return self.setter is not None


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    description: str = ""


@dataclass(frozen=True)
class Operation:
    name: str
    func: Callable[..., Any]
    params: tuple[Param, ...] = ()
    returns: str | None = None  # None: void
    description: str = ""

    @property
    def signature(self) -> str:
        return f"{self.name}({','.join(JAVA_TYPES[p.type] for p in self.params)})"

    def coerce_args(self, args: Sequence[Any]) -> list[Any]:
        if len(args) != len(self.params):
            names = ", ".join(p.name for p in self.params) or "none"
            raise BadRequest(
                f"operation {self.name} takes {len(self.params)} argument(s) ({names}), "
                f"got {len(args)}"
            )
        return [
            coerce(arg, p.type, f"argument {p.name} of {self.name}")
            for arg, p in zip(args, self.params, strict=True)
        ]


def _call_user_code(func: Callable[..., Any], *args: Any) -> Any:
    """Run a setter or operation; a ValueError/TypeError it raises means a bad argument."""
    try:
        return func(*args)
    except ManagementError:
        raise
    except (ValueError, TypeError) as exc:
        raise BadRequest(str(exc) or type(exc).__name__) from exc


class MBean:
    """A managed object: typed attributes and operations under one ObjectName."""

    def __init__(self, name: str | ObjectName, description: str = "") -> None:
        self.name = name if isinstance(name, ObjectName) else ObjectName.parse(name)
        # The name as registered (key order kept), for `canonicalNaming=false` answers.
        self.given_name = name if isinstance(name, str) else name.canonical
        if self.name.is_pattern:
            raise MalformedObjectName(f"{self.name} is a pattern, not the name of one MBean")
        self.description = description
        self.attributes: dict[str, Attribute] = {}
        self.operations: dict[str, Operation] = {}

    def attribute(
        self,
        name: str,
        type_name: str,
        getter: Callable[[], Any],
        setter: Callable[[Any], None] | None = None,
        description: str = "",
    ) -> MBean:
        """Declare an attribute (read-only without ``setter``); returns self for chaining."""
        self.attributes[name] = Attribute(name, _check_type(type_name), getter, setter, description)
        return self

    def operation(
        self,
        name: str,
        func: Callable[..., Any],
        params: Sequence[tuple[str, str]] = (),
        returns: str | None = None,
        description: str = "",
    ) -> MBean:
        """Declare an operation with ``(name, type)`` parameters; returns self for chaining."""
        declared = tuple(Param(pname, _check_type(ptype)) for pname, ptype in params)
        if returns is not None:
            _check_type(returns)
        self.operations[name] = Operation(name, func, declared, returns, description)
        return self

    def lookup_attribute(self, name: str) -> Attribute:
        try:
            return self.attributes[name]
        except KeyError:
            raise AttributeNotFound(f"no attribute {name!r} on {self.name}") from None

    def read(self, name: str) -> Any:
        return self.lookup_attribute(name).getter()

    def read_all(self) -> dict[str, Any]:
        return {name: self.read(name) for name in self.attributes}

    def write(self, name: str, value: Any) -> Any:
        """Set attribute ``name`` to ``value`` (coerced); returns the old value."""
        attr = self.lookup_attribute(name)
        if attr.setter is None:
            raise Forbidden(f"attribute {name!r} of {self.name} is read-only")
        new = coerce(value, attr.type, f"attribute {name}")
        old = attr.getter()
        _call_user_code(attr.setter, new)
        return old

    def find_operation(self, name: str) -> Operation:
        """Look up ``name`` or ``name(type,...)``; a given signature must match the declaration."""
        base, paren, rest = name.partition("(")
        op = self.operations.get(base.strip())
        if op is None:
            raise OperationNotFound(f"no operation {base.strip()!r} on {self.name}")
        if paren:
            given = [t.strip() for t in rest.rstrip(")").split(",") if t.strip()]
            declared = [(p.type, JAVA_TYPES[p.type]) for p in op.params]
            if len(given) != len(declared) or any(
                g not in pair for g, pair in zip(given, declared, strict=True)
            ):
                raise OperationNotFound(
                    f"no operation {name!r} on {self.name}; it is {op.signature}"
                )
        return op

    def invoke(self, name: str, args: Sequence[Any]) -> Any:
        op = self.find_operation(name)
        return _call_user_code(op.func, *op.coerce_args(args))

    def info(self) -> dict[str, Any]:
        """The MBean's description in Jolokia's `list` format."""
        return {
            "desc": self.description,
            "attr": {
                a.name: {"type": JAVA_TYPES[a.type], "desc": a.description, "rw": a.writable}
                for a in self.attributes.values()
            },
            "op": {
                o.name: {
                    "args": [
                        {"name": p.name, "type": JAVA_TYPES[p.type], "desc": p.description}
                        for p in o.params
                    ],
                    "ret": "void" if o.returns is None else JAVA_TYPES[o.returns],
                    "desc": o.description,
                }
                for o in self.operations.values()
            },
        }


def parse_name(text: Any) -> ObjectName:
    """Parse an ObjectName from a request; BadObjectName (400) if malformed."""
    try:
        return ObjectName.parse(text)
    except MalformedObjectName as exc:
        raise BadObjectName(str(exc)) from None


class MBeanRegistry:
    """The node's MBean server: registered MBeans by canonical ObjectName."""

    def __init__(self) -> None:
        self._beans: dict[ObjectName, MBean] = {}

    def register(self, mbean: MBean) -> MBean:
        if mbean.name in self._beans:
            raise ValueError(f"an MBean named {mbean.name} is already registered")
        self._beans[mbean.name] = mbean
        return mbean

    def unregister(self, name: str | ObjectName) -> None:
        key = name if isinstance(name, ObjectName) else ObjectName.parse(name)
        if self._beans.pop(key, None) is None:
            raise InstanceNotFound(f"{key} is not registered")

    def get(self, name: str | ObjectName) -> MBean:
        key = name if isinstance(name, ObjectName) else parse_name(name)
        try:
            return self._beans[key]
        except KeyError:
            raise InstanceNotFound(f"{key} is not registered") from None

    def query(self, pattern: str | ObjectName) -> list[MBean]:
        """MBeans selected by ``pattern`` (or the one named by a plain name), sorted by name."""
        pat = pattern if isinstance(pattern, ObjectName) else parse_name(pattern)
        return sorted(
            (b for name, b in self._beans.items() if pat.matches(name)),
            key=lambda b: b.name.canonical,
        )

    def __iter__(self) -> Iterator[MBean]:
        return iter(sorted(self._beans.values(), key=lambda b: b.name.canonical))

    def __len__(self) -> int:
        return len(self._beans)

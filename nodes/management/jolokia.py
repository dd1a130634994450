"""The Jolokia protocol over an MBean registry, sans-IO (no sockets here, see server.py).

Follows the Jolokia protocol reference (jolokia.org, "Jolokia Protocol"): request types
read, write, exec, list, search and version; GET paths ``<type>/<arg1>/<arg2>/...`` with
``!`` as the escape character (``!/`` is a slash inside a part, ``!!`` an exclamation mark,
``!`` before anything else takes it literally, ``[null]`` is null and ``""`` the empty
string); POST bodies holding one request object or a bulk array answered in order; every
answer in the envelope ``{request, value, status, timestamp}``, and errors as
``{request, error_type, error, status}``. As in Jolokia, per-request errors travel inside
an HTTP 200 answer (a bulk request can half succeed); only a body that is not JSON gets an
HTTP error.

Processing parameters (the reference's "Processing parameters"), from the URL query (for
every request of a GET or POST) or a request's ``config`` object (wins): ``maxDepth``,
``maxCollectionSize``, ``maxObjects`` (values beyond are cut: deeper levels become their
string form, longer collections are shortened, objects past the limit become
``"[Object limit exceeded]"``), ``ignoreErrors`` (a failing attribute of a multi-attribute
or pattern read becomes its error message instead of failing the request),
``includeStackTrace`` (``true``/``runtime``: error envelopes carry ``stacktrace``; off by
default here, the reference's agent defaults to on), ``canonicalNaming`` (``false``: MBean
names as registered), ``mimeType`` (``text/plain`` or ``application/json``, the server's
Content-Type).
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
import traceback
from collections.abc import Callable
from typing import Any

from nodes.management.getpath import parse_get_path, split_path
from nodes.management.mbeans import (
    AttributeNotFound,
    BadRequest,
    InstanceNotFound,
    ManagementError,
    MBean,
    MBeanRegistry,
    coerce,
    parse_name,
)
from nodes.management.objectname import MalformedObjectName, ObjectName

AGENT_VERSION = "0.1.0"
# The Jolokia 1.x protocol level: errors inside HTTP 200 answers, canonical MBean names.
PROTOCOL_VERSION = "7.2"

Path = list[str | None]  # None is the wildcard segment `*`


def parse_inner_path(path: Any) -> Path:
    if path is None or path == "":
        return []
    if not isinstance(path, str):
        raise BadRequest(f"path must be a string like 'a/b/0', not {json.dumps(path)}")
    return [None if part == "*" else part for part in split_path(path)]


class _PathMiss(Exception):
    pass


def extract(value: Any, path: Path) -> Any:
    """Follow an inner path into a value; ``None`` parts match every entry (and filter)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if head is None:
        items: list[tuple[Any, Any]]
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, list):
            items = list(enumerate(value))
        else:
            raise _PathMiss
        found = {}
        for key, item in items:
            try:
                found[key] = extract(item, rest)
            except _PathMiss:
                continue
        if not found:
            raise _PathMiss
        return found if isinstance(value, dict) else list(found.values())
    return extract(_step(value, head), rest)


def _step(value: Any, key: str) -> Any:
    if isinstance(value, dict) and key in value:
        return value[key]
    if isinstance(value, list) and key.isdigit() and int(key) < len(value):
        return value[int(key)]
    raise _PathMiss


def _set_inner(whole: Any, path: list[str], value: Any) -> tuple[Any, Any]:
    """Return (old leaf, new whole) with the leaf at ``path`` replaced by ``value``."""
    new_whole = copy.deepcopy(whole)
    parent = extract(new_whole, list(path[:-1]))
    leaf = path[-1]
    old = _step(parent, leaf)
    if isinstance(value, str) and isinstance(old, bool | int | float):
        # A GET value is text; keep the leaf's JSON type as a typed attribute would.
        value = coerce(value, type(old).__name__, f"path {'/'.join(path)}")
    if isinstance(parent, dict):
        parent[leaf] = value
    else:
        parent[int(leaf)] = value
    return old, new_whole


def _require_str(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"a {request.get('type')} request needs a string '{key}'")
    return value


def _attribute_names(attribute: Any) -> list[str] | None:
    """None means all attributes (jolokia.js asks for them over GET as `*`)."""
    if attribute is None or attribute == "" or attribute == [] or attribute == "*":
        return None
    if isinstance(attribute, str):
        return [attribute]
    if isinstance(attribute, list) and all(isinstance(a, str) for a in attribute):
        return attribute
    raise BadRequest("attribute must be a name or a list of names")


OBJECT_LIMIT = "[Object limit exceeded]"


class Options:
    """The processing parameters of one request (see the module docstring)."""

    def __init__(self, max_depth: int = 0, max_collection: int = 0, max_objects: int = 0,
                 ignore_errors: bool = False, stack_trace: str = "false",
                 canonical: bool = True, mime_type: str = "application/json") -> None:
        self.max_depth = max_depth
        self.max_collection = max_collection
        self.max_objects = max_objects
        self.ignore_errors = ignore_errors
        self.stack_trace = stack_trace
        self.canonical = canonical
        self.mime_type = mime_type

    @classmethod
    def of(cls, query: dict[str, str] | None, config: Any) -> Options:
        merged: dict[str, Any] = dict(query or {})
        if isinstance(config, dict):
            merged.update(config)

        def number(key: str) -> int:
            try:
                return max(0, int(str(merged.get(key, 0))))
            except ValueError:
                return 0

        def flag(key: str, default: bool) -> bool:
            value = str(merged.get(key, default)).lower()
            return value in ("true", "1", "yes") if value else default

        trace = str(merged.get("includeStackTrace", "false")).lower()
        mime = str(merged.get("mimeType", "application/json"))
        return cls(number("maxDepth"), number("maxCollectionSize"), number("maxObjects"),
                   flag("ignoreErrors", False),
                   trace if trace in ("true", "false", "runtime") else "false",
                   flag("canonicalNaming", True),
                   mime if mime in ("text/plain", "application/json") else "application/json")

    def limit(self, value: Any) -> Any:
        if not (self.max_depth or self.max_collection or self.max_objects):
            return value
        count = [0]

        def walk(v: Any, depth: int) -> Any:
            count[0] += 1
            if self.max_objects and count[0] > self.max_objects:
                return OBJECT_LIMIT
            if isinstance(v, dict | list | tuple | set | frozenset):
                if self.max_depth and depth >= self.max_depth:
                    return str(v)
                n = self.max_collection or None
                if isinstance(v, dict):
                    return {k: walk(x, depth + 1) for k, x in list(v.items())[:n]}
                items = sorted(v, key=str) if isinstance(v, set | frozenset) else list(v)
                return [walk(x, depth + 1) for x in items[:n]]
            return v

        return walk(value, 0)


class Jolokia:
    """Answers Jolokia requests from one MBean registry."""

    def __init__(
        self,
        registry: MBeanRegistry,
        agent_id: str = "testbed",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.agent_id = agent_id
        self._clock = clock
        self._opts = Options()
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "read": self._read,
            "write": self._write,
            "exec": self._exec,
            "list": self._list,
            "search": self._search,
            "version": self._version,
        }

    # ---- entry points -------------------------------------------------------------------

    def handle(self, request: Any, query: dict[str, str] | None = None) -> dict[str, Any]:
        """Answer one request object with a success or error envelope; never raises.
        `query`: processing parameters from the URL (a request's `config` overrides them)."""
        opts = Options.of(query, request.get("config") if isinstance(request, dict) else None)
        try:
            if not isinstance(request, dict):
                raise BadRequest("a Jolokia request must be a JSON object with a 'type'")
            kind = request.get("type")
            handler = self._handlers.get(kind.lower()) if isinstance(kind, str) else None
            if handler is None:
                raise BadRequest(
                    f"unknown request type {json.dumps(kind)}; "
                    "use read, write, exec, list, search or version"
                )
            self._opts = opts
            value = opts.limit(handler(request))
        except ManagementError as exc:
            return self.error(exc, request, opts)
        except Exception as exc:  # a getter, setter or operation failed: the MBean's fault
            failure = ManagementError(f"{type(exc).__name__}: {exc}")
            failure.error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
            failure.__cause__ = exc
            return self.error(failure, request, opts)
        finally:
            self._opts = Options()
        return {"request": request, "value": value, "status": 200, "timestamp": self._now()}

    def handle_post(self, body: bytes, query: dict[str, str] | None = None
                    ) -> tuple[int, dict[str, Any] | list[dict[str, Any]]]:
        """Answer a POST body: (HTTP status, one envelope or a list in request order)."""
        try:
            payload = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return 400, self.error(BadRequest(f"the request body is not valid JSON ({exc})"))
        if isinstance(payload, list):
            return 200, [self.handle(item, query) for item in payload]
        if isinstance(payload, dict):
            return 200, self.handle(payload, query)
        return 400, self.error(BadRequest("the request body must be a JSON object or array"))

    def handle_get_path(self, path: str, query: dict[str, str] | None = None
                        ) -> dict[str, Any]:
        """Answer a GET: ``path`` is what follows ``/jolokia/``, already percent-decoded."""
        try:
            request = parse_get_path(path)
        except ManagementError as exc:
            return self.error(exc, {"path": path}, Options.of(query, None))
        return self.handle(request, query)

    def error(self, exc: ManagementError, request: Any = None,
              opts: Options | None = None) -> dict[str, Any]:
        envelope: dict[str, Any] = {
            "error_type": exc.error_type,
            "error": f"{exc.error_type} : {exc}",
            "status": exc.status,
            "timestamp": self._now(),
        }
        if request is not None:
            envelope["request"] = request
        trace = (opts or Options()).stack_trace
        if trace == "true" or (trace == "runtime" and exc.__cause__ is not None):
            cause = exc.__cause__ or exc
            envelope["stacktrace"] = "".join(traceback.format_exception(cause))
        return envelope

    def _now(self) -> int:
        return int(self._clock())

    # ---- request types ------------------------------------------------------------------

    def _read(self, request: dict[str, Any]) -> Any:
        name = parse_name(_require_str(request, "mbean"))
        wanted = _attribute_names(request.get("attribute"))
        path = parse_inner_path(request.get("path"))
        value: Any
        if name.is_pattern:
            value = self._read_pattern(name, wanted)
        else:
            bean = self.registry.get(name)
            if wanted is None:
                value = {a: self._attr(bean, a) for a in bean.attributes}
            elif isinstance(request.get("attribute"), list):
                value = {a: self._attr(bean, a) for a in wanted}
            else:
                value = bean.read(wanted[0])
        try:
            return extract(value, path)
        except _PathMiss:
            raise AttributeNotFound(
                f"inner path {request.get('path')!r} does not exist in the value"
            ) from None

    def _read_pattern(self, pattern: ObjectName, wanted: list[str] | None) -> dict[str, Any]:
        beans = self.registry.query(pattern)
        if not beans:
            raise InstanceNotFound(f"no MBean matches {pattern}")
        value: dict[str, Any] = {}
        for bean in beans:
            names = list(bean.attributes) if wanted is None else wanted
            found = {a: self._attr(bean, a) for a in names if a in bean.attributes}
            if found:
                value[self._name(bean)] = found
        if not value:
            raise AttributeNotFound(f"no MBean matching {pattern} has {', '.join(wanted or [])}")
        return value

    def _attr(self, bean: MBean, attribute: str) -> Any:
        """One attribute of a multi-attribute read; with ignoreErrors its error message
        stands in for a failing getter."""
        if not self._opts.ignore_errors:
            return bean.read(attribute)
        try:
            return bean.read(attribute)
        except Exception as exc:
            return f"ERROR: {type(exc).__name__}: {exc}"

    def _name(self, bean: MBean) -> str:
        return bean.name.canonical if self._opts.canonical else bean.given_name

    def _single_bean(self, request: dict[str, Any]) -> MBean:
        name = parse_name(_require_str(request, "mbean"))
        if name.is_pattern:
            raise BadRequest(f"{request['type']} needs one MBean, not the pattern {name}")
        return self.registry.get(name)

    def _write(self, request: dict[str, Any]) -> Any:
        bean = self._single_bean(request)
        attribute = _require_str(request, "attribute")
        if "value" not in request:
            raise BadRequest("a write request needs a 'value'")
        path = parse_inner_path(request.get("path"))
        if not path:
            return bean.write(attribute, request["value"])
        if None in path:
            raise BadRequest("a write path cannot contain the wildcard '*'")
        bean.lookup_attribute(attribute)
        concrete = [p for p in path if p is not None]
        try:
            old, whole = _set_inner(bean.read(attribute), concrete, request["value"])
        except _PathMiss:
            raise AttributeNotFound(
                f"inner path {request.get('path')!r} does not exist in {attribute}"
            ) from None
        bean.write(attribute, whole)
        return old

    def _exec(self, request: dict[str, Any]) -> Any:
        bean = self._single_bean(request)
        operation = _require_str(request, "operation")
        arguments = request.get("arguments")
        if arguments is None:
            arguments = []
        if not isinstance(arguments, list):
            raise BadRequest("'arguments' must be a JSON array")
        return bean.invoke(operation, arguments)

    def _list(self, request: dict[str, Any]) -> Any:
        tree: dict[str, dict[str, Any]] = {}
        for bean in self.registry:
            tree.setdefault(bean.name.domain, {})[bean.name.key_list] = bean.info()
        path = parse_inner_path(request.get("path"))
        if len(path) >= 2 and path[0] is not None and path[1] is not None:
            # Let `list/testbed/type=TotalOrder,protocol=seto` find the canonical key order.
            with contextlib.suppress(MalformedObjectName):
                path[1] = ObjectName.parse(f"{path[0]}:{path[1]}").key_list
        try:
            return extract(tree, path)
        except _PathMiss:
            raise InstanceNotFound(f"nothing is listed under {request.get('path')!r}") from None

    def _search(self, request: dict[str, Any]) -> list[str]:
        pattern = parse_name(_require_str(request, "mbean"))
        return [self._name(bean) for bean in self.registry.query(pattern)]

    def _version(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "agent": AGENT_VERSION,
            "protocol": PROTOCOL_VERSION,
            "id": self.agent_id,
            "info": {"product": "testbed", "vendor": "testbed", "version": AGENT_VERSION},
            "config": {"canonicalNaming": "true"},
        }

"""pydantic's validation errors in the spec's own words: located by the keys of the data (not
pydantic's union tags), one per problem, saying what was expected.

- an unknown key names the field it is probably a typo of (`did you mean 'duration'?`), and
  the "field required" of that field is then not a second problem;
- an unknown tag of a tagged union (a fault's `kind`) is named with the closest tag;
- a scalar where a mapping belongs shows the mapping (`expected a mapping like {name: x}`);
- a value that matched one member of a union (`topology: str | TopologySpec`) is judged by
  that member only, not also reported as not being the others.
"""

from __future__ import annotations

import difflib
import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from testbed.spec.topology import Loc


def problems(model: type[BaseModel], data: Any, exc: ValidationError) -> list[tuple[Loc, str]]:
    """Each problem of `exc` (raised validating `data` as `model`): its location in `data` and
    its message."""
    errors = [e for e in exc.errors() if not _other_member(model, e, exc.errors())]
    # A value that is none of a union's types: one problem, naming them all.
    unions: dict[Loc, list[Any]] = {}
    for e in errors:
        if _is_member(model, tuple(e["loc"])) and e["type"] in KINDS:
            unions.setdefault(tuple(e["loc"][:-1]), []).append(e)
    typos: dict[tuple[Loc, str], str] = {}  # (parent, unknown key) -> the field it resembles
    for e in errors:
        if e["type"] == "extra_forbidden":
            parent, key = tuple(e["loc"][:-1]), str(e["loc"][-1])
            close = _closest(key, _fields(model, parent))
            if close:
                typos[(parent, key)] = close
    meant = {(parent, field) for (parent, _), field in typos.items()}
    out = []
    for e in errors:
        raw = tuple(e["loc"])
        if e["type"] == "missing" and (raw[:-1], raw[-1]) in meant:
            continue  # the typo's line says it
        loc = _data_loc(model, data, raw)
        members = unions.get(raw[:-1], [])
        if len(members) > 1 and e in members:
            if e is members[0]:
                kinds = " or ".join(dict.fromkeys(_kind(m) for m in members))
                out.append((loc, f"expected {kinds}, not {e['input']!r}"))
        elif e["type"] == "extra_forbidden":
            close = typos.get((raw[:-1], str(raw[-1])))
            out.append((loc, "unknown field" + (f" (did you mean {close!r}?)" if close else "")))
        elif e["type"] == "union_tag_invalid":
            out.append(_unknown_tag(loc, e["ctx"]))
        elif e["type"] == "model_type" and not isinstance(e["input"], dict | list):
            out.append((loc, _expected_mapping(_models_at(model, raw), e["input"])))
        else:
            out.append((loc, _one_line(str(e["msg"]).removeprefix("Value error, "))))
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "invalid"


#: what a union member's type error says the value should have been
KINDS = {"string_type": "a string", "model_type": "a mapping", "dict_type": "a mapping",
         "list_type": "a list", "int_type": "an integer", "float_type": "a number",
         "bool_type": "true or false", "literal_error": ""}


def _kind(error: Any) -> str:
    if error["type"] == "literal_error":
        return str(error.get("ctx", {}).get("expected", "a literal"))
    return KINDS[error["type"]]


def _is_member(model: type[BaseModel], loc: tuple[Any, ...]) -> bool:
    """True when the last part of `loc` is a union member's tag, not a field."""
    return bool(loc) and isinstance(loc[-1], str) and loc[-1] not in _fields(model, loc[:-1])


def _data_loc(model: type[BaseModel], data: Any, loc: tuple[Any, ...]) -> Loc:
    """The part of a pydantic location that names keys of the data (union tags dropped)."""
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, dict) and part == "from_" and "from" in node:
            part, node = "from", node["from"]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict) and not _is_member(model, loc[:i + 1]):
            out.append(part)  # a missing required field: name it, at its parent's line
            break
        else:
            continue
        out.append(part)
    return tuple(out)


def _other_member(model: type[BaseModel], error: Any, errors: list[Any]) -> bool:
    """True for "not a valid <type>" of one union member when the value went on into another
    member and failed inside it: that member's errors are the problem, not this one."""
    raw = tuple(error["loc"])
    if error["type"] not in KINDS or not _is_member(model, raw):
        return False
    union = raw[:-1]
    return any(tuple(e["loc"])[:len(union)] == union and len(e["loc"]) > len(raw)
               for e in errors)


def _closest(word: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def _unknown_tag(loc: Loc, ctx: dict[str, Any]) -> tuple[Loc, str]:
    key = str(ctx.get("discriminator", "")).strip("'")
    tag = str(ctx.get("tag", ""))
    tags = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
    owner = next((p for p in reversed(loc) if isinstance(p, str)), "")
    what = f"{owner.removesuffix('s')} {key}".strip()  # faults -> "fault kind"
    close = _closest(tag, tags)
    hint = f" (did you mean {close!r}?)" if close else f"; one of {', '.join(tags)}"
    return (*loc, key), f"unknown {what} {tag!r}{hint}"


def _expected_mapping(models: list[type[BaseModel]], value: Any) -> str:
    required = sorted({_key(name, f) for m in models for name, f in m.model_fields.items()
                       if f.is_required()})
    if len(required) == 1:
        return f"expected a mapping like {{{required[0]}: {value}}}"
    fields = f" of {', '.join(required)}" if required else ""
    return f"expected a mapping{fields}, not {type(value).__name__} {value!r}"


def _key(name: str, field: Any) -> str:
    return str(field.alias or name)


def _fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys a mapping at pydantic location `loc` of `model` may have."""
    return sorted({_key(name, f) for m in _models_at(model, loc)
                   for name, f in m.model_fields.items()})


def _models_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[type[BaseModel]]:
    """The models a value at pydantic location `loc` may be: fields followed by name or
    alias, list items by index, dict values by key; a union's tag narrows it to its member
    (a discriminator's literal), other tags are passed over."""
    current: list[Any] = _expand(model)
    for part in loc:
        models = [t for t in current if isinstance(t, type) and issubclass(t, BaseModel)]
        if isinstance(part, int):
            step = [a for t in current if get_origin(t) in (list, tuple, set)
                    for a in get_args(t)[:1]]
        else:
            step = [f.annotation for m in models for name, f in m.model_fields.items()
                    if part in (name, f.alias)]
            step += [get_args(t)[1] for t in current if get_origin(t) is dict]
            if not step:  # a union tag: the members whose literal it is, or all of them
                tagged = [m for m in models if any(
                    get_origin(f.annotation) is Literal and part in get_args(f.annotation)
                    for f in m.model_fields.values())]
                step = tagged or current
        current = [x for t in step for x in _expand(t)]
    return [t for t in current if isinstance(t, type) and issubclass(t, BaseModel)]


def _expand(annotation: Any) -> list[Any]:
    """An annotation as the types it may be: Annotated unwrapped, unions split."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _expand(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [x for a in get_args(annotation) for x in _expand(a)]
    return [annotation]

"""How a position map is written and read: the `--map` spelling (`selfextend:G=8,W=64`, `MAP@METHOD`), its label in the
tables (`selfextend(G=8,W=64)`) and its JSON ({"name", "params"}); each read back as a `BoundMap`
(`ropecli.maps.position_maps`). Numpy only, through the registry."""

from __future__ import annotations

import math

from ropecli.errors import RopeCliError
from ropecli.maps.position_maps import MAPS, BoundMap, bind


def parse_map(text: str) -> BoundMap | None:
    """`selfextend:G=8,W=64` -> BoundMap("selfextend", (("G", 8.0), ("W", 64.0))), parameters checked and in the map's
    order; `none` -> None (no map: the Spec of a plain schedule)."""
    name, _, rest = text.strip().partition(":")
    given = {}
    for pair in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = pair.partition("=")
        try:
            given[key.strip()] = value.strip() if value.strip() in named(name.strip(), key.strip()) else float(value)
        except ValueError:
            raise RopeCliError(f"--map {text}: parameters are KEY=NUMBER (or a named value: lampe's fit=llama2), "
                               "comma-separated, e.g. selfextend:G=8,W=64") from None
        if not isinstance(given[key.strip()], str) and not math.isfinite(given[key.strip()]):
            raise RopeCliError(f"--map {text}: {key.strip()} = {value.strip()} is not a finite number")
        if not eq:
            raise RopeCliError(f"--map {text}: parameters are KEY=NUMBER, e.g. selfextend:G=8,W=64")
    bound = bind(name.strip(), given)
    return None if bound.name == "none" else bound


def named(name: str, key: str) -> tuple[str, ...]:
    """The names a parameter's values go by (LaMPE's fit: auto, scaled, llama2 …); () for a number."""
    record = MAPS.get(name)
    return next((p.choices for p in record.params if p.name == key), ()) if record else ()


def shown(name: str, key: str, value: float, fmt: str) -> str:
    """A parameter's value as the spelling shows it: its name where it has one (fit=llama2), else the number."""
    choices = named(name, key)
    return choices[int(value)] if choices and 0 <= int(value) < len(choices) else format(value, fmt)


def under_maps(specs: list, texts: list[str] | None) -> list:
    """Each Spec under each of a command's --map values, `MAP[:K=V,…][@METHOD+METHOD…]`: after @, only on the methods
    named (`selfextend:G=4,W=2048@none` maps the model as it is and leaves the frequency schedules beside it unmapped)."""
    maps = parse_maps(texts, [s.method for s in specs])
    return [s.but(position_map=pm) for s in specs for pm, on in maps if on is None or s.method in on]


def parse_maps(texts: list[str] | None, methods) -> list[tuple[BoundMap | None, frozenset | None]]:
    """--map values -> (the map, the methods it goes on top of; None: every method)."""
    out = []
    for text in texts or ["none"]:
        body, at, only = text.rpartition("@") if "@" in text else (text, "", "")
        unknown = sorted(set(only.split("+")) - set(methods)) if at else []
        if unknown:
            raise RopeCliError(f"--map {text}: {unknown[0]} is not among the methods compared ({', '.join(methods)}); "
                               "name one of them after @, several joined by +")
        out.append((parse_map(body), frozenset(only.split("+")) if at else None))
    return out


def map_label(bound: BoundMap | None) -> str:
    """`selfextend(G=8,W=64)`; "" for no map."""
    if not bound:
        return ""
    return f"{bound.name}(" + ",".join(f"{k}={shown(bound.name, k, v, 'g')}" for k, v in bound.key_values.items()) + ")"  # top=1 unsaid


def map_text(bound: BoundMap | None) -> str:
    """The --map spelling that `parse_map` reads back: `selfextend:G=8,W=64`; "none" for no map."""
    if not bound:
        return "none"
    return bound.name + ":" + ",".join(f"{k}={shown(bound.name, k, v, '.10g')}" for k, v in bound.key_values.items())


def map_json(bound: BoundMap | None) -> dict | None:
    """The JSON of a Spec's map: {"name", "params"}, None for no map; `map_from_json` reads it back."""
    return {"name": bound.name, "params": bound.values} if bound else None


def map_from_json(block: dict | None) -> BoundMap | None:
    return bind(block["name"], block["params"]) if block else None


def one_map(texts: list[str] | None) -> BoundMap | None:
    """The one --map of a command that takes one (search, export): parsed; None for none."""
    if len(texts or []) > 1:
        raise RopeCliError("this command runs under one --map; pass one")
    return parse_map((texts or ["none"])[0])

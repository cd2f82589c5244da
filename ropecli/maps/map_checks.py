"""A map's checks before any forward pass (numpy): its regions can be built for the lengths asked, and its window does
not already reach the whole sequence (where the "map" would be the model itself)."""

from __future__ import annotations

from ropecli.errors import RopeCliError
from ropecli.maps.position_maps import BoundMap


def check_window(bound: BoundMap | None, length: int) -> None:
    """One line when a map's window reaches the whole sequence: no pair is mapped, the 'map' is the model itself."""
    if not bound:
        return
    key = bound.record.window
    if key is not None and bound.values[key] >= length:  # the farthest pair is d = length - 1
        raise RopeCliError(f"{bound.name}: {key} = {bound.values[key]:g} reaches the whole {length}-token window, so "
                           f"nothing is mapped (the model itself); pass {key} below {length}")


def check_map(position_map: BoundMap | None, lengths) -> None:
    """The map's regions can be built (DCA: local below chunk) and its window is below every length: one line otherwise."""
    if position_map:
        bound = position_map
        if bound.values.get("fit") == 0 and not bound.values.get("L"):  # LaMPE's fit = auto is chosen on the model:
            bound = bound.but(L=float(max([*lengths, 1])))  # its regions' own rules checked at some L meanwhile
        bound.regions(max([*lengths, 1]))
        for n in lengths:
            check_window(position_map, n)

"""The one rule for the names a program gives its IR objects (functions, modules, DimVars,
topologies): a non-empty string of printable characters.

Every printer, table and message writes these names as they are; a name holding a control
character (an ANSI escape, a bell, a carriage return) would drive the user's terminal from
`show`, `check` or an error message, so it is refused where the object is built.
"""

from __future__ import annotations

from tilefoundry.errors import VerifyError


def check_name(owner: str, name: object) -> str:
    """`name`, refused (as `owner`'s error) unless it is a non-empty printable string."""
    if not isinstance(name, str) or not name:
        raise VerifyError(f"{owner}: name must be a non-empty string, got {name!r}")
    if not name.isprintable():
        raise VerifyError(
            f"{owner}: name {name!r} holds a control character; names are printed as "
            "written, so use printable characters only"
        )
    return name

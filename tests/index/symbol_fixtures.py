"""The symbol fixtures on disk (`FIXTURES`, one file per language) and the symbols and
references an independent reading of each finds (`EXPECTED`).
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures" / "symbols"

# file -> (definitions as (qualified name, kind, first line, last line), calls and imports as
# (name, use, line, enclosing definition))
EXPECTED: dict[str, tuple[list[tuple[str, str, int, int]], list[tuple[str, str, int, str | None]]]] = {
    "shapes.cs": (
        [
            ("Geometry", "module", 3, 24),
            ("Geometry.Circle", "class", 5, 23),
            ("Geometry.Circle.Circle", "method", 9, 12),
            ("Geometry.Circle.Area", "method", 14, 17),
            ("Geometry.Circle.Scale", "method", 19, 22),
        ],
        [
            ("System", "import", 1, None),
            ("Collections", "import", 1, None),
            ("Generic", "import", 1, None),
            ("Scale", "call", 16, "Geometry.Circle.Area"),
        ],
    ),
    "shapes.rb": (
        [
            ("Geometry", "module", 3, 21),
            ("Geometry.Circle", "class", 4, 16),
            ("Geometry.Circle.initialize", "method", 5, 7),
            ("Geometry.Circle.area", "method", 9, 11),
            ("Geometry.Circle.unit", "method", 13, 15),
            ("Geometry.scale", "method", 18, 20),
        ],
        [
            ("require", "call", 1, None),
            ("scale", "call", 10, "Geometry.Circle.area"),
            ("new", "call", 14, "Geometry.Circle.unit"),
        ],
    ),
    "shapes.php": (
        [
            ("Circle", "class", 7, 20),
            ("Circle.__construct", "method", 11, 14),
            ("Circle.area", "method", 16, 19),
            ("scale", "function", 22, 25),
        ],
        [("Math", "import", 5, None), ("Constants", "import", 5, None), ("scale", "call", 18, "Circle.area")],
    ),
    "Shapes.kt": (
        [
            ("Circle", "class", 5, 13),
            ("Circle.area", "method", 6, 8),
            ("Circle.Companion", "class", 10, 12),
            ("Circle.Companion.unit", "method", 11, 11),
            ("scale", "function", 15, 17),
        ],
        [
            ("kotlin", "import", 3, None),
            ("math", "import", 3, None),
            ("PI", "import", 3, None),
            ("scale", "call", 7, "Circle.area"),
            ("Circle", "call", 11, "Circle.Companion.unit"),
        ],
    ),
    "Shapes.swift": (
        [
            ("Circle", "class", 3, 13),
            ("Circle.init", "method", 6, 8),
            ("Circle.area", "method", 10, 12),
            ("Shape", "class", 15, 17),
            ("Shape.area", "method", 16, 16),
            ("scale", "function", 19, 21),
        ],
        [("Foundation", "import", 1, None), ("scale", "call", 11, "Circle.area")],
    ),
    "Shapes.scala": (
        [
            ("Circle", "class", 5, 9),
            ("Circle.area", "method", 6, 8),
            ("Shapes", "class", 11, 13),
            ("Shapes.scale", "method", 12, 12),
        ],
        [
            ("scala", "import", 3, None),
            ("math", "import", 3, None),
            ("Pi", "import", 3, None),
            ("scale", "call", 7, "Circle.area"),
        ],
    ),
    "shapes.lua": (
        [("Circle.new", "method", 3, 5), ("Circle.area", "method", 7, 9), ("scale", "function", 11, 13)],
        [("setmetatable", "call", 4, "Circle.new"), ("scale", "call", 8, "Circle.area")],
    ),
    "shapes.sh": (
        [("scale", "function", 4, 6), ("area", "function", 8, 11)],
        [
            ("set", "call", 2, None),
            ("echo", "call", 5, "scale"),
            ("scale", "call", 10, "area"),
            ("area", "call", 13, None),
        ],
    ),
}

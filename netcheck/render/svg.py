"""The HTML report's charts as geometry: where each point, band, bar and cell goes, with its
label and its tooltip, computed from the report's figures. The template draws them as inline
SVG (nothing fetched when the page opens); nothing here judges a figure, it only places it.

    >>> chart = curve_chart("busbw", [Series("all_reduce", ((1024, 0.1), (1 << 20, 1.0)))], gbps_cell)
    >>> [t.label for t in chart.x_ticks]
    ['1 KiB', '4 KiB', '16 KiB', '64 KiB', '256 KiB', '1 MiB']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from netcheck.core.bwtext import size_words

WIDTH, HEIGHT = 590, 320
# The plot's box inside the chart: room on the left for the value labels, below for the sizes.
LEFT, TOP, RIGHT, BOTTOM = 64, 12, 34, 48
MOST_TICKS = 8
# One colour per line, in the sweeps' order (a colour-blind-safe set); then again.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9")
# viridis at five stops: dark is slow, light is fast (as the --plot PNG's heatmap).
VIRIDIS = ((0x44, 0x01, 0x54), (0x3b, 0x52, 0x8b), (0x21, 0x91, 0x8c), (0x5e, 0xc9, 0x62), (0xfd, 0xe7, 0x25))
HEATMAP_CELL = 44            # pixels per cell, room for "12.34"
HEATMAP_LABELS = 110         # pixels for the node names beside and above the cells
NAME_CHARS = 16              # a longer hostname is cut in a label (its tooltip has it whole)


@dataclass(frozen=True)
class Tick:
    at: float                # pixels along its axis
    label: str


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    title: str               # the tooltip: the figure in words


@dataclass(frozen=True)
class Series:
    """One line to draw: (size, value) pairs, and the sizes its plateau spans, when it has one."""

    label: str
    values: tuple[tuple[int, float], ...]
    plateau: tuple[int, int] | None = None


@dataclass(frozen=True)
class Line:
    label: str
    colour: str
    points: tuple[Point, ...]
    band: tuple[float, float] | None    # the plateau's left edge and width, pixels

    @property
    def path(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass(frozen=True)
class Mark:
    x: float
    label: str


@dataclass(frozen=True)
class CurveChart:
    """Values against message size, both axes logarithmic."""

    title: str
    lines: tuple[Line, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    marks: tuple[Mark, ...]              # e.g. DDP's bucket size
    width: int = WIDTH
    height: int = HEIGHT
    box: tuple[int, int, int, int] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)


@dataclass(frozen=True)
class LogScale:
    """Values lo..hi onto pixels start..end, logarithmically (one value: the middle)."""

    lo: float
    hi: float
    start: float
    end: float

    def at(self, value: float) -> float:
        if self.hi <= self.lo:
            return (self.start + self.end) / 2
        share = math.log(value / self.lo) / math.log(self.hi / self.lo)
        return self.start + share * (self.end - self.start)


def curve_chart(title: str, series: list[Series], value_text: Callable[[float], str],
                marks: tuple[tuple[int, str], ...] = ()) -> CurveChart | None:
    """Each series a line on log axes, sizes labelled in bytes at powers of two, values at
    powers of ten; a series' plateau as a band under it; `marks` (size, label) as upright
    lines. None where nothing is above 0 (a log axis has no 0)."""
    kept = [Series(s.label, tuple((x, y) for x, y in s.values if y > 0), s.plateau) for s in series]
    kept = [s for s in kept if s.values]
    if not kept:
        return None
    sizes = [x for s in kept for x, _ in s.values] + [size for size, _ in marks]
    values = [y for s in kept for _, y in s.values]
    x = LogScale(min(sizes), max(sizes), LEFT, WIDTH - RIGHT)
    y = LogScale(min(values), max(values), HEIGHT - BOTTOM, TOP)
    lines = tuple(Line(s.label, COLOURS[i % len(COLOURS)],
                       tuple(Point(x.at(a), y.at(b), f"{s.label}: {value_text(b)} at {size_words(a)}")
                             for a, b in s.values),
                       _band(x, s.plateau)) for i, s in enumerate(kept))
    return CurveChart(title, lines, _size_ticks(x), _value_ticks(y, value_text),
                      tuple(Mark(x.at(size), label) for size, label in marks))


def _band(x: LogScale, plateau: tuple[int, int] | None) -> tuple[float, float] | None:
    if plateau is None:
        return None
    left, right = x.at(plateau[0]), x.at(plateau[1])
    return left - 3, right - left + 6     # a plateau of one size is still seen


def _size_ticks(x: LogScale) -> tuple[Tick, ...]:
    """Powers of two from the smallest size to the largest, every k-th so at most MOST_TICKS."""
    first, last = math.ceil(math.log2(x.lo)), math.floor(math.log2(x.hi))
    step = max(1, math.ceil((last - first + 1) / MOST_TICKS))
    return tuple(Tick(x.at(2 ** p), size_words(2 ** p)) for p in range(first, last + 1, step))


def _value_ticks(y: LogScale, value_text: Callable[[float], str]) -> tuple[Tick, ...]:
    """Powers of ten within the values' range, with 2 and 5 between where fewer than three fit;
    the range's ends where none does."""
    first, last = math.floor(math.log10(y.lo)), math.ceil(math.log10(y.hi))
    steps = (1,) if last - first >= 3 else (1, 2, 5)
    values = [m * 10.0 ** p for p in range(first, last + 1) for m in steps if y.lo <= m * 10.0 ** p <= y.hi]
    values = values[::max(1, math.ceil(len(values) / MOST_TICKS))] or [y.lo, y.hi]
    return tuple(Tick(y.at(v), value_text(v)) for v in dict.fromkeys(values))


# --- the node-pair heatmap ------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    x: int
    y: int
    fill: str
    ink: str                 # "dark" or "light": the value's colour, readable on the fill
    text: str
    title: str


@dataclass(frozen=True)
class Heatmap:
    cells: tuple[Cell, ...]
    names: tuple[Tick, ...]  # at: the cell's centre, along either axis
    size: int                # the whole square's side, pixels (the column names rise past it to the right)
    cell: int = HEATMAP_CELL
    labels: int = HEATMAP_LABELS


def heatmap(nodes: list[str], values: dict[tuple[int, int], float], text: Callable[[float], str],
            title: Callable[[int, int, float], str]) -> Heatmap:
    """A square of len(nodes) cells a side: values[(i, j)] in row i, column j, coloured from
    the lowest value (dark) to the highest (light); a pair not measured is left empty."""
    lo, hi = min(values.values()), max(values.values())
    cells = tuple(Cell(HEATMAP_LABELS + j * HEATMAP_CELL, HEATMAP_LABELS + i * HEATMAP_CELL,
                       *_colour((v - lo) / (hi - lo) if hi > lo else 1.0), text(v), title(i, j, v))
                  for (i, j), v in sorted(values.items()))
    names = tuple(Tick(HEATMAP_LABELS + (k + 0.5) * HEATMAP_CELL, short_name(n)) for k, n in enumerate(nodes))
    return Heatmap(cells, names, HEATMAP_LABELS + len(nodes) * HEATMAP_CELL)


def short_name(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "\u2026"


def _colour(share: float) -> tuple[str, str]:
    """viridis at share (0..1), and ink that reads on it (viridis is light at its top)."""
    at = share * (len(VIRIDIS) - 1)
    k = min(int(at), len(VIRIDIS) - 2)
    rgb = [round(a + (at - k) * (b - a)) for a, b in zip(VIRIDIS[k], VIRIDIS[k + 1])]
    return "#" + "".join(f"{c:02x}" for c in rgb), "dark" if share > 0.6 else "light"


# --- histograms -----------------------------------------------------------------------------

BINS = 24
MIN_BAR = 4                  # pixels: the least a bar that holds a value is drawn


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    marked: bool             # holds a value the report names (a straggler's, a slow pair's)
    title: str


@dataclass(frozen=True)
class Histogram:
    bars: tuple[Bar, ...]
    x_ticks: tuple[Tick, ...]
    most: int                # the tallest bar's count
    width: int = WIDTH
    height: int = HEIGHT
    box: tuple[int, int, int, int] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)


def histogram(values: list[tuple[float, bool]], value_text: Callable[[float], str], noun: str) -> Histogram:
    """How many values fall in each of BINS equal steps from the least to the most; a bar is
    marked when it holds a marked value, so one slow rank among thousands is still seen."""
    lo, hi = min(v for v, _ in values), max(v for v, _ in values)
    step = (hi - lo) / BINS or 1.0
    counts, marked = [0] * BINS, [False] * BINS
    for v, mark in values:
        k = min(int((v - lo) / step), BINS - 1)
        counts[k] += 1
        marked[k] = marked[k] or mark
    most = max(counts)
    width = (WIDTH - RIGHT - LEFT) / BINS
    floor = HEIGHT - BOTTOM
    # One straggler among thousands of ranks is a bar of its own, however short beside theirs.
    tall = [max(MIN_BAR, (floor - TOP) * n / most) for n in counts]
    bars = tuple(Bar(LEFT + k * width, floor - tall[k], width - 1, tall[k], marked[k],
                     f"{n} {noun}: {value_text(lo + k * step)} to {value_text(lo + (k + 1) * step)}")
                 for k, n in enumerate(counts) if n)
    ticks = tuple(Tick(LEFT + k * width, value_text(lo + k * step)) for k in range(0, BINS + 1, BINS // 4))
    return Histogram(bars, ticks, most)

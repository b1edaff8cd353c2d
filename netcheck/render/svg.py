"""The HTML report's charts as geometry: where each point, band, bar and cell goes, with its
label and its tooltip, computed from the report's figures. The template draws them as inline
SVG (nothing fetched when the page opens); nothing here judges a figure, it only places it.

Every axis says its unit in its title, and its tick labels are numbers in that unit, each
written with the decimals that tell it from its neighbours:

    >>> chart = curve_chart("busbw", "busbw", [Series("all_reduce", ((1024, 0.1), (1 << 20, 1.0)))],
    ...                     gbps_cell, RATE_UNITS)
    >>> [t.label for t in chart.x_ticks], chart.y_title
    (['1 KiB', '4 KiB', '16 KiB', '64 KiB', '256 KiB', '1 MiB'], 'busbw (GB/s)')
    >>> [t.label for t in histogram([(165_120.0, False), (165_380.0, False)], time_text, "ranks",
    ...                             "time", TIME_UNITS).x_ticks]
    ['165.2', '165.3']
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
LEGEND = 64                  # pixels below the heatmap's square for its colour scale
MOST_DECIMALS = 6            # a tick label's decimals, at most, to tell it from its neighbour
CLOSE = 0.05                 # a label written with fewer decimals is off its figure by at most this share


@dataclass(frozen=True)
class Unit:
    """An axis's unit: a figure (in the report's own unit) over `per` reads in `name`."""

    name: str
    per: float


# Largest first: an axis reads in the first unit its largest figure reaches.
TIME_UNITS = (Unit("s", 1e6), Unit("ms", 1e3), Unit("us", 1.0))        # figures in microseconds
RATE_UNITS = (Unit("GB/s", 1.0), Unit("MB/s", 1e-3), Unit("KB/s", 1e-6))  # figures in GB/s


def unit_for(units: tuple[Unit, ...], most: float) -> Unit:
    return next((u for u in units if most >= u.per), units[-1])


def numbers(values: list[float], unit: Unit) -> list[str]:
    """`values` in `unit`, all with the fewest decimals (up to MOST_DECIMALS) that write no two
    alike and each within CLOSE of its figure."""
    shown = [v / unit.per for v in values]
    for decimals in range(MOST_DECIMALS + 1):
        labels = [f"{x:.{decimals}f}" for x in shown]
        if len(set(labels)) == len(labels) and all(abs(float(t) - x) <= CLOSE * abs(x) for t, x in zip(labels, shown)):
            return labels
    return labels


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
    y_title: str                         # the values' axis, with its unit: "busbw (GB/s)"
    x_title: str = "message size (bytes)"
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


def curve_chart(title: str, quantity: str, series: list[Series], value_text: Callable[[float], str],
                units: tuple[Unit, ...], marks: tuple[tuple[int, str], ...] = ()) -> CurveChart | None:
    """Each series a line on log axes, sizes labelled in bytes at powers of two, values (the
    `quantity`, in the first of `units` their largest reaches) at powers of ten; a series'
    plateau as a band under it; `marks` (size, label) as upright lines; `value_text` words a
    point's tooltip. None where nothing is above 0 (a log axis has no 0)."""
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
    unit = unit_for(units, max(values))
    return CurveChart(title, lines, _size_ticks(x), _value_ticks(y, unit),
                      tuple(Mark(x.at(size), label) for size, label in marks), f"{quantity} ({unit.name})")


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


def _value_ticks(y: LogScale, unit: Unit) -> tuple[Tick, ...]:
    """Powers of ten (in the unit) within the values' range, with 2 and 5 between where fewer
    than three fit; the range's ends where none does. Each labelled with its own decimals: a
    1, 2 or 5 has one significant digit, so no two are written alike."""
    lo, hi = y.lo / unit.per, y.hi / unit.per
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1,) if last - first >= 3 else (1, 2, 5)
    values = [(m * 10.0 ** p, max(0, -p)) for p in range(first, last + 1) for m in steps
              if lo <= m * 10.0 ** p <= hi]
    if not values:
        ends = list(dict.fromkeys((y.lo, y.hi)))
        return tuple(Tick(y.at(v), t) for v, t in zip(ends, numbers(ends, unit)))
    values = values[::max(1, math.ceil(len(values) / MOST_TICKS))]
    return tuple(Tick(y.at(v * unit.per), f"{v:.{d}f}") for v, d in values)


# --- the node-pair heatmap ------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    x: int
    y: int
    fill: str
    ink: str                 # "dark" or "light": the value's colour, readable on the fill
    share: float             # the value over the scale's top (the yardstick), at most 1
    named: bool              # a pair of a node the report names (bw.pair): outlined
    text: str
    title: str


@dataclass(frozen=True)
class ColourScale:
    """The heatmap's legend: viridis from 0 to the yardstick, with the bound marked."""

    x: int
    y: int
    width: int
    stops: tuple[tuple[float, str], ...]     # (offset 0..1, colour)
    ticks: tuple[Tick, ...]                  # at: pixels from x
    bound: float                             # pixels from x: the bound's share of the width
    bound_label: str
    title: str


@dataclass(frozen=True)
class Heatmap:
    cells: tuple[Cell, ...]
    names: tuple[Tick, ...]  # at: the cell's centre, along either axis
    size: int                # the whole square's side, pixels (the column names rise past it to the right)
    scale: ColourScale
    cell: int = HEATMAP_CELL
    labels: int = HEATMAP_LABELS
    legend: int = LEGEND


def heatmap(nodes: list[str], values: dict[tuple[int, int], float], text: Callable[[float], str],
            title: Callable[[int, int, float], str], yardstick: float, bound: float, bound_label: str,
            named: set[int]) -> Heatmap:
    """A square of len(nodes) cells a side: values[(i, j)] in row i, column j, coloured by its
    share of `yardstick` (dark at 0, light at the yardstick and above), so figures a few percent
    apart look alike however close the slowest and fastest are; the legend below marks `bound`
    (a share) with `bound_label`. A pair of a node in `named` (by index) is outlined; a pair not
    measured is left empty."""
    def share(v: float) -> float:
        return min(1.0, max(0.0, v / yardstick)) if yardstick > 0 else 1.0
    cells = tuple(Cell(HEATMAP_LABELS + j * HEATMAP_CELL, HEATMAP_LABELS + i * HEATMAP_CELL,
                       *_colour(share(v)), share(v), i in named or j in named, text(v), title(i, j, v))
                  for (i, j), v in sorted(values.items()))
    names = tuple(Tick(HEATMAP_LABELS + (k + 0.5) * HEATMAP_CELL, short_name(n)) for k, n in enumerate(nodes))
    size = HEATMAP_LABELS + len(nodes) * HEATMAP_CELL
    width = max(3 * HEATMAP_CELL, size - HEATMAP_LABELS)
    unit = unit_for(RATE_UNITS, yardstick)
    figures = [0.0, bound * yardstick, yardstick]
    ticks = tuple(Tick(share * width, label) for share, label in zip((0.0, bound, 1.0), numbers(figures, unit)))
    stops = tuple((k / (len(VIRIDIS) - 1), _colour(k / (len(VIRIDIS) - 1))[0]) for k in range(len(VIRIDIS)))
    scale = ColourScale(HEATMAP_LABELS, size + 8, width, stops, ticks, bound * width, bound_label,
                        f"busbw each way ({unit.name})")
    return Heatmap(cells, names, size, scale)


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
AXIS_TICKS = 5               # a histogram's value axis: about this many ticks, at round figures


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
    x_title: str             # the values' axis, with its unit: "time per op (ms)"
    y_title: str             # the counts' axis: "ranks (count)"
    width: int = WIDTH
    height: int = HEIGHT
    box: tuple[int, int, int, int] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)


def histogram(values: list[tuple[float, bool]], value_text: Callable[[float], str], noun: str,
              quantity: str, units: tuple[Unit, ...]) -> Histogram:
    """How many values fall in each of BINS equal steps from the least to the most; a bar is
    marked when it holds a marked value, so one slow rank among thousands is still seen. The
    value axis (the `quantity`, in the first of `units` the most reaches) is ticked at round
    figures; `value_text` words a bar's tooltip."""
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
    unit = unit_for(units, hi)
    ticks = _linear_ticks(lo, lo + BINS * step, LEFT, WIDTH - RIGHT, unit)
    return Histogram(bars, ticks, most, f"{quantity} ({unit.name})", f"{noun} (count)")


def _linear_ticks(lo: float, hi: float, start: float, end: float, unit: Unit) -> tuple[Tick, ...]:
    """Round figures in the unit (multiples of 1, 2 or 5 times a power of ten, about AXIS_TICKS
    of them) from lo to hi, placed on start..end; lo alone where lo is hi."""
    if hi <= lo:
        return (Tick(start, numbers([lo], unit)[0]),)
    rough = (hi - lo) / unit.per / (AXIS_TICKS - 1)
    power = 10.0 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    first, last = math.ceil(lo / unit.per / step - 1e-9), math.floor(hi / unit.per / step + 1e-9)
    if last < first:
        return tuple(Tick(at, label) for at, label in zip((start, end), numbers([lo, hi], unit)))
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))   # a multiple of 1, 2 or 5 x 10^-d
    return tuple(Tick(start + (k * step * unit.per - lo) / (hi - lo) * (end - start), f"{k * step:.{decimals}f}")
                 for k in range(first, last + 1))

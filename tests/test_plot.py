"""The --plot PNG's curves (render/plot.py), drawn on a real matplotlib figure: every label on
an axis says its unit and no two read the same."""

from __future__ import annotations

import dataclasses

import pytest

from html_reports import bandwidth
from netcheck.render.plot import _curves, _pyplot


def narrow(result):
    """The sweep's sizes whose times span about one decade (400 us to 3 ms), where matplotlib
    labels a log axis's minor ticks too: the --plot of issue 53 read 4x10^3, 1 ms, 3x10^2."""
    (s,) = result.sweeps
    rows = tuple(r for r in s.rows if 4 << 20 <= r.size <= 32 << 20)
    return dataclasses.replace(result, sweeps=(dataclasses.replace(s, rows=rows),))


@pytest.mark.parametrize("label, value, time_axis", [("busbw (GB/s)", lambda r: r.busbw, False),
                                                      ("time per op", lambda r: r.time_us, True)])
def test_a_log_axis_labels_only_its_major_ticks_each_once(label, value, time_axis):
    plt = _pyplot()
    fig, ax = plt.subplots()
    try:
        _curves(ax, narrow(bandwidth(4, {}, None, None)), label, value, "t", time_axis=time_axis)
        fig.canvas.draw()
        for axis in (ax.xaxis, ax.yaxis):
            assert not [t.get_text() for t in axis.get_ticklabels(minor=True) if t.get_text()]
            shown = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
            assert shown and len(shown) == len(set(shown)), shown
        if time_axis:   # the unit in every label ("20 us", "1 ms"): no bare "4x10^3"
            assert all(t.get_text().rstrip().endswith("s") for t in ax.yaxis.get_ticklabels() if t.get_text())
    finally:
        plt.close(fig)

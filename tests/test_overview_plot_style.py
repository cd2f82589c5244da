"""The overview `ropecli plot` draws (issue 92, item 6), read back from the figure the command saves: one colour per
method in every panel, text labels clear of every line, and no curve hidden under a reference line or under another
curve drawn over it in the same style."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.report import plots

runner = CliRunner()

# the command's defaults (none, PI, NTK-fixed, mixed on LLaMA-2-7B's geometry: PI's Lambda_m lies on the k line, curves
# pass where the critical pair's label used to be), and the figure docs/guide/shipped.md shows (native+yarn and llama3
# share Lambda_m = k over the low-frequency pairs, every schedule Lambda_m = 1 over the first ones)
OVERVIEWS = {
    "defaults": [],
    "shipped": ["--model", "builtin-llama3", "--method", "native,native+yarn,llama3", "--target-len", "2048"],
}


@pytest.fixture(scope="module", params=list(OVERVIEWS))
def overview(request, tmp_path_factory):
    """The overview's figure as the command saves it, drawn again after the save (its layout and legends in place)."""
    saved, save = [], plots.save

    def keep(fig, path):
        saved.append(fig)
        return save(fig, path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plots, "save", keep)  # plot_overview finds `save` in its module when it runs
        out = tmp_path_factory.mktemp("overview") / "overview.png"
        r = runner.invoke(app, ["plot", *OVERVIEWS[request.param], "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert len(saved) == 1 and out.stat().st_size > 20000
    fig = saved[0]
    FigureCanvasAgg(fig).draw()  # save closed the figure (its canvas a bare one since): drawn on Agg, as it was saved
    return fig


def data_lines(ax) -> list:
    """The curves drawn in data coordinates; the reference lines (L, k*L, k, the critical pair) span the axes."""
    return [line for line in ax.get_lines() if line.get_transform() == ax.transData]


def reference_lines(ax) -> list:
    return [line for line in ax.get_lines() if line.get_transform() != ax.transData]


def curve_panels(fig) -> list:
    """The panels with a line per method (the temperature panel of Llama 4-like models has none)."""
    return [ax for ax in fig.axes if ax.get_legend() is not None and len(data_lines(ax)) > 1]


def test_each_method_has_one_colour_in_every_panel(overview):
    colours = {}  # method -> the colours its line has, over the panels
    for ax in curve_panels(overview):
        for line in data_lines(ax):
            # a legend entry names every schedule a line stands for: "original = none" is none's line too
            for name in line.get_label().split(" = "):
                colours.setdefault(name, set()).add(to_rgba(line.get_color()))
    assert len(curve_panels(overview)) >= 2 and len(colours) >= 4, colours
    assert {name: c for name, c in colours.items() if len(c) > 1} == {}


def display_points(line, per_segment: int = 50) -> np.ndarray:
    """Points along the line as drawn, in display coordinates: each segment between finite neighbours sampled."""
    xy = line.get_transform().transform(line.get_xydata())
    a, b = xy[:-1], xy[1:]
    drawn = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    t = np.linspace(0, 1, per_segment)[None, :, None]
    return (a[drawn, None, :] + t * (b[drawn, None, :] - a[drawn, None, :])).reshape(-1, 2)


def test_no_text_label_lies_on_a_line(overview):
    renderer = overview.canvas.get_renderer()
    labels = [(ax, text) for ax in overview.axes for text in ax.texts]
    assert labels, "the overview labels the critical pair: no text found, the test would check nothing"
    for ax, text in labels:
        box = text.get_window_extent(renderer)
        for line in ax.get_lines():
            p = display_points(line)
            inside = (p[:, 0] >= box.x0) & (p[:, 0] <= box.x1) & (p[:, 1] >= box.y0) & (p[:, 1] <= box.y1)
            assert not inside.any(), f"label {text.get_text()!r} lies on line {line.get_label()!r}"


def test_reference_lines_lie_under_every_curve(overview):
    """A reference line drawn over a curve that runs along it hides it: PI's Lambda_m = k under the dashed k line."""
    for ax in curve_panels(overview):
        curves, references = data_lines(ax), reference_lines(ax)
        assert references, "every panel draws reference lines: none found, the test would check nothing"
        assert max(r.get_zorder() for r in references) < min(c.get_zorder() for c in curves), \
            [(line.get_label(), line.get_zorder()) for line in ax.get_lines()]


def test_curves_that_run_together_differ_in_style(overview):
    """Two curves equal on neighbouring pairs share a drawn segment: the one drawn later (on top) must leave gaps
    that the one under it shows through, in a style of its own."""
    shared = 0
    for ax in curve_panels(overview):
        curves = data_lines(ax)  # in drawing order; a higher zorder draws on top
        for i, first in enumerate(curves):
            for second in curves[i + 1:]:
                under, over = (second, first) if first.get_zorder() > second.get_zorder() else (first, second)
                if not np.array_equal(under.get_xdata(), over.get_xdata()):
                    continue
                y0, y1 = np.asarray(under.get_ydata(), float), np.asarray(over.get_ydata(), float)
                agree = np.isfinite(y0) & np.isfinite(y1) & np.isclose(y0, y1, rtol=1e-3, atol=0)
                if (agree[1:] & agree[:-1]).any():
                    shared += 1
                    assert over.get_linestyle() not in ("-", "solid") and over.get_linestyle() != under.get_linestyle(), \
                        f"{over.get_label()!r} ({over.get_linestyle()}) covers {under.get_label()!r} ({under.get_linestyle()})"
    if "native" in {line.get_label() for ax in overview.axes for line in ax.get_lines()}:
        assert shared, "the shipped figure's curves run together: none found, the test would check nothing"

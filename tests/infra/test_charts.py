"""Charts, one way (infra.charts): escaped labels, formatted numbers, a log-scale x axis, valid SVG."""
from xml.etree import ElementTree

import pytest

from infra import charts

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg)


def test_a_charts_labels_are_escaped_everywhere_they_appear():
    hostile = '<script>alert("x")</script> & co'
    svg = charts.line_chart([charts.Series(hostile, [(1, 0.5), (2, 0.7)], labels=[hostile, "b"])],
                            x_label=hostile, y_label="a<b", title=hostile, rules=[charts.Rule(hostile, 0.6)])
    assert "<script>" not in svg
    root = parse(svg)  # still well-formed XML
    texts = [element.text for element in root.iter(f"{SVG}text")]
    assert texts.count(hostile) == 5  # title, x label, point label, series and rule legends: as text, not markup
    assert "a<b" in texts and root.get("aria-label") == "a<b by " + hostile


def test_a_charts_numbers_are_formatted():
    assert [charts.number(v) for v in (0.123456, 1000.0, 12, 2.5e-4, 3e7)] == ["0.123", "1000", "12", "0.00025",
                                                                               "3e+07"]
    root = parse(charts.line_chart([("loss", [(1, 0.123456), (3, 0.987654)])], x_label="epoch", y_label="loss"))
    texts = {element.text for element in root.iter(f"{SVG}text")}
    assert {"0.123", "0.556", "0.988"} <= texts and not any("0.123456" in (t or "") for t in texts)
    points = next(root.iter(f"{SVG}polyline")).get("points")
    assert all(len(number.split(".")[1]) == 1 for pair in points.split() for number in pair.split(","))


def test_the_log_axis_places_10_100_and_1000_evenly():
    root = parse(charts.line_chart([("tokens", [(10, 0.1), (100, 0.5), (1000, 0.9)])], x_label="tokens",
                                   y_label="accuracy", log_x=True))
    ticks = {t.text: float(t.get("x")) for t in root.iter(f"{SVG}text") if t.get("class") == "x-tick"}
    assert list(ticks) == ["10", "100", "1000"]
    assert ticks["100"] - ticks["10"] == pytest.approx(ticks["1000"] - ticks["100"], abs=0.1)
    circles = [float(c.get("cx")) for c in root.iter(f"{SVG}circle")]
    assert circles == pytest.approx(list(ticks.values()), abs=0.1)  # each point over its tick


def test_a_log_axis_leaves_out_points_it_cannot_place():
    root = parse(charts.line_chart([("t", [(0, 0.2), (10, 0.3), (100, 0.4)])], x_label="x", y_label="y", log_x=True))
    assert len(list(root.iter(f"{SVG}circle"))) == 2


def test_nothing_to_draw_is_no_chart():
    assert charts.line_chart([("empty", [(1, None)])], x_label="x", y_label="y") == ""


def test_a_grid_of_charts_is_one_valid_svg_file(tmp_path):
    panels = [charts.line_chart([charts.Series(f"s{i}", [(1, 0.1), (2, 0.3)], band=[(1, 0.0, 0.2), (2, 0.2, 0.4)])],
                                x_label="labels", y_label="auc", title=f"panel {i}") for i in range(4)]
    path = charts.write_svg(charts.grid(panels, columns=3, title="4 panels"), tmp_path / "grid.svg")
    root = ElementTree.parse(path).getroot()
    assert root.tag == f"{SVG}svg" and len(root.findall(f"{SVG}svg")) == 4
    assert int(root.get("width")) == 3 * int(root.find(f"{SVG}svg").get("width"))
    assert len(list(root.iter(f"{SVG}polygon"))) == 4  # each band drawn


def test_wider_y_tick_labels_move_the_plot_right_rather_than_onto_the_axis_label():
    def plot_left(low: float, high: float) -> float:
        root = parse(charts.line_chart([("loss", [(1, high), (2, low)])], x_label="epoch", y_label="loss"))
        return float(next(root.iter(f"{SVG}line")).get("x1"))

    assert plot_left(0.5, 0.7) == charts.MIN_LEFT  # short ticks: the usual margin
    assert charts.MIN_LEFT < plot_left(0.0123, 12.5) < plot_left(0.00042, 0.0131)

"""PaddleOCR detection label files are read strictly: every bad line is named by file, line and box, with the fix."""

from __future__ import annotations

import json

import pytest

from quantgate.errors import BadInput
from quantgate.samples.errors import BadTextBoxes
from quantgate.stages.data.det_labels import Box, check_inside, read_box_label_file

SQUARE = [[10, 20], [90, 20], [90, 50], [10, 50]]


def box(text: str = "金额", points=None) -> dict:
    return {"transcription": text, "points": SQUARE if points is None else points}


def label_file(tmp_path, *lines: str, pages=("a.png", "b.png", "c.png")):
    for page in pages:
        (tmp_path / page).write_bytes(b"not decoded here")
    path = tmp_path / "det.txt"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def line(page: str, boxes) -> str:
    return f"{page}\t{json.dumps(boxes, ensure_ascii=False)}"


def problems(tmp_path, *lines: str) -> str:
    with pytest.raises(BadTextBoxes) as caught:
        read_box_label_file(label_file(tmp_path, *lines), tmp_path, "label_file")
    assert isinstance(caught.value, BadInput)  # exit code 2 on the command line
    return str(caught.value)


def test_a_good_file_gives_each_page_its_boxes_in_order(tmp_path):
    path = label_file(tmp_path, line("a.png", [box("金额", SQUARE), box("###", [[0, 0], [5, 0], [5, 5], [0, 5],
                                                                                   [0, 3]])]),
                      "", line("b.png", [box("*")]))
    first, second = read_box_label_file(path, tmp_path, "label_file")
    assert (first.file, first.number, first.where) == ("a.png", 1, f"{path}:1")
    assert first.boxes[0] == Box(((10.0, 20.0), (90.0, 20.0), (90.0, 50.0), (10.0, 50.0)), "金额")
    assert len(first.boxes[1].points) == 5  # polygons with more than 4 points are PaddleOCR's too
    assert [b.ignore for b in first.boxes] == [False, True]
    assert (second.number, second.boxes[0].ignore) == (3, True)  # blank lines keep the numbering; "*" is ignored


def test_a_line_without_a_tab_is_named_with_the_fix(tmp_path):
    message = problems(tmp_path, f"a.png    {json.dumps([box()])}")
    assert "det.txt:1 has no tab" in message and "a tab, not spaces" in message


def test_a_label_that_is_not_json_names_the_column_where_json_failed(tmp_path):
    cut = 'a.png\t[{"transcription": "x", "points": [[1, 2], [3, 4], [5, 6], [7, 8]]'  # the closing "}]" lost
    message = problems(tmp_path, cut)
    assert f"det.txt:1 label is not JSON at column {len(cut) + 1} (Expecting ',' delimiter" in message
    assert "PaddleOCR's JSON list" in message


@pytest.mark.parametrize(("label", "said"), [
    ('{"transcription": "x"}', "label is a JSON object, not a list of boxes"),
    ("[]", "label is an empty list"),
    ('["金额"]', 'box 1 of 1 is a JSON string "金额", not an object'),
])
def test_a_label_that_is_not_a_list_of_objects_is_refused(tmp_path, label, said):
    message = problems(tmp_path, f"a.png\t{label}")
    assert f"det.txt:1 {said}" in message


@pytest.mark.parametrize(("bad", "said"), [
    ({"transcription": "x"}, 'box 2 of 2 has no "points"'),
    (box(points=[[1, 2], [3, 4], [5, 6]]), 'box 2 of 2 "points" [[1, 2], [3, 4], [5, 6]] is not 4 or more'),
    (box(points=[1, 2, 3, 4, 5, 6, 7, 8]), 'box 2 of 2 "points" [1, 2, 3, 4, 5, 6, 7, 8] is not 4 or more'),
    (box(points=[[1, "2"], [3, 4], [5, 6], [7, 8]]), 'box 2 of 2 "points" [[1, "2"], [3, 4], [5, 6], [7, 8]] is not'),
    (box(points=[[1, True], [3, 4], [5, 6], [7, 8]]), 'box 2 of 2 "points" [[1, true], [3, 4], [5, 6], [7, 8]] is not'),
    ({"points": SQUARE}, 'box 2 of 2 has no "transcription"'),
    ({"points": SQUARE, "transcription": 12}, 'box 2 of 2 has a non-string "transcription"'),
])
def test_a_box_without_usable_points_or_text_is_named_by_its_index(tmp_path, bad, said):
    message = problems(tmp_path, line("a.png", [box(), bad]))
    assert f"det.txt:1 {said}" in message and "clockwise from the top-left" in message


def test_points_that_are_not_finite_numbers_are_refused(tmp_path):
    message = problems(tmp_path, 'a.png\t[{"transcription": "x", "points": [[NaN, 2], [3, 4], [5, 6], [7, 8]]}]')
    assert "box 1 of 1" in message and "pairs of numbers" in message


@pytest.mark.parametrize(("page", "said"), [
    ("", "page path '' is empty"),
    ("../a.png", "page path '../a.png' is outside data.path"),
    ("/etc/a.png", "page path '/etc/a.png' is outside data.path"),
    ("gone.png", "gone.png does not exist"),
])
def test_a_missing_page_path_or_page_is_named(tmp_path, page, said):
    message = problems(tmp_path, line(page, [box()]))
    assert "det.txt:1 " in message and said in message


def test_a_page_listed_twice_names_both_lines(tmp_path):
    message = problems(tmp_path, line("a.png", [box()]), line("b.png", [box()]), line("a.png", [box("合计")]))
    assert "det.txt:3 a.png is already listed on line 1" in message
    assert "list each page once" in message


def test_every_problem_is_collected_and_the_first_few_shown_with_one_fix_per_kind(tmp_path):
    lines = [line("a.png", [box()]), "b.png no tab", "c.png\tnot json"] + [
        line(f"p{i}.png", [box()]) for i in range(12)]
    message = problems(tmp_path, *lines)
    assert message.count("does not exist") == 8 and "and 4 more" in message and "14 problem(s)" in message
    assert message.index("det.txt:2") < message.index("det.txt:3") < message.index("det.txt:4")
    assert message.count("fix the paths") == 1 and "a tab, not spaces" in message and "JSON list" in message


def test_an_empty_or_unreadable_file_is_refused(tmp_path):
    with pytest.raises(BadTextBoxes, match="holds no label line"):
        read_box_label_file(label_file(tmp_path, ""), tmp_path, "test_label_file")
    (tmp_path / "gbk.txt").write_bytes("a.png\t".encode() + json.dumps([box()], ensure_ascii=False).encode("gbk"))
    with pytest.raises(BadTextBoxes, match="is not UTF-8.*iconv"):
        read_box_label_file(tmp_path / "gbk.txt", tmp_path, "label_file")
    with pytest.raises(BadTextBoxes, match="data.label_file .*missing.txt cannot be read"):
        read_box_label_file(tmp_path / "missing.txt", tmp_path, "label_file")


def test_boxes_inside_the_page_pass_within_one_pixel(tmp_path):
    path = label_file(tmp_path, line("a.png", [box(points=[[-1, -0.5], [101, 0], [101, 61], [0, 61]])]))
    check_inside(read_box_label_file(path, tmp_path, "label_file"), {"a.png": (100, 60)})


def test_a_box_outside_its_page_names_the_point_and_the_page_size(tmp_path):
    path = label_file(tmp_path, line("a.png", [box()]),
                      line("b.png", [box(), box(points=[[10, 20], [130.5, 20], [130.5, 50], [10, 50]])]))
    lines = read_box_label_file(path, tmp_path, "label_file")
    with pytest.raises(BadTextBoxes) as caught:
        check_inside(lines, {"a.png": (100, 60), "b.png": (120, 60)})
    message = str(caught.value)
    assert message.startswith("1 box(es) reach outside their page")
    assert f"{path}:2 b.png box 2 of 2 has point [130.5, 20] outside the 120x60 page" in message

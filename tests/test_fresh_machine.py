"""A fresh machine needs nothing beyond the README's install command: no system font, no apt, no root.

The README's test command renders Chinese text lines and pages (the PP-OCRv4 tests, the demo data) and the reports
draw Chinese labels. A fresh machine has no CJK font, so quantgate installs one with its pins (the
`noto-cjk-sans-otc` wheel). These tests run a child process that sees no system font at all (fontconfig pointed at
an empty configuration, matplotlib's font list cut to its own files) and check that the font is still found, and
that `.ci/run` installs nothing the README does not say.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

NO_SYSTEM_FONTS = r'''
import json, sys
import matplotlib
from matplotlib import font_manager

# As on a machine with no font installed: matplotlib sees only the files it ships, the system is not searched.
own = matplotlib.get_data_path()
font_manager.fontManager.ttflist = [e for e in font_manager.fontManager.ttflist if e.fname.startswith(own)]
font_manager.findSystemFonts = lambda *args, **kwargs: []

import numpy as np
from PIL import Image, ImageDraw
from quantgate.demo.text import cjk_font
from quantgate.pictures.fonts import choose_font, pil_face

text = "收款人：王伟 ￥12,345.00"
font = cjk_font()
image = Image.new("L", (400, 48), 255)
ImageDraw.Draw(image).text((4, 4), text, fill=0, font=pil_face(font, 32))
chosen = choose_font([text])
json.dump({"font": str(font), "face": pil_face(font, 32).getname()[0], "inked": int((np.asarray(image) < 128).sum()),
           "report_font": chosen.path}, sys.stdout)
'''


def test_without_any_system_font_the_packaged_cjk_font_renders_and_labels_chinese(tmp_path):
    empty = tmp_path / "fonts.conf"
    empty.write_text('<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig></fontconfig>\n')
    env = {**os.environ, "FONTCONFIG_FILE": str(empty), "MPLCONFIGDIR": str(tmp_path / "mpl")}
    if shutil.which("fc-list"):
        listed = subprocess.run(["fc-list"], env=env, capture_output=True, text=True, check=False).stdout
        assert listed.strip() == "", "fontconfig still lists fonts: the check would not bite"
    done = subprocess.run([sys.executable, "-c", NO_SYSTEM_FONTS], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert Path(found["font"]).is_file() and "site-packages" in found["font"], found
    assert found["face"] == "Noto Sans CJK SC", found  # the Simplified Chinese face of the collection
    assert found["inked"] > 500, found  # glyphs drawn, not empty boxes or nothing
    assert found["report_font"] == found["font"], found  # the reports' pictures draw Chinese with it too


def test_ci_installs_nothing_the_readme_does_not_say():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line.split("#")[0].strip() for line in ci.splitlines() if not line.lstrip().startswith("#")]
    installs = [line for line in commands if re.search(r"\b(apt-get|apt|pip|dnf|yum|apk|conda)\b", line)]
    assert not any("apt" in line for line in installs), installs  # no system package behind the README's back
    assert ".venv/bin/pip install -e '.[test,openvino]'" in readme
    # paddle2onnx 2.x (PIR programs) goes into a folder of its own beside 1.3.1: the README's first command says so,
    # in the words quantgate names when the folder is missing
    from quantgate.pir.converter import INSTALL_LINE

    assert f"&& {INSTALL_LINE} \\\n    && .venv/bin/quantgate run" in readme
    pips = [line for line in installs if "pip" in line]
    assert all("-e '.[test,openvino]'" in line or line.endswith(INSTALL_LINE) for line in pips), installs
    assert any(line.endswith(INSTALL_LINE) for line in pips), installs
    test_command = ".venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=25"
    assert test_command in readme and test_command in ci

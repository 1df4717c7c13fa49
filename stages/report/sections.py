"""What a task adds to the report: its markdown sections, the pictures it drew and the font it drew them with."""

from __future__ import annotations

from dataclasses import dataclass

from quantgate.pictures.fonts import FontChoice


@dataclass(frozen=True)
class TaskSections:
    lines: list[str]  # markdown, placed after the gate's table
    plots: tuple[str, ...]  # picture files written into the report's folder
    font: FontChoice
    glyphs_missing: int  # "Glyph missing" warnings matplotlib gave while drawing (kept off the terminal)
    disagreements: int  # test samples whose FP32 and INT8 predictions differ

    def font_lines(self) -> list[str]:
        return [f"Fonts: {self.font.statement(self.glyphs_missing)}"]

"""Which font draws the strings a report's pictures show: class names and text lines may be Chinese.

matplotlib's default font (DejaVu Sans) has no CJK glyphs: it draws an empty box for each and warns once
per glyph. So the report looks for a font whose character map covers every character it is about to draw:
the CJK font quantgate installs with itself first (Noto Sans CJK, from the pinned `noto-cjk-sans-otc` wheel:
a fresh machine has no CJK font, and the README's install command is all its set-up), then the machine's
known CJK families, then any other. When none does (a character no font has), the pictures draw no strings
but refer to the rows of the markdown tables, which every viewer renders in a font of its own. The report
says which of the two happened.

The same packaged font renders the demo data's Chinese text (quantgate.demo), so rendered lines are the same
on every machine, whatever fonts it has installed.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from matplotlib import font_manager
from matplotlib.font_manager import FontProperties
from matplotlib.ft2font import FT2Font
from PIL import ImageFont

# The CJK font installed with quantgate (pyproject.toml pins the wheel): a collection whose faces are the same
# design for Japanese, Korean, Simplified and Traditional Chinese; Chinese text is drawn with the SC face.
PACKAGED_FONT_MODULE, PACKAGED_FONT_FILE = "noto_cjk_sans_otc", "NotoSansCJK-Regular.ttc"
PACKAGED_FONT_INSTALL = "pip install noto-cjk-sans-otc==0.0.1"
SIMPLIFIED_CHINESE_FACES = (" SC", " GB", "Zen Hei", "Micro Hei")  # a collection's face for Simplified Chinese

# Families known to cover Chinese (and Japanese / Korean), tried before any other installed font.
CJK_FAMILIES = ("Noto Sans CJK", "Noto Serif CJK", "Source Han Sans", "Source Han Serif", "WenQuanYi",
                "Droid Sans Fallback", "AR PL", "Microsoft YaHei", "SimHei", "SimSun", "PingFang", "Hiragino")
CJK_FILE_HINTS = ("cjk", "wqy", "han", "droidsansfallback", "uming", "ukai", "yahei", "simhei", "simsun")
# Fonts whose character map covers everything with placeholder pictures of the Unicode block, not letters
# (matplotlib ships "Last Resort High-Efficiency" for its own fallback): never a font to draw strings with.
PLACEHOLDER_FAMILIES = ("Last Resort",)
GLYPH_MISSING = re.compile(r"Glyph \d+ .* missing from font")
INSTALL_HINT = ("quantgate's own CJK font (`noto-cjk-sans-otc`, installed with it) lacks some of them: install a font "
                "that has them and run the report again to draw them")


@dataclass(frozen=True)
class FontChoice:
    """The font that draws every string shown (`path`), or None and the characters no font has."""

    path: str | None
    name: str | None
    characters: int  # distinct characters the pictures would show
    missing: str = ""  # those no candidate font has, when `path` is None
    default: bool = False  # matplotlib's own default font covers them

    @property
    def draws_strings(self) -> bool:
        return self.path is not None

    def properties(self, size: float) -> FontProperties:
        """FontProperties for matplotlib's text calls: this font at `size` points (the default font without one)."""
        if self.default or self.path is None:
            return FontProperties(size=size)
        return FontProperties(fname=self.path, size=size)

    def statement_short(self) -> str:
        """A few words for a picture: why it shows no strings."""
        return "no installed font has their characters" if self.path is None else f"drawn with {self.name}"

    def statement(self, glyphs_missing: int = 0) -> str:
        """One markdown sentence for the report: which font drew the strings, or why they are not drawn."""
        if self.path is None:
            more = len(self.missing) - 8
            shown = ", ".join(self.missing[:8]) + (f" and {more} more" if more > 0 else "")
            sentence = (f"No installed font has the characters {shown}, so the pictures show row numbers instead of "
                        f"strings and the tables show the strings; {INSTALL_HINT}.")
        else:
            origin = "matplotlib's default font" if self.default else f"`{self.path}`"
            sentence = (f"Strings in the pictures are drawn with {self.name} ({origin}), which has all "
                        f"{self.characters} characters shown.")
        if glyphs_missing:  # should not happen: every character drawn was checked; say so rather than hide it
            sentence += f" matplotlib still reported {glyphs_missing} missing glyph(s): some strings may show boxes."
        return sentence


@lru_cache(maxsize=256)
def _charmap(path: str) -> frozenset[int]:
    """The code points a font file has glyphs for (the first face of a collection); none if unreadable."""
    try:
        return frozenset(FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


def _family(path: str) -> str:
    try:
        return FT2Font(path).family_name
    except (OSError, RuntimeError, ValueError):
        return path


def packaged_cjk_font() -> Path | None:
    """The CJK font file installed with quantgate, or None when its wheel is missing (a broken install)."""
    try:
        module = importlib.import_module(PACKAGED_FONT_MODULE)
    except ImportError:
        return None
    path = Path(module.__file__).parent / PACKAGED_FONT_FILE
    return path if path.is_file() else None


@lru_cache(maxsize=64)
def _face_index(path: str) -> int:
    """The face of a font collection (.ttc) that draws Simplified Chinese; 0 for a single font or none found."""
    if not path.lower().endswith((".ttc", ".otc")):
        return 0
    for index in range(32):
        try:
            family = ImageFont.truetype(path, 12, index=index).getname()[0]
        except OSError:  # past the collection's last face
            break
        if any(marker in family for marker in SIMPLIFIED_CHINESE_FACES):
            return index
    return 0


def pil_face(path: str | Path, size: int) -> ImageFont.FreeTypeFont:
    """`path` at `size` pixels for PIL's drawing, the Simplified Chinese face where the file is a collection."""
    return ImageFont.truetype(str(path), size, index=_face_index(str(path)))


def installed_fonts() -> list[str]:
    """The packaged CJK font, then the font files matplotlib knows and those installed since its font cache was
    built (it never rescans), known CJK families first, each once."""
    packaged = packaged_cjk_font()
    entries = sorted({(entry.name, entry.fname) for entry in font_manager.fontManager.ttflist})
    known = {path for _, path in entries}
    later = sorted(path for path in font_manager.findSystemFonts() if path not in known)
    cjk = [path for name, path in entries if any(name.startswith(family) for family in CJK_FAMILIES)]
    cjk += [path for path in later if any(part in Path(path).name.lower() for part in CJK_FILE_HINTS)]
    return list(dict.fromkeys(([str(packaged)] if packaged else []) + cjk + [path for _, path in entries] + later))


def needed_characters(texts: Iterable[str]) -> str:
    """The distinct characters of `texts` that need a glyph (whitespace draws without one), sorted."""
    return "".join(sorted({character for text in texts for character in str(text) if not character.isspace()}))


def choose_font(texts: Iterable[str], candidates: Sequence[str] | None = None) -> FontChoice:
    """The first font that has every character of `texts`: matplotlib's default, else one of `candidates`
    (the installed fonts when None; an empty list searches nothing beyond the default)."""
    characters = needed_characters(texts)
    wanted = {ord(character) for character in characters}
    default = font_manager.findfont(FontProperties(), fallback_to_default=True)
    if wanted <= _charmap(default):
        return FontChoice(default, _family(default), len(characters), default=True)
    for path in installed_fonts() if candidates is None else candidates:
        if wanted <= _charmap(str(path)) and not _family(str(path)).startswith(PLACEHOLDER_FAMILIES):
            return FontChoice(str(path), _family(str(path)), len(characters))
    return FontChoice(None, None, len(characters), missing="".join(c for c in characters if ord(c) not in
                                                                   _charmap(default)))


@contextmanager
def glyph_warnings_counted() -> Iterator[list[str]]:
    """Keep matplotlib's "Glyph ... missing from font" warnings off the terminal, counted in the list yielded
    (filled when the block ends) for the report to state; every other warning is passed on unchanged."""
    missing: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield missing
    for warning in caught:
        if GLYPH_MISSING.search(str(warning.message)):
            missing.append(str(warning.message))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)

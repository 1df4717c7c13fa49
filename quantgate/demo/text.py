"""Chinese financial text of the kind on invoices, cheques and bank slips, and a font to draw it with.

The demo data (`quantgate demo-pages`) and the test suite's rendered lines share these generators, so they live
in the installed package: a user's example config must work without the repository's tests/ folder.

Every string uses only characters of PaddleOCR's 6,623-character dictionary (ppocr_keys_v1.txt) plus the
space, so a PaddleOCR recognizer can read all of it and a label never measures a character it cannot output.
The forms' pieces also avoid what this font makes ambiguous to PP-OCRv4 at a page line's own width: no "："
before digits, no full-width brackets, no spaces between digit groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.errors import BadInput
from quantgate.pictures.fonts import PACKAGED_FONT_INSTALL, packaged_cjk_font

SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐"
GIVEN = ("伟", "芳", "娜", "敏", "静", "丽", "强", "磊", "军", "洋", "勇", "艳", "杰", "娟", "涛", "明", "超", "秀英",
         "建华", "志强", "海燕", "晓东", "文静", "国庆")
ROLES = ("收款人", "付款人", "经办人", "复核", "开票人", "户名")
CITIES = ("北京", "上海", "深圳", "广州", "杭州", "南京", "成都", "武汉", "苏州", "天津")
FIRMS = ("华夏", "恒通", "金盛", "中信", "远大", "新元", "宏达", "诚信", "博远", "天成")
TRADES = ("科技", "贸易", "实业", "物流", "建设", "投资", "电子", "商贸")
BANKS = ("中国工商银行", "中国建设银行", "中国农业银行", "中国银行", "招商银行", "交通银行", "兴业银行")
BRANCHES = ("分行", "支行", "营业部")
AMOUNT_LABELS = ("金额", "合计", "小写", "总计", "实收", "应付", "余额", "税额")
DIGITS_UPPER = "零壹贰叁肆伍陆柒捌玖"
UNITS_UPPER = ("", "拾", "佰", "仟")
PURPOSES = ("货款", "工资", "服务费", "租金", "差旅费", "报销", "材料款", "工程款", "咨询费", "往来款")
ITEMS = ("办公用品", "电子设备", "咨询服务", "运输服务", "打印纸", "维修费", "技术服务费", "会议费", "办公家具", "软件")
UNITS = ("个", "台", "件", "箱", "次", "项", "套", "批")


class DemoError(BadInput):
    """Demo data cannot be made as asked; the message names the setting or the missing piece and the fix."""


class NoCjkFont(DemoError):
    """No font with Chinese glyphs is installed to draw the demo text."""


def upper_amount(yuan: int) -> str:
    """An amount in financial capitals, as written on Chinese cheques and invoices: 12000 -> 壹万贰仟元整."""
    def four(value: int) -> str:
        text, zero = "", False
        for position in range(3, -1, -1):
            digit = value // 10 ** position % 10
            if digit:
                text += ("零" if zero and text else "") + DIGITS_UPPER[digit] + UNITS_UPPER[position]
            zero = digit == 0
        return text
    high, low = divmod(yuan, 10_000)
    text = (four(high) + "万" if high else "") + ("零" if high and 0 < low < 1000 else "") + four(low)
    return (text or "零") + "元整"


def financial_text(rng: np.random.Generator) -> str:
    """One line of the kind found on Chinese invoices, receipts and bank slips.

    No full-width colon before digits, one yen sign (￥): the font draws "：" as ": " and "¥" like "￥", so those
    lines are ambiguous to any reader (PP-OCRv4 reads them either way), and a test set of them measures the label
    convention instead of the model.
    """
    pick = lambda options: options[rng.integers(len(options))]  # noqa: E731
    kind = rng.integers(9)
    if kind == 0:
        amount = f"{float(np.round(np.exp(rng.uniform(0, np.log(999_999))), 2)):,.2f}"
        return pick((f"{pick(AMOUNT_LABELS)}￥{amount}", f"{pick(AMOUNT_LABELS)}{amount}元", f"{amount}元"))
    if kind == 1:
        digits = rng.integers(1, 10, size=rng.integers(1, 4))
        yuan = int(sum(int(d) * 10 ** p for d, p in zip(digits, sorted(rng.choice(6, len(digits), False))[::-1])))
        return pick(("人民币", "大写：", "")) + upper_amount(yuan)
    if kind == 2:
        year, month, day = rng.integers(2019, 2031), rng.integers(1, 13), rng.integers(1, 29)
        return pick((f"{year}年{month}月{day}日", f"日期{year}-{month:02d}-{day:02d}", f"{year}-{month:02d}-{day:02d}",
                     f"{year}年{month:02d}月"))
    if kind == 3:
        groups = [f"{6222 + rng.integers(0, 10):04d}", *(f"{g:04d}" for g in rng.integers(0, 10_000, 3))]
        return pick((f"账号 {' '.join(groups[:3])}", " ".join(groups)))
    if kind == 4:
        return f"{pick(ROLES)}：{pick(SURNAMES)}{pick(GIVEN)}"
    if kind == 5:
        return f"{pick(CITIES)}{pick(FIRMS)}{pick(TRADES)}有限公司"
    if kind == 6:
        number = "".join(str(d) for d in rng.integers(0, 10, 8))
        return pick((f"发票号码：{number}", f"No.{number}", f"发票代码{number[:6]}"))
    if kind == 7:
        return pick((f"开户行：{pick(BANKS)}", f"{pick(BANKS)}{pick(CITIES)}{pick(BRANCHES)}"))
    return pick((f"数量{rng.integers(1, 500)}", f"税率{pick((3, 6, 9, 13))}%", f"单价{rng.integers(1, 999)}.00元"))


# ---- the pieces of a form: each draws from `rng`, so a page is the same for the same seed -------------------------

def pick(rng: np.random.Generator, options):
    """One of `options`, uniformly."""
    return options[rng.integers(len(options))]


def person(rng: np.random.Generator) -> str:
    return f"{pick(rng, SURNAMES)}{pick(rng, GIVEN)}"


def firm(rng: np.random.Generator) -> str:
    return f"{pick(rng, CITIES)}{pick(rng, FIRMS)}{pick(rng, TRADES)}有限公司"


def bank_branch(rng: np.random.Generator) -> str:
    return f"{pick(rng, BANKS)}{pick(rng, CITIES)}{pick(rng, BRANCHES)}"


def date(rng: np.random.Generator) -> str:
    year, month, day = rng.integers(2019, 2031), rng.integers(1, 13), rng.integers(1, 29)
    return pick(rng, (f"{year}年{month}月{day}日", f"{year}年{month:02d}月{day:02d}日", f"{year}-{month:02d}-{day:02d}"))


def account(rng: np.random.Generator) -> str:
    """A bank card number as a form prints it, 16 or 19 digits in one run.

    Without the spaces some cards print between groups of four: the font's space is a third of a character
    wide, and PP-OCRv4 reading a page line at its own width drops most of them, so a spaced label would measure
    the spacing convention instead of the model (`financial_text`'s short lines keep theirs).
    """
    return f"{6222 + rng.integers(0, 10):04d}{digits(rng, int(pick(rng, (12, 15))))}"


def digits(rng: np.random.Generator, count: int) -> str:
    return "".join(str(d) for d in rng.integers(0, 10, count))


def yuan(rng: np.random.Generator) -> int:
    """A whole amount from 10 to ~10 million yuan, log-uniform: small and large sums alike."""
    return int(np.exp(rng.uniform(np.log(10), np.log(9_999_999))))


def money(amount: int) -> str:
    """`amount` as written in figures after the yen sign: 12345 -> ￥12,345.00."""
    return f"￥{amount:,}.00"


def cjk_font() -> Path:
    """The font Chinese text is rendered with: Noto Sans CJK (its Simplified Chinese face), installed with quantgate
    from a pinned wheel, so rendered lines and pages are the same on every machine whatever fonts it has.

    Raises:
        NoCjkFont: the packaged font is missing (an install without quantgate's dependencies).
    """
    packaged = packaged_cjk_font()
    if packaged is None:
        raise NoCjkFont(f"quantgate's CJK font is not installed, so Chinese text cannot be rendered: "
                        f"{PACKAGED_FONT_INSTALL} (the README's install command includes it), or pass a .ttf/.ttc "
                        f"file with --font")
    return packaged


# ---- forms: what a cheque, an invoice and a bank slip say, row by row (pages.py draws them) ----------------------

@dataclass(frozen=True)
class Cell:
    """A label and its value on a form, drawn as one line ("收款人：王伟") or, `apart`, as two ("收款人"  "王伟")."""

    label: str
    value: str = ""
    apart: bool = False

    @property
    def line(self) -> str:
        # A colon only before Chinese: the font draws "：" as ": ", which before digits reads either way. (No
        # full-width brackets in any label, for the same reason: "（大写）" reads as " (大写)".)
        colon = "：" if self.value and "\u4e00" <= self.value[0] <= "\u9fff" else ""
        return f"{self.label}{colon}{self.value}"

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.label, self.value) if self.apart and self.value else (self.line,)


@dataclass(frozen=True)
class Table:
    """A grid: a header row, then rows of the same number of cells, one text line per cell."""

    rows: tuple[tuple[str, ...], ...]

    @property
    def columns(self) -> int:
        return len(self.rows[0])

    def first(self, count: int) -> Table | None:
        """The header and rows up to `count` rows in all, or None when that leaves no row under the header."""
        return Table(self.rows[:count]) if count >= 2 else None


Row = list[Cell] | Table


def _cells(rng: np.random.Generator, *pairs: tuple[str, str]) -> list[Cell]:
    """One form row; each label is drawn apart from its value on about half the rows, as printed forms do."""
    return [Cell(label, value, bool(rng.random() < 0.5)) for label, value in pairs]


def cheque(rng: np.random.Generator) -> tuple[str, list[Row]]:
    """A bank cheque (支票): its title and rows."""
    amount = yuan(rng)
    title = f"{pick(rng, BANKS)}{pick(rng, ('转账支票', '现金支票'))}"
    return title, [
        _cells(rng, ("出票日期", date(rng)), ("付款行名称", bank_branch(rng))),
        _cells(rng, ("收款人", pick(rng, (firm(rng), person(rng)))), ("出票人账号", account(rng))),
        _cells(rng, (pick(rng, ("人民币", "大写金额")), upper_amount(amount))),
        _cells(rng, ("小写", money(amount))),
        _cells(rng, ("用途", pick(rng, PURPOSES)), ("密码", digits(rng, 16))),
        [Cell(pick(rng, ("上列款项请从我账户内支付", "出票人签章", "本支票付款期限十天")))],
        _cells(rng, ("复核", person(rng)), ("记账", person(rng))),
    ]


def invoice(rng: np.random.Generator) -> tuple[str, list[Row]]:
    """A VAT invoice (发票): its title and rows, with a table of items (name, count, price, amount, tax rate, tax; the
    name and amount always shown) and their total in words and figures."""
    title = f"{pick(rng, CITIES)}{pick(rng, ('增值税普通发票', '增值税专用发票', '增值税电子普通发票'))}"
    rate = int(pick(rng, (3, 6, 9, 13)))
    items = []
    for _ in range(int(rng.integers(1, 4))):
        count, price = int(rng.integers(1, 200)), int(rng.integers(5, 5000))
        items.append((pick(rng, ITEMS), f"{count}{pick(rng, UNITS)}", f"{price}.00", count * price,
                      round(count * price * rate / 100)))
    header = ("项目名称", "数量", "单价", "金额", "税率", "税额")
    keep = sorted({0, 3, *rng.choice([1, 2, 4, 5], int(rng.integers(1, 3)), replace=False).tolist()})
    rows = [tuple(header[k] for k in keep)] + [
        tuple((name, count, price, f"{amount:,}.00", f"{rate}%", f"{tax:,}.00")[k] for k in keep)
        for name, count, price, amount, tax in items]
    total = sum(amount + tax for *_, amount, tax in items)
    return title, [
        _cells(rng, ("发票代码", digits(rng, 12)), ("发票号码", digits(rng, 8))),
        _cells(rng, ("开票日期", date(rng)), ("校验码", digits(rng, 20))),
        *([_cells(rng, ("购买方名称", firm(rng)))] if rng.random() < 0.5 else []),
        *([_cells(rng, ("纳税人识别号", f"91{digits(rng, 6)}{pick(rng, ('MA', 'QX', 'LH'))}{digits(rng, 8)}"))]
          if rng.random() < 0.3 else []),
        Table(tuple(rows)),
        _cells(rng, ("价税合计", upper_amount(total)), ("小写", money(total))),
        _cells(rng, ("销售方名称", firm(rng))),
        _cells(rng, ("收款人", person(rng)), ("复核", person(rng)), ("开票人", person(rng))),
    ]


def bank_slip(rng: np.random.Generator) -> tuple[str, list[Row]]:
    """A bank slip (进账单 or 回单): its title and rows, the payer and payee as a table or as label/value rows."""
    amount = yuan(rng)
    title = f"{pick(rng, BANKS)}{pick(rng, ('进账单', '电子回单', '业务回单', '转账回单'))}"
    parties = [(firm(rng), account(rng), bank_branch(rng)) for _ in range(2)]
    if rng.random() < 0.5:
        middle: list[Row] = [Table((("户名", "账号", "开户行"), *parties))]
    else:
        middle = [_cells(rng, (f"{who}全称", name)) for who, (name, _, _) in zip(("付款人", "收款人"), parties)]
        middle.insert(1, _cells(rng, ("付款人账号", parties[0][1])))
    return title, [
        _cells(rng, ("交易日期", date(rng)), ("回单编号", digits(rng, 12))),
        *middle,
        _cells(rng, ("金额", money(amount)), ("大写", upper_amount(amount))),
        _cells(rng, ("摘要", pick(rng, PURPOSES)), ("交易流水号", digits(rng, 16))),
        _cells(rng, ("经办人", person(rng))),
    ]

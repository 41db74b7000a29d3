"""Final-answer extraction and normalisation for the math suites (GSM8K, MATH-500, AIME).

Why normalise: a model may write ``\\dfrac{1}{2}``, ``1/2`` or ``0.5`` for the reference ``\\frac{1}{2}``,
and ``90^\\circ`` or ``5\\text{ cm}`` where the reference drops degrees or units. Both sides go through
the same `normalize_math_answer` (after Hendrycks et al.'s MATH ``is_equiv`` and Minerva's
``normalize_final_answer``), then compare as strings, then as exact rational numbers when both parse.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_TEXT_COMMANDS = r"\\(?:text|textbf|textrm|mbox|mathrm|mathbf)"
# A trailing unit written in words after a number, e.g. "5 cm", "12 inches^2", "3\text{ dollars}".
_TRAILING_UNIT = re.compile(
    rf"(?<=[\d}}])\s*(?:{_TEXT_COMMANDS}\{{\s*[A-Za-z][A-Za-z ]*\}}|\s[A-Za-z]{{2,}}(?: [A-Za-z]+)*)(?:\^\{{?[23]\}}?)?$"
)
_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?|-?\$?\.\d+")
_LATEX_FRACTION = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}$")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``), braces balanced."""
    starts = [(text.rfind(cmd), cmd) for cmd in _BOX_COMMANDS]
    start, cmd = max(starts)
    if start < 0:
        return None
    i = start + len(cmd)
    if text.startswith(" ", i):  # "\boxed 5": the answer runs to the next space or dollar sign
        match = re.match(r"\s*([^\s$]+)", text[i:])
        return match.group(1) if match else None
    if not text.startswith("{", i):
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def _fix_fracs(s: str) -> str:
    r"""Brace single-character arguments: ``\frac12`` -> ``\frac{1}{2}``, ``\frac1{72}`` -> ``\frac{1}{72}``."""
    s = re.sub(r"\\frac([^{\\])", r"\\frac{\1}", s)
    return re.sub(r"(\\frac\{[^{}]*\})([^{\\])", r"\1{\2}", s)


def normalize_math_answer(answer: str) -> str:
    """A canonical string for a final answer; equal strings mean equal answers."""
    s = answer.strip()
    for old, new in (("\n", ""), ("\\!", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac")):
        s = s.replace(old, new)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree", "", s)  # degrees
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"(?<!\\)\\[,;: ]|~", " ", s)  # LaTeX spacing commands, not the row break \\
    s = s.strip().rstrip(".").strip()
    s = _TRAILING_UNIT.sub("", s)
    s = re.sub(rf"{_TEXT_COMMANDS}\{{([^{{}}]*)\}}", r"\1", s)  # \text{(C)} -> (C)
    if s.count("=") == 1 and re.match(r"^\s*[A-Za-z]\w{0,2}\s*=", s):  # "x = 5" -> "5"
        s = s.split("=", 1)[1]
    s = s.replace(" ", "")
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    s = _fix_fracs(s)
    if re.fullmatch(r"-?\d+/\d+", s):  # 1/2 -> \frac{1}{2}
        sign, (num, den) = ("-", s[1:].split("/")) if s.startswith("-") else ("", s.split("/"))
        s = f"{sign}\\frac{{{num}}}{{{den}}}"
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s) or "{,}" in s:  # thousands separators
        s = s.replace("{,}", "").replace(",", "")
    s = re.sub(r"^(-?)\.(\d)", r"\g<1>0.\2", s)  # .5 -> 0.5
    s = re.sub(r"^(-?\d+)\.0*$", r"\1", s)  # 5.0 -> 5
    match = re.fullmatch(r"\(([A-Za-z])\)", s)  # (C) -> C
    return match.group(1) if match else s


def to_fraction(s: str) -> Fraction | None:
    """An exact value for a normalised integer, decimal or ``\\frac{a}{b}``; None otherwise."""
    match = _LATEX_FRACTION.match(s)
    try:
        if match:
            sign, num, den = match.groups()
            value = Fraction(int(num), int(den))
            return -value if sign else value
        if re.fullmatch(r"-?\d+(?:\.\d+)?", s):
            return Fraction(s)
    except ZeroDivisionError:
        return None
    return None


def math_answers_equal(predicted: str, reference: str) -> bool:
    """Equal after normalisation, or equal as exact numbers (``0.5`` = ``\\frac{1}{2}``)."""
    pred, ref = normalize_math_answer(predicted), normalize_math_answer(reference)
    if pred == ref:
        return True
    pred_value, ref_value = to_fraction(pred), to_fraction(ref)
    return pred_value is not None and pred_value == ref_value


def _plain_number(text: str) -> str | None:
    """The last number written in ``text`` without ``$`` or thousands commas ("$1,000.50" -> "1000.50")."""
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None
    number = numbers[-1].replace("$", "").replace(",", "").rstrip(".")
    return number if re.fullmatch(r"-?(?:\d+(?:\.\d*)?|\.\d+)", number) else None


def extract_number_answer(text: str) -> str | None:
    """A completion's final number: in its last ``\\boxed{}``, after ``####``, after "answer is", or last."""
    for candidate in (last_boxed(text), text.rpartition("####")[2] if "####" in text else None):
        if candidate is not None and (number := _plain_number(candidate)) is not None:
            return number
    stated = re.findall(r"answer is\s*:?\s*([^\n]*)", text, flags=re.IGNORECASE)
    if stated and (number := _plain_number(stated[-1])) is not None:
        return number
    return _plain_number(text)


def numbers_equal(predicted: str | None, reference: str) -> bool:
    """Exact numeric equality of two plain numbers ("18.00" = "18"); None never matches."""
    if predicted is None:
        return False
    try:
        return Fraction(predicted) == Fraction(reference)
    except (ValueError, ZeroDivisionError):
        return False


def extract_integer_answer(text: str) -> int | None:
    """An AIME answer: the integer in the last ``\\boxed{}`` (else the last integer), 0-999, else None."""
    boxed = last_boxed(text)
    candidate = normalize_math_answer(boxed) if boxed is not None else _plain_number(text)
    if candidate is None or not re.fullmatch(r"\d+", candidate):
        return None
    value = int(candidate)
    return value if 0 <= value <= 999 else None

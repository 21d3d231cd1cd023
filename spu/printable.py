r"""Text an agent chose, made safe to print on an operator's terminal.

The texts ``spu show`` and ``spu compare`` print, the monitor's events and every console
line of a sweep can carry what an agent wrote: its messages and tool output, group ids
and items of its ``rankings.json``, names of files it made, the error lines of its CLI.
A terminal obeys the control characters in them: ``ESC [2J`` clears the screen,
``ESC ]0;`` sets the window title, ``ESC ]52;`` writes the clipboard, ``ESC ]8;`` prints
a link whose target is hidden, a carriage return or a backspace writes over a line with
a forged one; Unicode's bidirectional controls reorder what is shown. :func:`printable`
writes each such character as an escape (``\x1b``), so the operator reads what the agent
wrote and the terminal acts on none of it; :func:`printable_markup` does the same for
text printed through rich, whose markup (``[link=...]``, ``[2J`` styles) it escapes too.

Examples
--------
>>> printable("done\x1b[2J\x1b]0;pwned\x07 \x9b31m ok\r\nnext\tcol")
'done\\x1b[2J\\x1b]0;pwned\\x07 \\x9b31m ok\\x0d\nnext\tcol'
>>> printable("a\nb\tc", newlines=False)
'a\\x0ab\\x09c'
>>> printable_markup("[link=http://x]click[/link] \x1b]52;c;cm0gLXJmIH4=\x07")
'\\[link=http://x]click\\[/link] \\x1b]52;c;cm0gLXJmIH4=\\x07'
"""

from __future__ import annotations

import re

_CONTROLS = ("\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 but tab and newline, DEL, C1
             "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional controls
             "\u2028\u2029"  # line and paragraph separators
             "\ud800-\udfff")  # lone surrogates: print() cannot encode them
_UNPRINTABLE = re.compile(f"[{_CONTROLS}]")
_UNPRINTABLE_LINE = re.compile(f"[{_CONTROLS}\t\n]")


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = True) -> str:
    r"""``text`` with every control character written as an escape (``\x1b``, ``\u202e``).

    Args:
        text: text an agent may have chosen.
        newlines: keep newlines and tabs as they are (False: escape them too, for a
            text that must stay on one line).
    """
    return (_UNPRINTABLE if newlines else _UNPRINTABLE_LINE).sub(_escaped, text)


def printable_markup(text: str, *, newlines: bool = True) -> str:
    """:func:`printable`, then rich's markup escaped: for text printed through rich."""
    from rich.markup import escape

    return escape(printable(text, newlines=newlines))

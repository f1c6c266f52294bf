"""One escaping rule per output, applied by the renderers (and the CLI's one-line messages) to
every string they print, so no presenter has to remember which words came from an input: a
model folder's name, a GGUF's general.name, a GPU profile's name, a link's name, a file's
contents quoted in an error.

- a terminal, the plain table, standard error: `terminal_text` (control characters shown as
  escapes, `\\x1b`, `\\u202e`, never sent raw: no ESC/CSI/OSC sequence clears a screen or sets a
  window title, no bidi override reorders a line);
- Markdown: `md_text` (the terminal rule, then every character that could start HTML, a link,
  emphasis or a table cell backslash-escaped);
- CSV: `csv_cell` (the terminal rule, then a text cell a spreadsheet would read as a formula
  gets a leading quote; numbers, negative ones included, stay numbers);
- a shell command (`kvplan capacity --emit`): `shell_word` (shlex's quoting; a word holding a
  control character is written in bash's $'...' form with the character as an escape);
- a YAML scalar (the Kubernetes manifest): `yaml_string` (double-quoted, controls as escapes);
- JSON is data: `json.dumps` writes control characters as \\u escapes already; HTML (the
  explorer page) escapes with `html.escape` where it builds the page.
"""

# C0 controls, DEL and C1 controls; the line and paragraph separators; every format character
# (Unicode category Cf, as of Unicode 15: the soft hyphen, the zero-width and direction marks,
# the bidi embeddings, overrides and isolates, the Arabic letter mark, the byte order mark, the
# interlinear annotation marks, the tag characters...), which a terminal or a Markdown viewer
# draws as nothing or obeys; and lone surrogates (category Cs: a JSON "\\ud800", which no UTF-8
# stream can write). Each is replaced by its escape (a table for str.translate, nothing compiled
# at start-up). Tab and newline are escaped too: every string a renderer takes is one line.
_RANGES = (
    (0x00, 0x1F),
    (0x7F, 0x9F),
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xD800, 0xDFFF),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)
_ESCAPES = {
    code: f"\\x{code:02x}"
    if code < 0x100
    else f"\\u{code:04x}"
    if code < 0x10000
    else f"\\U{code:08x}"
    for low, high in _RANGES
    for code in range(low, high + 1)
}


def terminal_text(text: object) -> str:
    """`text` with every control character shown as its escape (`\\x1b`, `\\n`'s `\\x0a`,
    `\\u202e`): what a terminal, a pipe or standard error may get."""
    text = str(text)
    if text.isascii() and text.isprintable():  # the usual case: nothing to look up
        return text
    return text.translate(_ESCAPES)


def error_line(message: object) -> str:
    """The CLI's one-line error: `error: ` and the message, escaped for a terminal (error
    messages quote file names and file contents)."""
    return f"error: {terminal_text(message)}"


def _has_control(text: str) -> bool:
    return not (text.isascii() and text.isprintable()) and text.translate(_ESCAPES) != text


# ---- shell and YAML (the launch commands and manifests) ----------------------------------------
def shell_word(text: object) -> str:
    """One shell word that means `text`: shlex.quote's form, or, when `text` holds a control
    character (which a terminal would obey on display and a paste would mangle), bash's $'...'
    with every control character (as its UTF-8 bytes), backslash and quote escaped."""
    import shlex  # only the launch commands quote for a shell (start-up)

    text = str(text)
    if not _has_control(text):
        return shlex.quote(text)
    text = text.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + "".join(_shell_escape(ch) for ch in text) + "'"


def _shell_escape(ch: str) -> str:
    """A control character as $'...' escapes of its UTF-8 bytes (as bash reads them in any
    locale; its \\u form depends on the locale); any other character as it is."""
    if ord(ch) not in _ESCAPES:
        return ch
    if 0xD800 <= ord(ch) <= 0xDFFF:  # a lone surrogate has no UTF-8 bytes: its escape as text
        return "\\" + _ESCAPES[ord(ch)]
    return "".join(f"\\x{byte:02x}" for byte in ch.encode("utf-8"))


def yaml_string(text: object) -> str:
    """A YAML double-quoted scalar meaning `text`: backslash and quote escaped, control
    characters as YAML's \\xNN and \\uNNNN escapes."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.translate(_ESCAPES) + '"'


# ---- Markdown ----------------------------------------------------------------------------------
# Backslash-escaped in text (CommonMark escapes any ASCII punctuation this way): HTML tags and
# entities (< > &), links and images ([ ]), code spans (`), emphasis (* _ ~), table cells (|),
# maths ($, pandoc), and the backslash itself.
MARKDOWN_SPECIAL = "\\`*_[]<>&|~$"
_MARKDOWN = {ord(ch): "\\" + ch for ch in MARKDOWN_SPECIAL}


def md_text(text: object) -> str:
    """Plain words as Markdown text: control characters shown as escapes (one line: a table
    row stays one row), then the characters Markdown (CommonMark, GitHub, pandoc) would read as
    markup escaped, so `4*L*d*n` stays four letters, `a | b` stays in its table cell and
    `<img src=x onerror=...>` stays text."""
    return terminal_text(text).translate(_MARKDOWN)


def md_link_target(path: object) -> str:
    """A file name as a Markdown link destination: percent-encoded, so no `)`, `<` or space in
    the name can end the link or start HTML."""
    from urllib.parse import quote  # only `kvplan report` links files (start-up)

    return quote(str(path), safe="/")


# ---- CSV ---------------------------------------------------------------------------------------
FORMULA_START = "=+-@"  # what spreadsheets read as the start of a formula (OWASP); tab and CR
# are escaped by the terminal rule before this test


def _plain_number(text: str) -> bool:
    """A decimal number as kvplan writes one ("-12.5", "1e+12"): a spreadsheet reads it as that
    number, not as a formula."""
    import re  # only for a text cell that starts like a formula

    return re.fullmatch(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", text) is not None


def csv_cell(value: object) -> object:
    """A CSV field: numbers as they are; text with control characters escaped and, when it would
    start a formula (=, +, -, @, after any spaces) and is not a plain number, a leading `'`
    (OWASP's CSV-injection rule), so a spreadsheet shows it as text."""
    if not isinstance(value, str):
        return value
    text = terminal_text(value)
    first = text.lstrip(" ")[:1]
    if first and first in FORMULA_START and not _plain_number(text.strip(" ")):
        return "'" + text
    return text

"""How pygpu objects show themselves: compile errors in the user's own line
numbers, binaries as a summary, as text (repr, IPython's pretty printer) and
as HTML (Jupyter).  No GPU, no driver: everything here is plain Python.

SourceModule compiles ``extern "C" {\\n#line 1\\n`` + the user's source +
``\\n}\\n``, so NVRTC's log already numbers the user's lines; a CompileError
holds the user's own source.  For a log and source of another origin (the
wrapper still on the source, NVRTC's numbers one off), offset=None maps
them back, so line 1 is the user's first line and the wrapper's lines are
never shown.
"""

import html
import re

__all__ = [
    "format_compile_error",
    "compile_error_html",
    "compile_error_text",
    "parse_log",
    "user_source",
    "binary_summary",
    "binary_html",
]

WRAP_PREFIX = 'extern "C" {\n'
WRAP_SUFFIX = '\n}\n'


def user_source(source):
    """(the user's source, lines added before it) for a source NVRTC
    compiled: SourceModule's extern "C" wrapper is taken off."""
    if (
        source.startswith(WRAP_PREFIX)
        and source.endswith(WRAP_SUFFIX)
        and len(source) >= len(WRAP_PREFIX) + len(WRAP_SUFFIX)
    ):
        return source[len(WRAP_PREFIX) : -len(WRAP_SUFFIX)], 1
    return source, 0


def _mapper(source, name, offset=None):
    if offset is None:
        text, offset = user_source(source)
    else:
        text = source
    nlines = max(1, len(text.splitlines()))

    def user_line(n):
        return min(max(1, n - offset), nlines)

    pat = re.compile(r"(?m)^%s\((\d+)\)" % re.escape(name))
    return text, user_line, pat


def parse_log(log, source, name="kernel.cu", offset=None):
    """[(user line, 'error'|'warning'|..., message)] from NVRTC's log,
    for the diagnostics in the compiled file itself (headers' are kept in
    the log text).  offset: the lines before the user's first in the log's
    numbering (None: 1 when source has SourceModule's wrapper on)."""
    text, user_line, _ = _mapper(source, name, offset)
    out = []
    for m in re.finditer(
        r"(?m)^%s\((\d+)\): (catastrophic error|error|warning|remark)"
        r"(?: #\S+-D)?: (.*)$" % re.escape(name),
        log,
    ):
        out.append((user_line(int(m.group(1))), m.group(2), m.group(3).strip()))
    return out


def map_log(log, source, name="kernel.cu", offset=None):
    """NVRTC's log with the compiled file's line numbers in the user's."""
    text, user_line, pat = _mapper(source, name, offset)
    return pat.sub(lambda m: "%s(%d)" % (name, user_line(int(m.group(1)))), log)


def format_compile_error(log, source, name="kernel.cu", offset=None, compiler="NVRTC"):
    """The message of a CompileError: NVRTC's log, then each failing line of
    the user's source with its number and two lines around it."""
    text, _, _ = _mapper(source, name, offset)
    lines = text.splitlines()
    shown = []
    for n, kind, _msg in parse_log(log, source, name, offset):
        if kind in ("error", "catastrophic error") and n not in shown:
            shown.append(n)
    parts = ["%s compilation failed:" % compiler, map_log(log, source, name, offset).strip()]
    for n in shown[:10]:
        lo, hi = max(1, n - 2), min(len(lines), n + 2)
        parts.append("")
        for i in range(lo, hi + 1):
            parts.append("%s%5d | %s" % ("->" if i == n else "  ", i, lines[i - 1]))
    return "\n".join(parts)


def compile_error_text(err):
    """Plain text for a CompileError (its message)."""
    return str(err)


def compile_error_html(err, name="kernel.cu"):
    """HTML for a CompileError: the user's source with the failing lines
    marked and NVRTC's messages under them, then the full log."""
    log = getattr(err, "log", "") or ""
    source = getattr(err, "source", "") or ""
    # pygpu's CompileError: the user's source, the log in its numbers
    offset = 0 if getattr(err, "command_line", None) is not None else None
    text = source if offset == 0 else user_source(source)[0]
    diags = {}
    for n, kind, msg in parse_log(log, source, name, offset):
        diags.setdefault(n, []).append((kind, msg))
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        bad = any(k != "warning" for k, _ in diags.get(i, ()))
        style = (
            ' style="background:#fdd"'
            if bad
            else (' style="background:#ffd"' if i in diags else "")
        )
        rows.append(
            '<tr%s><td style="text-align:right;color:#888;padding-right:1em">%d</td>'
            '<td><code>%s</code></td></tr>' % (style, i, html.escape(line) or "&nbsp;")
        )
        for kind, msg in diags.get(i, ()):
            rows.append(
                '<tr><td></td><td style="color:%s"><b>%s</b>: %s</td></tr>'
                % ("#a00" if kind != "warning" else "#850", html.escape(kind), html.escape(msg))
            )
    return (
        '<div class="pygpu-compile-error"><b>CompileError</b>: NVRTC rejected the '
        'source (%d error(s))<table style="font-family:monospace">%s</table>'
        '<details><summary>NVRTC log</summary><pre>%s</pre></details></div>'
        % (
            sum(1 for v in diags.values() for k, _ in v if k != "warning"),
            "".join(rows),
            html.escape(map_log(log, source, name, offset)),
        )
    )


def _size(n):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def binary_summary(b):
    """One line for a compiled Binary: target, arch, size, digest, names."""
    import hashlib

    digest = hashlib.sha256(bytes(b)).hexdigest()[:12]
    names = getattr(b, "lowered_names", {}) or {}
    log = (getattr(b, "log", "") or "").strip()
    return "<pygpu Binary: %s for %s, %s, sha256 %s%s%s>" % (
        getattr(b, "target", "") or "?",
        getattr(b, "arch", "") or "?",
        _size(len(b)),
        digest,
        ", names: " + ", ".join("%s -> %s" % kv for kv in sorted(names.items())) if names else "",
        ", log: %d line(s)" % len(log.splitlines()) if log else "",
    )


def binary_html(b):
    return "<code>%s</code>" % html.escape(binary_summary(b))

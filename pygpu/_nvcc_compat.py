"""What nvcc does to a kernel that NVRTC does not, done for NVRTC.

Two things, both for SourceModule (PyCUDA's API, whose kernels were written
for nvcc) and for compile(..., nvcc_compat=True):

- prelude(): the names nvcc's host headers give every kernel without an
  #include (uint, u_int, int32_t, INT_MAX, M_PI, std::sqrt, ...), as one
  flat text built from kernels/libc/pygpu_nvcc.h.  It is put ahead of the
  source, followed by ``#line 1``, so the user's line numbers are kept.  Being
  text in the source, it is part of the cache key like the source itself.
- gnu_attributes(text): nvcc's front end reads the source as GCC does, where
  an attribute written after a struct's closing brace
  (``typedef struct s_ {...} __align__(32) s;``, ``} __attribute__((packed));``)
  belongs to the struct.  NVRTC's front end gives it to the typedef name, or
  to nothing (the struct keeps its natural size and alignment: sizeof 16
  where nvcc and NumPy say 32).  The attributes found there are moved to
  GCC's other place for them, right after the struct keyword, which means
  the same to GCC and to NVRTC.  Line numbers do not change.

Plain Python, no GPU and no NVRTC needed.
"""

import os
import re
import threading

from pygpu import _loader

__all__ = ["prelude", "gnu_attributes", "PRELUDE_HEADER", "ATTRIBUTES_VERSION"]

PRELUDE_HEADER = "pygpu_nvcc.h"
# in the cache key of every nvcc_compat compile: change it when
# gnu_attributes() changes what it makes of a source
ATTRIBUTES_VERSION = "gnu-attributes-1"

_lock = threading.Lock()
_prelude = None

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*<([^>\n]+)>[ \t]*$', re.M)
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")


def _flatten(name, folder, seen):
    path = os.path.join(folder, name)
    if name in seen or not os.path.isfile(path):
        return ""
    seen.add(name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = _BLOCK_COMMENT.sub(" ", text)
    text = _LINE_COMMENT.sub("", text)
    text = text.replace("\\\n", " ")
    return _INCLUDE.sub(lambda m: _flatten(m.group(1), folder, seen), text)


def prelude():
    """The text put ahead of a source compiled as nvcc would: the names its
    host headers give implicitly, then ``#line 1`` (so NVRTC counts the
    user's lines from 1 again).  Built once a process."""
    global _prelude
    if _prelude is None:
        with _lock:
            if _prelude is None:
                text = _flatten(PRELUDE_HEADER, _loader.libc_shim_dir(), set())
                lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
                _prelude = "\n".join(lines) + "\n#line 1\n"
    return _prelude


# ---- attributes after a closing brace ----

_TOKEN = re.compile(
    r'''
    (?P<pp>^[ \t]*\#(?:[^\n\\]|\\.|\\\n)*)
  | (?P<ws>\n|[ \t\f\v\r]+)
  | (?P<lc>//[^\n]*)
  | (?P<bc>/\*.*?(?:\*/|\Z))
  | (?P<str>(?:u8|[uUL])?"(?:[^"\\\n]|\\.)*(?:"|(?=\n)|\Z))
  | (?P<chr>(?:u8|[uUL])?'(?:[^'\\\n]|\\.)*(?:'|(?=\n)|\Z))
  | (?P<id>[A-Za-z_$][A-Za-z_0-9$]*)
  | (?P<op>.)
''',
    re.S | re.X | re.M,
)
_DEFINE = re.compile(r'#\s*define\s+([A-Za-z_]\w*)(\([^)]*\))?\s*(.*)', re.S)
_ATTRIBUTE_WORDS = ("__attribute__", "__align__", "__builtin_align__")
_QUICK_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)
_QUICK_AFTER_BRACE = re.compile(r"\}(?:\s|/\*.*?\*/|//[^\n]*\n)*([A-Za-z_]\w*)", re.S)
_CLASS_KEYS = ("struct", "union", "class", "enum")


def _tokens(text):
    """[(kind, text, start, end)] of the code (comments and whitespace
    dropped; a preprocessor line is one 'pp' token)."""
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "lc", "bc"):
            continue
        out.append((kind, m.group(), m.start(), m.end()))
    return out


def _attribute_macros(toks):
    """Names that stand for an attribute: GCC's and CUDA's own spellings
    and the macros of this source whose body starts with one of them
    (reikna's ``#define ALIGN(bytes) __align__(bytes)``).  {name: whether
    it takes arguments}."""
    names = {"__attribute__": True, "__align__": True, "__builtin_align__": True}
    defines = []
    for kind, text, _, _ in toks:
        if kind == "pp":
            m = _DEFINE.match(text.strip())
            if m:
                body = re.match(r"\s*([A-Za-z_]\w*)", m.group(3).replace("\\\n", " "))
                if body:
                    defines.append((m.group(1), m.group(2) is not None, body.group(1)))
    changed = True
    while changed:
        changed = False
        for name, takes_args, first in defines:
            if first in names and name not in names:
                names[name] = takes_args
                changed = True
    return names


def _skip_parens(toks, i):
    """The index after the balanced (...) starting at toks[i], or None."""
    if i >= len(toks) or toks[i][1] != "(":
        return None
    depth = 0
    while i < len(toks):
        t = toks[i][1]
        if toks[i][0] == "op":
            if t == "(":
                depth += 1
            elif t == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            elif t in ";{}":
                return None
        i += 1
    return None


def _attribute_run(toks, i, attrs):
    """(index after the attributes starting at toks[i], [(start, end)] of
    each), or (i, []) when none starts there."""
    spans = []
    while i < len(toks) and toks[i][0] == "id" and toks[i][1] in attrs:
        if attrs[toks[i][1]]:
            j = _skip_parens(toks, i + 1)
            if j is None:
                break
        else:
            j = i + 1
        spans.append((toks[i][2], toks[j - 1][3]))
        i = j
    return i, spans


def _class_key_before(toks, i, attrs):
    """For the '{' at toks[i]: the index of the struct/union/class/enum
    keyword of the class head it opens (``struct [attrs] [tag] {``), or
    None when it opens something else."""
    j = i - 1
    if j >= 0 and toks[j][0] == "id" and toks[j][1] not in _CLASS_KEYS and toks[j][1] not in attrs:
        j -= 1  # the tag
    # attributes between the key and the tag: skip back over NAME(...) runs
    while j >= 0:
        if toks[j][0] == "id" and toks[j][1] in _CLASS_KEYS:
            return j
        if toks[j][1] == ")":
            depth = 0
            while j >= 0:
                if toks[j][1] == ")":
                    depth += 1
                elif toks[j][1] == "(":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            j -= 1
            if j >= 0 and toks[j][0] == "id" and toks[j][1] in attrs:
                j -= 1
                continue
            return None
        if toks[j][0] == "id" and toks[j][1] in attrs and not attrs[toks[j][1]]:
            j -= 1
            continue
        return None
    return None


def gnu_attributes(text):
    """text with every attribute written after a struct/union/class/enum
    body's closing brace moved to right after its keyword (GCC's two places
    for a type attribute; NVRTC honours only the second).  Line numbers are
    kept: the attribute's old place is blanked, newlines kept.  Sources with
    no such attribute come back unchanged (the same object)."""
    if "}" not in text or not any(w in text for w in _ATTRIBUTE_WORDS):
        return text
    # quick look first: a '}' followed by an attribute or a macro that may
    # be one; most sources have none and are not tokenized
    names = set(_ATTRIBUTE_WORDS)
    for m in _QUICK_DEFINE.finditer(text):
        names.add(m.group(1))
    if not any(m.group(1) in names for m in _QUICK_AFTER_BRACE.finditer(text)):
        return text
    toks = _tokens(text)
    attrs = _attribute_macros(toks)
    stack = []  # for each open '{': the class key's index or None
    edits = []  # (position, removed end or None, inserted text)
    for i, (kind, t, start, end) in enumerate(toks):
        if kind != "op":
            continue
        if t == "{":
            stack.append(_class_key_before(toks, i, attrs))
        elif t == "}" and stack:
            key = stack.pop()
            if key is None:
                continue
            j, spans = _attribute_run(toks, i + 1, attrs)
            if not spans or j >= len(toks):
                continue
            nxt = toks[j]
            if not (nxt[0] == "id" or nxt[1] in (";", "*", "&", ",")):
                continue
            moved = " ".join(" ".join(text[a:b].split()) for a, b in spans)
            a, b = spans[0][0], spans[-1][1]
            edits.append((a, b, None))
            edits.append((toks[key][3], None, " " + moved))
    if not edits:
        return text
    out = []
    pos = 0
    for at, stop, insert in sorted(edits, key=lambda e: e[0]):
        out.append(text[pos:at])
        if stop is None:
            out.append(insert)
            pos = at
        else:
            out.append(re.sub(r"[^\n]", " ", text[at:stop]))
            pos = stop
    out.append(text[pos:])
    return "".join(out)

"""The compile store: what a cache key covers, and where entries live.

pygpu.compiler asks this module three things: the dependencies of a source
(the state of every file its #include lines could reach, or "uncacheable"),
the key of a compile, and the entry stored under a key (memory, then disk).

NVRTC cannot report the files it read (CUDA 13 rejects -M, -MD, -MF and
--dependency-output; its --fdevice-time-trace does list headers, but that
state is process-wide and loses headers after any failed compile), so the
scanner here is conservative: every path an #include (or __has_include, or
a -include option) could open is recorded, found or absent, in every
directory NVRTC could search; anything it cannot resolve statically (a
macro #include, a macro __has_include argument, an option it does not know
that names files, a file it cannot read) makes the compile uncacheable, in
memory too.  A header modified while it was being read or compiled (its
inode change time is recent) keeps the result out of the cache.
"""

from typing import Any
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
import threading
import time

__all__ = [
    "CACHE_SCHEMA",
    "Binary",
    "default_cache_dir",
    "resolve_dir",
    "cache_info",
    "clear",
    "scan",
    "make_key",
]

CACHE_SCHEMA = 2
_MAGIC = b"PYGPUC1\n"
lock = threading.RLock()

try:  # os.environ's own dict: a lookup in it costs ~40 ns, os.environ.get ~400
    environ_data = os.environ._data  # type: ignore[attr-defined]  # CPython's
    env_key = os.environ.encodekey
except AttributeError:  # pragma: no cover - not CPython's os module
    environ_data = os.environ

    def env_key(name):
        return name


def env_raw(name):
    """os.environ.get(name), fast (undecoded); None when unset."""
    return environ_data.get(env_key(name))


OFF = (None, b"", b"0", "", "0")
DISABLE_KEY = env_key("PYGPU_DISABLE_CACHE")


PYCUDA_DISABLE_KEY = env_key("PYCUDA_DISABLE_CACHE")


def env_disabled():
    """PYGPU_DISABLE_CACHE is set to something other than '' or '0', or
    PyCUDA's PYCUDA_DISABLE_CACHE is set at all (PyCUDA's rule)."""
    return environ_data.get(DISABLE_KEY) not in OFF or PYCUDA_DISABLE_KEY in environ_data


# ---- where ----


def default_cache_dir():
    """$PYGPU_CACHE_DIR, else PyCUDA's $PYCUDA_CACHE_DIR, else
    $XDG_CACHE_HOME/pygpu, else ~/.cache/pygpu."""
    d = os.environ.get("PYGPU_CACHE_DIR") or os.environ.get("PYCUDA_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pygpu")


def check_dir(cache_dir):
    """The directory cache_dir names: None or True the default, False none
    (returns None); a str or os.PathLike otherwise.  Anything else (0,
    bytes, "") is refused rather than turned into a folder in the working
    directory."""
    if cache_dir is None or cache_dir is True:
        return default_cache_dir()
    if cache_dir is False:
        return None
    if isinstance(cache_dir, (str, os.PathLike)):
        d = os.fspath(cache_dir)
        if isinstance(d, str):
            if not d:
                raise ValueError(
                    "cache_dir is empty: give a directory, None for the default "
                    "or False for no cache"
                )
            if "\0" in d:
                raise ValueError("cache_dir contains a NUL character: %r" % (d,))
            return d
    raise TypeError(
        "cache_dir must be a directory (str or os.PathLike), None, True or "
        "False, not %s" % type(cache_dir).__name__
    )


def resolve_dir(cache_dir):
    """check_dir(cache_dir), or None when PYGPU_DISABLE_CACHE turns the cache off."""
    d = check_dir(cache_dir)
    return None if env_disabled() else d


def debug(msg):
    if env_raw("PYGPU_CACHE_DEBUG") not in OFF:
        print("pygpu cache: " + msg, file=sys.stderr)


def cache_cap():
    try:
        return int(os.environ.get("PYGPU_CACHE_SIZE", str(1 << 30)))
    except ValueError:
        return 1 << 30


# ---- what: the binary ----


class Binary(bytes):
    """Compiled cubin or PTX: bytes with .target, .arch, .log and
    .lowered_names (name expression -> mangled name)."""

    target = arch = log = ""
    lowered_names: dict[Any, Any] = {}
    _digest = None  # SHA-256 of the image, computed once for the module cache

    def digest(self):
        if self._digest is None:
            self._digest = hashlib.sha256(self).digest()
        return self._digest

    def __repr__(self):  # a summary: the image itself is thousands of bytes
        from pygpu import _display

        return _display.binary_summary(self)

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))

    def _repr_html_(self):
        from pygpu import _display

        return _display.binary_html(self)


def make_binary(image, target, arch, log, lowered):
    b = Binary(image)
    b.target, b.arch, b.log, b.lowered_names = target, arch, log, dict(lowered)
    return b


# ---- dependencies ----

# A file changed less than this long before it was read may change again
# within the same timestamp tick without its stat changing ("racy"): such a
# compile is not stored.  Linux's inode clock ticks at most every 10 ms;
# file systems with whole-second stamps get 2 s.
RACY_NS = 50_000_000
RACY_COARSE_NS = 2_000_000_000

_DIRECTIVES = ("include", "include_next", "import", "embed")
_HINTS = ("include", "import", "embed", "\\", "??")
_TOKEN = re.compile(
    r'''
    (?P<nl>\n)
  | (?P<ws>[ \t\f\v\r]+)
  | (?P<lc>//[^\n]*)
  | (?P<bc>/\*.*?(?:\*/|\Z))
  | (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^ ()\\\t\v\f\n"]{0,16})\(.*?(?:\)(?P=delim)"|\Z))
  | (?P<str>(?:u8|[uUL])?"(?:[^"\\\n]|\\.)*(?:"|(?=\n)|\Z))
  | (?P<chr>(?:u8|[uUL])?'(?:[^'\\\n]|\\.)*(?:'|(?=\n)|\Z))
  | (?P<hash>\#|%:)
  | (?P<id>[A-Za-z_$][A-Za-z_0-9$]*)
  | (?P<other>.)
''',
    re.S | re.X,
)
_SKIP = re.compile(r'(?:[ \t\f\v\r]+|/\*.*?\*/)*', re.S)
_HEADER_NAME = re.compile(r'"([^"\n]*)"|<([^>\n]*)>')
_PLAIN_DIRECTIVE = re.compile(
    r'^[ \t\f\v\r]*(?:#|%:)[ \t\f\v\r]*(include_next|include|import|embed)\b', re.M
)
_TRIGRAPHS = {
    "=": "#",
    "/": "\\",
    "'": "^",
    "(": "[",
    ")": "]",
    "!": "|",
    "<": "{",
    ">": "}",
    "-": "~",
}
_TRIGRAPH_RE = re.compile(r"\?\?([=/'()!<>-])")


class Uncacheable(Exception):
    """The scanner cannot name every file this compile may read."""


def _variants(text):
    """The text after line splicing, in every reading a compiler might make
    of it (with and without trigraphs, backslash-space-newline as a splice or
    not, a lone CR as a newline or not): scanning them all over-approximates."""
    texts = {text.replace("\r\n", "\n")}
    if "??" in text:
        texts |= {_TRIGRAPH_RE.sub(lambda m: _TRIGRAPHS[m.group(1)], t) for t in texts}
    if "\r" in text:
        texts |= {t.replace("\r", "\n") for t in texts}
    out = set()
    for t in texts:
        out.add(t.replace("\\\n", ""))
        if re.search(r"\\[ \t\f\v]+\n", t):
            out.add(re.sub(r"\\[ \t\f\v]*\n", "", t))
    return out


def _header_name(text, pos, what):
    pos = _SKIP.match(text, pos).end()
    m = _HEADER_NAME.match(text, pos)
    if m is None:
        line = text[pos : text.find("\n", pos) if "\n" in text[pos:] else len(text)]
        raise Uncacheable("%s with a macro or unusual argument (%r)" % (what, line[:80]))
    return (m.group(1) is not None), (m.group(1) if m.group(1) is not None else m.group(2))


def directives(text):
    """The file references of one source text: a set of (kind, quoted, name),
    kind 'include' (any #include-like directive) or 'has' (__has_include);
    'line' entries for a #line with a file name.  Raises Uncacheable for a
    reference it cannot resolve statically."""
    if not any(h in text for h in _HINTS):
        return set()
    found = set()
    for t in _variants(text):
        # a plain line scan, whatever the lexer below makes of strings
        for m in _PLAIN_DIRECTIVE.finditer(t):
            found.add(("include",) + _header_name(t, m.end(), "#" + m.group(1)))
        at_start, directive = True, None
        for m in _TOKEN.finditer(t):
            kind = m.lastgroup
            if kind == "nl":
                at_start, directive = True, None
                continue
            if kind in ("ws", "lc", "bc"):
                continue
            if kind == "hash" and at_start:
                directive = True
                at_start = False
                continue
            if kind == "id":
                word = m.group()
                if directive is True:
                    directive = word
                    if word in _DIRECTIVES:
                        found.add(("include",) + _header_name(t, m.end(), "#" + word))
                    elif word == "line":
                        rest = t[m.end() : t.find("\n", m.end()) % (len(t) + 1)]
                        if '"' in rest:
                            raise Uncacheable("#line with a file name")
                elif word in ("__has_include", "__has_include_next"):
                    p = _SKIP.match(t, m.end()).end()
                    if t.startswith("(", p):
                        p = _SKIP.match(t, p + 1).end()
                        q, name = _header_name(t, p, word)
                        found.add(("has", q, name))
            elif directive is True:
                directive = "other"
            at_start = False
    return found


def _option_files(opts):
    """(include_dirs, pre_includes) named by NVRTC options, in order; raises
    Uncacheable for an option that may read files pygpu does not follow."""
    dirs, pre = [], []
    it = iter(opts)
    for o in it:
        if o in ("-I", "--include-path"):
            dirs.append(next(it, ""))
        elif o.startswith("--include-path="):
            dirs.append(o.split("=", 1)[1])
        elif o.startswith("-I"):
            dirs.append(o[2:])
        elif o in ("-include", "--pre-include"):
            pre.append(next(it, ""))
        elif o.startswith("--pre-include="):
            pre.append(o.split("=", 1)[1])
        elif any(w in o for w in ("include", "pch", "optf", "options-file", "isystem", "system")):
            raise Uncacheable("option %r may read files the cache cannot key" % o)
    return dirs, pre


class Deps:
    """The state of every file a compile may read: records for the key,
    stat signatures to check in memory, and whether it is racy."""

    __slots__ = ("records", "stats", "cwd", "racy")

    def __init__(self):
        self.records = []  # (absolute path, 'F' + sha256 hex | 'A' absent | 'O' other)
        self.stats = []  # (path as opened, signature or None for absent)
        self.cwd = None  # set when a path is relative to the working directory
        self.racy = False

    def valid(self):
        """Whether every file is still as recorded (stat signatures; the
        signatures of racy files are never trusted)."""
        return not self.racy and self.unchanged()

    def unchanged(self):
        """Whether every stat signature is still the one recorded."""
        if self.cwd is not None:
            try:
                if os.getcwd() != self.cwd:
                    return False
            except OSError:
                return False
        for path, sig in self.stats:
            try:
                st = os.stat(path)
            except OSError:
                if sig is None:
                    continue
                return False
            if sig is None or _sig(st) != sig:
                return False
        return True


def _sig(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _recent(st, now):
    c = st.st_ctime_ns
    slack = RACY_COARSE_NS if c % 1_000_000_000 == 0 else RACY_NS
    return c >= now - slack


_MAX_FILES = 20000


def scan(source, opts, name, trusted_dirs=()):
    """The Deps of compiling source (called name) with NVRTC options opts,
    or raise Uncacheable.  trusted_dirs: the CUDA toolkit's include
    directories; a file found there is keyed by its content but not
    followed (the toolkit's own headers change with the toolkit)."""
    dirs, pre = _option_files(opts)
    deps = Deps()
    refs = directives(source)
    if not refs and not pre:
        return deps
    trusted = set(trusted_dirs)
    now = time.time_ns()
    cwd = None
    seen_paths = {}
    scanned = set()
    # (refs of a text, its own directory chain) to resolve
    main_dir = os.path.dirname(name)
    work = [(refs, (main_dir, ""), False)]
    for p in pre:
        work.append(({("include", True, p)}, ("",), False))

    def state(path, from_trusted):
        nonlocal cwd
        if path in seen_paths:
            return seen_paths[path]
        absolute = path
        if not os.path.isabs(path):
            if cwd is None:
                try:
                    cwd = os.getcwd()
                except OSError:
                    raise Uncacheable("the working directory is gone")
                deps.cwd = cwd
            absolute = os.path.join(cwd, path)
        try:
            st = os.stat(path)
        except OSError:
            deps.records.append((absolute, "A"))
            deps.stats.append((path, None))
            seen_paths[path] = None
            return None
        if not stat.S_ISREG(st.st_mode):
            deps.records.append((absolute, "O%o" % stat.S_IFMT(st.st_mode)))
            deps.stats.append((path, _sig(st)))
            seen_paths[path] = None
            return None
        try:
            with open(path, "rb") as f:
                data = f.read()
                st2 = os.fstat(f.fileno())
        except OSError as e:
            raise Uncacheable("cannot read %s: %s" % (path, e))
        if _sig(st2) != _sig(st) or _recent(st2, now):
            deps.racy = True
        deps.records.append((absolute, "F" + hashlib.sha256(data).hexdigest()))
        deps.stats.append((path, _sig(st2)))
        key = (st2.st_dev, st2.st_ino)
        result = (data, from_trusted)
        seen_paths[path] = result if key not in scanned else None
        scanned.add(key)
        if len(scanned) > _MAX_FILES:
            raise Uncacheable("more than %d headers" % _MAX_FILES)
        return seen_paths[path]

    while work:
        refs, chain, in_trusted = work.pop()
        for kind, quoted, hname in sorted(refs):
            if os.path.isabs(hname):
                cands = [(hname, in_trusted)]
            else:
                search = ([(d, in_trusted) for d in chain] if quoted else []) + [
                    (d, d in trusted) for d in dirs
                ]
                cands = [(os.path.join(d, hname), t) for d, t in search]
            for path, t in cands:
                got = state(path, t)
                if got is None or kind == "has":
                    continue
                data, from_trusted = got
                if from_trusted:
                    continue
                text = data.decode("utf-8", "surrogateescape")
                sub = directives(text)
                if sub:
                    work.append((sub, (os.path.dirname(path),) + chain, False))
    return deps


def _put(h, part):
    b = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
    h.update(len(b).to_bytes(8, "little"))
    h.update(b)


def make_key(parts, deps):
    """SHA-256 hex over the parts (each length-prefixed, so no two lists of
    parts collide) and the dependency records."""
    h = hashlib.sha256()
    _put(h, str(CACHE_SCHEMA))
    h.update(len(parts).to_bytes(8, "little"))
    for p in parts:
        _put(h, p)
    for path, what in sorted(deps.records):
        _put(h, path)
        _put(h, what)
    return h.hexdigest()


# ---- the memory store ----

memory: dict[Any, Any] = {}
stats = {"memory_hits": 0, "disk_hits": 0, "misses": 0, "compiles": 0, "uncacheable": 0}

# ---- the disk store ----

_HEX2 = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"[0-9a-f]{64}\.bin")


def _entry_path(cache_dir, key):
    return os.path.join(cache_dir, key[:2], key + ".bin")


def read_entry(cache_dir, key):
    """The Binary stored under key, or None (a damaged entry is deleted)."""
    path = _entry_path(cache_dir, key)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        debug("miss %s: no entry at %s" % (key[:16], path))
        return None
    try:
        if not blob.startswith(_MAGIC):
            raise ValueError("bad magic")
        digest, payload = blob[len(_MAGIC) : len(_MAGIC) + 32], blob[len(_MAGIC) + 32 :]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch")
        hlen = int.from_bytes(payload[:4], "little")
        meta = json.loads(payload[4 : 4 + hlen].decode("utf-8"))
        image = payload[4 + hlen :]
        if not isinstance(meta, dict) or meta.get("key") != key or len(image) != meta.get("size"):
            raise ValueError("entry does not match its key")
        b = make_binary(
            image,
            str(meta["target"]),
            str(meta["arch"]),
            str(meta.get("log", "")),
            {str(k): str(v) for k, v in dict(meta.get("lowered", {})).items()},
        )
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
        debug("miss %s: damaged entry %s (%s): recompiling" % (key[:16], path, e))
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    try:
        os.utime(path)  # least-recently-used order
    except OSError:
        pass
    return b


def _atomic_write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: readers see all or nothing
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_entry(cache_dir, key, b):
    meta = json.dumps(
        {
            "key": key,
            "size": len(b),
            "target": b.target,
            "arch": b.arch,
            "log": b.log,
            "lowered": b.lowered_names,
        }
    ).encode("utf-8")
    payload = len(meta).to_bytes(4, "little") + meta + bytes(b)
    blob = _MAGIC + hashlib.sha256(payload).digest() + payload
    path = _entry_path(cache_dir, key)
    try:
        _atomic_write(path, blob)
    except OSError as e:
        debug("could not write %s: %s" % (path, e))
        return
    _account(cache_dir, len(blob), keep=path)


_totals: dict[Any, Any] = {}  # cache dir -> (approximate total, total last written to <dir>/size)


def _account(cache_dir, added, keep):
    """Add added bytes to the approximate total of cache_dir (read from
    <dir>/size once per process, written back in steps of 1/64 of the cap);
    past the cap, list the entries and evict.  So a write costs no listing
    of the cache and, mostly, no extra file."""
    cap = cache_cap()
    size_file = os.path.join(cache_dir, "size")
    known = _totals.get(cache_dir)
    if known is None:
        try:
            with open(size_file) as f:
                total = int(f.read())
        except (OSError, ValueError):
            total = None
        written = total
    else:
        total, written = known
    if total is not None:
        total += added
    if total is None or total > cap:
        total = evict(cache_dir, keep=keep)
        written = None
    if written is None or abs(total - written) >= max(cap // 64, 1):
        try:
            _atomic_write(size_file, str(total).encode())
            written = total
        except OSError:
            pass
    _totals[cache_dir] = (total, written)


def entries(cache_dir):
    """(mtime, size, path) of every entry: regular files named <key>.bin in
    real (not symlinked) two-hex-digit subdirectories; anything unreadable
    is skipped."""
    out = []
    try:
        top = os.scandir(cache_dir)
    except OSError:
        return out
    with top:
        for sub in top:
            try:
                if not _HEX2.fullmatch(sub.name) or not sub.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(sub.path) as it:
                    for e in it:
                        if (
                            _ENTRY.fullmatch(e.name)
                            and e.name.startswith(sub.name)
                            and e.is_file(follow_symlinks=False)
                        ):
                            st = e.stat(follow_symlinks=False)
                            out.append((st.st_mtime, st.st_size, e.path))
            except OSError:
                continue
    return out


def evict(cache_dir, keep=None):
    """Delete least-recently-used entries until the total is under the cap;
    the entry just written (keep) stays.  Returns the total left."""
    cap = cache_cap()
    found = entries(cache_dir)
    total = sum(e[1] for e in found)
    if total <= cap:
        return total
    for mtime, size, p in sorted(found):
        if p == keep:
            continue
        try:
            os.unlink(p)
            total -= size
            debug("evicted %s" % p)
        except OSError:
            pass
        if total <= cap:
            break
    return total


def cache_info(cache_dir=None):
    """Counts and sizes of the in-memory and on-disk caches."""
    d = check_dir(cache_dir)
    found = entries(d) if d else []
    return {
        "dir": d,
        "disk_entries": len(found),
        "disk_bytes": sum(e[1] for e in found),
        "memory_entries": len(memory),
        "size_cap": cache_cap(),
        **stats,
    }


def clear(cache_dir=None, disk=True):
    """Empty the memory store and (disk=True) the entries on disk."""
    with lock:
        memory.clear()
    if disk:
        d = check_dir(cache_dir)
        if d:
            for _, _, p in entries(d):
                try:
                    os.unlink(p)
                except OSError:
                    pass
            try:
                os.unlink(os.path.join(d, "size"))
            except OSError:
                pass
            _totals.pop(d, None)


# ---- NVRTC's version, recorded beside the entries ----


def read_version_record(cache_dir, fingerprint, file_sig, kind="nvrtc"):
    """The (major, minor) recorded for this fingerprint, if the record is
    whole and its library file unchanged; else None.  kind: which library
    ('nvrtc', 'nvjitlink')."""
    rec = os.path.join(cache_dir, "%s-%s.json" % (kind, fingerprint))
    try:
        with open(rec) as f:
            meta = json.load(f)
        version, lib, sig = meta["version"], meta["file"], meta["sig"]
        if (
            isinstance(lib, str)
            and isinstance(version, list)
            and len(version) == 2
            and all(type(v) is int and 0 <= v < 1000 for v in version)
            and file_sig(lib) == sig
        ):
            return tuple(version)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def write_version_record(cache_dir, fingerprint, lib, sig, version, kind="nvrtc", **extra):
    rec = os.path.join(cache_dir, "%s-%s.json" % (kind, fingerprint))
    try:
        _atomic_write(
            rec, json.dumps(dict(extra, file=lib, sig=sig, version=list(version))).encode()
        )
    except OSError:
        pass


def read_record(cache_dir, name):
    """The JSON object stored as <cache_dir>/<name>.json, or None."""
    try:
        with open(os.path.join(cache_dir, name + ".json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def write_record(cache_dir, name, meta):
    """Store the JSON object meta as <cache_dir>/<name>.json (atomic; a
    failure to write is ignored: records only save time)."""
    try:
        _atomic_write(os.path.join(cache_dir, name + ".json"), json.dumps(meta).encode())
    except OSError:
        pass

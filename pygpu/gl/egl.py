"""A headless OpenGL context through EGL, and the few GL calls interop needs,
over ctypes: for machines with no display (a GPU server, CI), for tests, and
for programs that only compute with OpenGL objects.

    from pygpu.gl.egl import HeadlessContext
    with HeadlessContext() as ctx:          # current on this thread
        gl = ctx.gl                         # glGenBuffers, glBufferData, ...
        buf = gl.gen_buffer(nbytes)
        ...

Nothing is loaded at import: libEGL (``libEGL.so.1``) and the OpenGL library
(``libOpenGL.so.0``, GLVND's, else ``libGL.so.1``) are opened when a context
is made, and a missing one raises :class:`GLUnavailableError` naming the
library and the package that provides it.  The EGL display is the EGL device
of the CUDA device asked for (EGL_EXT_device_enumeration, matched through
EGL_NV_device_cuda), else the first device that initialises, else the
default display; the surface is a 1x1 pbuffer, or none where the config has
no pbuffer (EGL_KHR_surfaceless_context).
"""

from typing import Any
import ctypes
import ctypes.util
import threading

__all__ = ["GLUnavailableError", "EGLError", "HeadlessContext", "load_egl", "load_gl"]


class GLUnavailableError(RuntimeError):
    """An OpenGL or EGL library is not installed: the message names it."""


class EGLError(RuntimeError):
    """An EGL call failed (no usable GPU display, no matching config, ...)."""


_EGL_SONAMES = ("libEGL.so.1", "libEGL.so")
_GL_SONAMES = ("libOpenGL.so.0", "libGL.so.1", "libOpenGL.so", "libGL.so")
_libs: dict[Any, Any] = {}
_lock = threading.Lock()


def _load(kind, sonames, package):
    with _lock:
        if kind in _libs:
            return _libs[kind]
        tried = []
        for name in sonames:
            try:
                lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                tried.append("%s (%s)" % (name, e))
                continue
            _libs[kind] = lib
            return lib
        raise GLUnavailableError(
            "pygpu.gl: no %s library: tried %s; install %s (with the GPU driver's "
            "EGL/GL vendor library: NVIDIA's driver ships libEGL_nvidia)"
            % (kind, ", ".join(tried), package)
        )


def load_egl():
    """libEGL as a ctypes.CDLL, opened once; GLUnavailableError if missing."""
    return _load("EGL", _EGL_SONAMES, "libEGL (Debian/Ubuntu: libegl1)")


def load_gl():
    """The OpenGL library (GLVND's libOpenGL, else libGL), opened once;
    GLUnavailableError if missing."""
    return _load("OpenGL", _GL_SONAMES, "libOpenGL or libGL (Debian/Ubuntu: libopengl0, libgl1)")


# EGL constants (EGL 1.5 and the extensions used)
EGL_SUCCESS = 0x3000
EGL_NONE = 0x3038
EGL_SURFACE_TYPE = 0x3033
EGL_PBUFFER_BIT = 0x0001
EGL_RENDERABLE_TYPE = 0x3040
EGL_OPENGL_BIT = 0x0008
EGL_RED_SIZE, EGL_GREEN_SIZE, EGL_BLUE_SIZE, EGL_ALPHA_SIZE = 0x3024, 0x3023, 0x3022, 0x3021
EGL_WIDTH, EGL_HEIGHT = 0x3057, 0x3056
EGL_OPENGL_API = 0x30A2
EGL_PLATFORM_DEVICE_EXT = 0x313F
EGL_CUDA_DEVICE_NV = 0x323A
EGL_EXTENSIONS = 0x3055

_vp = ctypes.c_void_p
_int = ctypes.c_int32
_bool = ctypes.c_uint


def _egl_functions(egl):
    def f(name, restype, *argtypes):
        fn = getattr(egl, name)
        fn.restype = restype
        fn.argtypes = list(argtypes)
        return fn

    ns = {
        "eglGetError": f("eglGetError", _int),
        "eglGetDisplay": f("eglGetDisplay", _vp, _vp),
        "eglInitialize": f("eglInitialize", _bool, _vp, ctypes.POINTER(_int), ctypes.POINTER(_int)),
        "eglTerminate": f("eglTerminate", _bool, _vp),
        "eglBindAPI": f("eglBindAPI", _bool, ctypes.c_uint),
        "eglChooseConfig": f(
            "eglChooseConfig",
            _bool,
            _vp,
            ctypes.POINTER(_int),
            ctypes.POINTER(_vp),
            _int,
            ctypes.POINTER(_int),
        ),
        "eglCreatePbufferSurface": f(
            "eglCreatePbufferSurface", _vp, _vp, _vp, ctypes.POINTER(_int)
        ),
        "eglDestroySurface": f("eglDestroySurface", _bool, _vp, _vp),
        "eglCreateContext": f("eglCreateContext", _vp, _vp, _vp, _vp, ctypes.POINTER(_int)),
        "eglDestroyContext": f("eglDestroyContext", _bool, _vp, _vp),
        "eglMakeCurrent": f("eglMakeCurrent", _bool, _vp, _vp, _vp, _vp),
        "eglGetProcAddress": f("eglGetProcAddress", _vp, ctypes.c_char_p),
        "eglQueryString": f("eglQueryString", ctypes.c_char_p, _vp, _int),
    }
    return ns


def _attribs(*pairs):
    vals = list(pairs) + [EGL_NONE]
    return (_int * len(vals))(*vals)


class GL:
    """The GL calls interop and its tests need, bound lazily from the OpenGL
    library (or eglGetProcAddress), with small helpers.  Made by
    :class:`HeadlessContext`; valid while a GL context is current."""

    GL_ARRAY_BUFFER = 0x8892
    GL_DYNAMIC_DRAW = 0x88E8
    GL_TEXTURE_2D = 0x0DE1
    GL_R32F = 0x822E
    GL_RGBA32F = 0x8814
    GL_RED = 0x1903
    GL_RGBA = 0x1908
    GL_FLOAT = 0x1406
    GL_TEXTURE_MIN_FILTER = 0x2801
    GL_TEXTURE_MAG_FILTER = 0x2800
    GL_NEAREST = 0x2600
    GL_PACK_ALIGNMENT = 0x0D05
    GL_UNPACK_ALIGNMENT = 0x0CF5
    GL_NO_ERROR = 0
    GL_VERSION = 0x1F02
    GL_RENDERER = 0x1F01

    _SIGS = {
        "glGetError": (ctypes.c_uint,),
        "glGetString": (ctypes.c_char_p, ctypes.c_uint),
        "glFinish": (None,),
        "glGenBuffers": (None, ctypes.c_int, ctypes.POINTER(ctypes.c_uint)),
        "glDeleteBuffers": (None, ctypes.c_int, ctypes.POINTER(ctypes.c_uint)),
        "glBindBuffer": (None, ctypes.c_uint, ctypes.c_uint),
        "glBufferData": (None, ctypes.c_uint, ctypes.c_ssize_t, _vp, ctypes.c_uint),
        "glGetBufferSubData": (None, ctypes.c_uint, ctypes.c_ssize_t, ctypes.c_ssize_t, _vp),
        "glGenTextures": (None, ctypes.c_int, ctypes.POINTER(ctypes.c_uint)),
        "glDeleteTextures": (None, ctypes.c_int, ctypes.POINTER(ctypes.c_uint)),
        "glBindTexture": (None, ctypes.c_uint, ctypes.c_uint),
        "glTexParameteri": (None, ctypes.c_uint, ctypes.c_uint, ctypes.c_int),
        "glTexImage2D": (
            None,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            _vp,
        ),
        "glGetTexImage": (None, ctypes.c_uint, ctypes.c_int, ctypes.c_uint, ctypes.c_uint, _vp),
        "glPixelStorei": (None, ctypes.c_uint, ctypes.c_int),
    }

    def __init__(self, get_proc_address=None):
        self._lib = load_gl()
        self._gpa = get_proc_address
        self._fns = {}

    def __getattr__(self, name):
        if name not in GL._SIGS:
            raise AttributeError(name)
        fn = self._fns.get(name)
        if fn is None:
            restype, *argtypes = GL._SIGS[name]
            try:
                fn = getattr(self._lib, name)
            except AttributeError:
                addr = self._gpa(name.encode()) if self._gpa is not None else None
                if not addr:
                    raise GLUnavailableError(
                        "pygpu.gl: the OpenGL library has no %s" % name
                    ) from None
                fn = ctypes.CFUNCTYPE(restype, *argtypes)(addr)
            fn.restype = restype
            fn.argtypes = argtypes
            self._fns[name] = fn
        return fn

    def check(self, what):
        """Raise EGLError if glGetError reports an error after `what`."""
        err = self.glGetError()
        if err != GL.GL_NO_ERROR:
            raise EGLError("%s: OpenGL error 0x%04x" % (what, err))

    def gen_buffer(self, nbytes, data=None):
        """A new GL buffer object of nbytes (its data from a host buffer, or
        undefined); returns its name."""
        name = ctypes.c_uint(0)
        self.glGenBuffers(1, ctypes.byref(name))
        self.glBindBuffer(GL.GL_ARRAY_BUFFER, name.value)
        ptr = None
        if data is not None:
            mv = memoryview(data).cast("B")
            if mv.nbytes < nbytes:
                raise ValueError(
                    "gen_buffer(): data has %d bytes, fewer than %d" % (mv.nbytes, nbytes)
                )
            ptr = ctypes.cast((ctypes.c_char * mv.nbytes).from_buffer(mv), _vp)
        self.glBufferData(GL.GL_ARRAY_BUFFER, nbytes, ptr, GL.GL_DYNAMIC_DRAW)
        self.glBindBuffer(GL.GL_ARRAY_BUFFER, 0)
        self.check("glBufferData")
        return name.value

    def delete_buffer(self, name):
        n = ctypes.c_uint(name)
        self.glDeleteBuffers(1, ctypes.byref(n))

    def read_buffer(self, name, out):
        """glGetBufferSubData of the buffer's first nbytes(out) into out (a
        writable host buffer, e.g. a NumPy array)."""
        mv = memoryview(out).cast("B")
        self.glBindBuffer(GL.GL_ARRAY_BUFFER, name)
        self.glGetBufferSubData(
            GL.GL_ARRAY_BUFFER,
            0,
            mv.nbytes,
            ctypes.cast((ctypes.c_char * mv.nbytes).from_buffer(mv), _vp),
        )
        self.glBindBuffer(GL.GL_ARRAY_BUFFER, 0)
        self.check("glGetBufferSubData")
        return out

    def gen_texture_2d(
        self, width, height, internal_format=GL_R32F, fmt=GL_RED, type_=GL_FLOAT, data=None
    ):
        """A new 2-D texture (one level), its texels from a host buffer or
        undefined; returns its name."""
        name = ctypes.c_uint(0)
        self.glGenTextures(1, ctypes.byref(name))
        self.glBindTexture(GL.GL_TEXTURE_2D, name.value)
        self.glTexParameteri(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_MIN_FILTER, GL.GL_NEAREST)
        self.glTexParameteri(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_MAG_FILTER, GL.GL_NEAREST)
        self.glPixelStorei(GL.GL_UNPACK_ALIGNMENT, 1)
        ptr = None
        if data is not None:
            mv = memoryview(data).cast("B")
            ptr = ctypes.cast((ctypes.c_char * mv.nbytes).from_buffer(mv), _vp)
        self.glTexImage2D(GL.GL_TEXTURE_2D, 0, internal_format, width, height, 0, fmt, type_, ptr)
        self.glBindTexture(GL.GL_TEXTURE_2D, 0)
        self.check("glTexImage2D")
        return name.value

    def delete_texture(self, name):
        n = ctypes.c_uint(name)
        self.glDeleteTextures(1, ctypes.byref(n))

    def read_texture_2d(self, name, out, fmt=GL_RED, type_=GL_FLOAT):
        """glGetTexImage of level 0 into out (a writable host buffer of the
        texture's size)."""
        mv = memoryview(out).cast("B")
        self.glBindTexture(GL.GL_TEXTURE_2D, name)
        self.glPixelStorei(GL.GL_PACK_ALIGNMENT, 1)
        self.glGetTexImage(
            GL.GL_TEXTURE_2D,
            0,
            fmt,
            type_,
            ctypes.cast((ctypes.c_char * mv.nbytes).from_buffer(mv), _vp),
        )
        self.glBindTexture(GL.GL_TEXTURE_2D, 0)
        self.check("glGetTexImage")
        return out


class HeadlessContext:
    """An OpenGL context with no window, made through EGL and current on the
    calling thread until :meth:`close` (or the end of a ``with`` block).

    device: the CUDA device ordinal whose GPU should run it (matched through
    EGL_NV_device_cuda where the EGL devices say; else the first device that
    initialises).  ``gl`` is a :class:`GL` for the OpenGL calls; ``renderer``
    and ``version`` are GL_RENDERER and GL_VERSION.
    """

    def __init__(self, device=0):
        self._egl = egl = load_egl()
        load_gl()
        self._f = f = _egl_functions(egl)
        self.display = self.surface = self.context = None
        try:
            self._open(device)
        except BaseException:
            self.close()
            raise
        self.gl = GL(f["eglGetProcAddress"])
        self.renderer = (self.gl.glGetString(GL.GL_RENDERER) or b"").decode(errors="replace")
        self.version = (self.gl.glGetString(GL.GL_VERSION) or b"").decode(errors="replace")

    def _err(self, what):
        return EGLError("%s failed: EGL error 0x%04x" % (what, self._f["eglGetError"]()))

    def _device_displays(self, device):
        f = self._f
        gpa = f["eglGetProcAddress"]
        q_addr = gpa(b"eglQueryDevicesEXT")
        p_addr = gpa(b"eglGetPlatformDisplayEXT")
        if not q_addr or not p_addr:
            return []
        query = ctypes.CFUNCTYPE(_bool, _int, ctypes.POINTER(_vp), ctypes.POINTER(_int))(q_addr)
        get_dpy = ctypes.CFUNCTYPE(_vp, ctypes.c_uint, _vp, ctypes.POINTER(_int))(p_addr)
        attr_addr = gpa(b"eglQueryDeviceAttribEXT")
        qattr = (
            ctypes.CFUNCTYPE(_bool, _vp, _int, ctypes.POINTER(ctypes.c_ssize_t))(attr_addr)
            if attr_addr
            else None
        )
        devs = (_vp * 32)()
        n = _int(0)
        if not query(32, devs, ctypes.byref(n)):
            return []
        matched, others = [], []
        for i in range(n.value):
            cuda_dev = ctypes.c_ssize_t(-1)
            is_match = False
            if qattr is not None and device is not None:
                if qattr(devs[i], EGL_CUDA_DEVICE_NV, ctypes.byref(cuda_dev)):
                    is_match = cuda_dev.value == device
                else:
                    f["eglGetError"]()  # clear: not an NVIDIA device
            (matched if is_match else others).append(devs[i])
        return [(lambda d=d: get_dpy(EGL_PLATFORM_DEVICE_EXT, d, None)) for d in matched + others]

    def _open(self, device):
        f = self._f
        candidates = self._device_displays(device)
        candidates.append(lambda: f["eglGetDisplay"](None))
        errors = []
        for get in candidates:
            dpy = get()
            if not dpy:
                errors.append("eglGetPlatformDisplayEXT: EGL error 0x%04x" % f["eglGetError"]())
                continue
            major, minor = _int(0), _int(0)
            if f["eglInitialize"](dpy, ctypes.byref(major), ctypes.byref(minor)):
                self.display = dpy
                break
            errors.append("eglInitialize: EGL error 0x%04x" % f["eglGetError"]())
        if self.display is None:
            raise EGLError(
                "pygpu.gl: no EGL display could be initialised (%s): no GPU "
                "EGL driver (e.g. NVIDIA's libEGL_nvidia) is installed or "
                "usable" % "; ".join(errors)
            )
        dpy = self.display
        if not f["eglBindAPI"](EGL_OPENGL_API):
            raise self._err("eglBindAPI(EGL_OPENGL_API)")
        cfg = _vp()
        n = _int(0)
        pbuffer = True
        if (
            not f["eglChooseConfig"](
                dpy,
                _attribs(
                    EGL_SURFACE_TYPE,
                    EGL_PBUFFER_BIT,
                    EGL_RENDERABLE_TYPE,
                    EGL_OPENGL_BIT,
                    EGL_RED_SIZE,
                    8,
                    EGL_GREEN_SIZE,
                    8,
                    EGL_BLUE_SIZE,
                    8,
                ),
                ctypes.byref(cfg),
                1,
                ctypes.byref(n),
            )
            or n.value < 1
        ):
            pbuffer = False
            if (
                not f["eglChooseConfig"](
                    dpy,
                    _attribs(EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT),
                    ctypes.byref(cfg),
                    1,
                    ctypes.byref(n),
                )
                or n.value < 1
            ):
                raise EGLError(
                    "pygpu.gl: eglChooseConfig found no OpenGL config "
                    "(EGL error 0x%04x)" % f["eglGetError"]()
                )
        if pbuffer:
            surf = f["eglCreatePbufferSurface"](dpy, cfg, _attribs(EGL_WIDTH, 1, EGL_HEIGHT, 1))
            if not surf:
                raise self._err("eglCreatePbufferSurface")
            self.surface = surf
        ctx = f["eglCreateContext"](dpy, cfg, None, _attribs())
        if not ctx:
            raise self._err("eglCreateContext")
        self.context = ctx
        if not f["eglMakeCurrent"](dpy, self.surface, self.surface, ctx):
            raise self._err("eglMakeCurrent")

    def make_current(self):
        """Make the context current on the calling thread."""
        if not self._f["eglMakeCurrent"](self.display, self.surface, self.surface, self.context):
            raise self._err("eglMakeCurrent")

    def close(self):
        """Release the context and the display (idempotent)."""
        f = self._f
        if self.display:
            f["eglMakeCurrent"](self.display, None, None, None)
            if self.context:
                f["eglDestroyContext"](self.display, self.context)
            if self.surface:
                f["eglDestroySurface"](self.display, self.surface)
            f["eglTerminate"](self.display)
        self.display = self.surface = self.context = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

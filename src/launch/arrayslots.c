/* A GPUArray as C reads it: its attributes by their slots' offsets, and the
 * operand gate's fast form (the proof a C path needs before it uses an
 * array's memory without the Python gate).
 *
 * GPUArray's attributes are slots (gpuarray._ATTRS).  Every C path that
 * reads an exact GPUArray -- the operators (fastops.c) and NCCL's
 * collectives (interop/nccl.c) -- finds the offsets here once, when it is
 * made, and proves its operands with pygpu_array_proven: one rule, so a
 * change of GPUArray's layout is made in one place (NCCL's path once read
 * the instance dict, and after the attributes became slots it silently fell
 * back to the Python gate on every call).
 */
#include "pygpu.h"

static const char *const slot_names[PYGPU_A_COUNT] = {
    "shape", "strides", "_c", "_f", "gpudata", "dtype", "nbytes", "size", "allocator", "base"};

const char *
pygpu_array_slot_name(int i)
{
    return slot_names[i];
}

Py_ssize_t
pygpu_slot_offset(PyObject *atype, PyObject *name, const char *who)
{
    PyObject *d;
    PyMemberDef *m;
    Py_ssize_t off = -1;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s: attrs must be names, not %.100s", who,
                     Py_TYPE(name)->tp_name);
        return -1;
    }
    d = PyObject_GetAttr(atype, name);
    if (d == NULL)
        PyErr_Clear();
    else if (Py_IS_TYPE(d, &PyMemberDescr_Type)
             && (m = ((PyMemberDescrObject *)d)->d_member)->type == T_OBJECT_EX
             && !(m->flags & READONLY))
        off = m->offset;
    Py_XDECREF(d);
    if (off < 0)
        PyErr_Format(PyExc_TypeError, "%s: %.100s has no slot %R", who,
                     ((PyTypeObject *)atype)->tp_name, name);
    return off;
}

int
pygpu_array_slots_find(pygpu_array_slots *s, PyObject *atype, const char *who)
{
    int i;
    if (!PyType_Check(atype)) {
        PyErr_Format(PyExc_TypeError, "%s: array_type must be a type, not %.100s", who,
                     Py_TYPE(atype)->tp_name);
        return -1;
    }
    for (i = 0; i < PYGPU_A_COUNT; i++) {
        PyObject *name = PyUnicode_FromString(slot_names[i]);
        if (name == NULL)
            return -1;
        s->off[i] = pygpu_slot_offset(atype, name, who);
        Py_DECREF(name);
        if (s->off[i] < 0)
            return -1;
    }
    return 0;
}

/* an exact int >= 0 as a size_t; 0 when obj is not one (no exception) */
int
pygpu_exact_size(PyObject *obj, size_t *out)
{
    Py_ssize_t v;
    if (obj == NULL || !PyLong_CheckExact(obj))
        return 0;
    v = PyLong_AsSsize_t(obj);
    if (v < 0) {
        PyErr_Clear();
        return 0;
    }
    *out = (size_t)v;
    return 1;
}

int
pygpu_array_proven(pygpu_state *st, const pygpu_array_slots *s, PyObject *x, PyObject *ctx,
                   pygpu_DeviceAllocation **alloc, PyObject **nb, size_t *nbytes)
{
    pygpu_DeviceAllocation *a;
    PyObject *g;
    if (PYGPU_ASLOT(s, x, PYGPU_A_C) != Py_True && PYGPU_ASLOT(s, x, PYGPU_A_F) != Py_True)
        return 0;
    g = PYGPU_ASLOT(s, x, PYGPU_A_GPUDATA);
    if (g == NULL || !Py_IS_TYPE(g, st->DeviceAllocationType))
        return 0; /* a view (an int address), a pooled block: the full gate */
    a = (pygpu_DeviceAllocation *)g;
    *nb = PYGPU_ASLOT(s, x, PYGPU_A_NBYTES);
    if ((PyObject *)a->context != ctx || a->freed || !pygpu_exact_size(*nb, nbytes)
        || *nbytes > a->size)
        return 0;
    *alloc = a;
    return 1;
}

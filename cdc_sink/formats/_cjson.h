/* Helpers shared by the JSON decoders' C extensions (_cscan.c, _cflat.c); private. */
#ifndef CDC_SINK_CJSON_H
#define CDC_SINK_CJSON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The length of the well-formed UTF-8 sequence (RFC 3629) starting at a byte >= 0x80
 * at p, or 0. */
static inline int utf8_len(const uint8_t *d, int64_t p, int64_t e) {
    uint8_t c = d[p];
    int n;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (p + n > e) return 0;
    if (d[p + 1] < lo || d[p + 1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (d[p + i] < 0x80 || d[p + i] > 0xBF) return 0;
    return n;
}

/* A C-contiguous buffer of `obj` (writable if asked) of items of `itemsize` bytes
 * (TypeError if not, unless empty) and, when len >= 0, of `len` items (ValueError if
 * not). Returns 0, or -1 with the exception set and nothing to release. */
static inline int get_buffer(PyObject *obj, Py_buffer *b, int writable, Py_ssize_t itemsize,
                             Py_ssize_t len) {
    if (PyObject_GetBuffer(obj, b, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                            : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (b->itemsize != itemsize && b->len) {
        PyErr_Format(PyExc_TypeError, "buffer of item size %zd expected, not %zd", itemsize,
                     b->itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    if (len >= 0 && b->len != len * itemsize) {
        PyErr_Format(PyExc_ValueError, "buffer of %zd items of %zd bytes expected", len,
                     itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* The buffers of a call's positional arguments, all buffers: n of them, of the item
 * sizes given, writable from index `writable_from` on. Returns 0, or -1 with the
 * exception set and nothing to release (release them with released). */
static inline int get_buffers(PyObject *args, int n, const Py_ssize_t *sizes, int writable_from,
                              Py_buffer *b) {
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != n) {
        PyErr_Format(PyExc_TypeError, "%d arguments expected", n);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (get_buffer(PyTuple_GET_ITEM(args, i), &b[i], i >= writable_from, sizes[i], -1) < 0) {
            while (i--) PyBuffer_Release(&b[i]);
            return -1;
        }
    return 0;
}

/* Releases buffers b[0..n-1] and returns `result`: every function's last step, on
 * success (its result) and on failure (NULL, the exception already set). */
static inline PyObject *released(Py_buffer *b, int n, PyObject *result) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&b[i]);
    return result;
}

#endif

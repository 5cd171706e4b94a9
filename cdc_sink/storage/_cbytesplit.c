/*
 * The byte stream split of fixed-width values (cdc_sink.storage.byte_split), in C.
 *
 * split(src, dst, n, width, stride): value i is the `width` bytes at src + i*stride;
 *     byte j of value i goes to dst[j*n + i] (stream j).
 * join(src, dst, n, width, stride): the inverse: byte j of value i comes from
 *     src[j*n + i] and goes to dst + i*stride + j.
 *
 * numpy does this one strided byte at a time (docs/benchmarks-history.md, "Byte-split compressed
 * pages", "How the bytes are moved", compares the two). For 8-byte values
 * both directions are the transpose of 8x8 byte blocks: eight 64-bit loads, three
 * rounds of masked swaps in registers (Hacker's Delight's transpose, on bytes), eight
 * 64-bit stores. Other widths take a plain loop. The GIL is released while copying.
 * Values are read and written in the machine's byte order, as numpy views them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_cmodule.h"
#include <stdint.h>
#include <string.h>

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline void store64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* Transposes the 8x8 byte matrix whose row r is x[r] (byte k of x[r] is column k). */
static inline void transpose8(uint64_t x[8]) {
    uint64_t t;
    for (int r = 0; r < 8; r += 2) {
        t = ((x[r] >> 8) ^ x[r + 1]) & 0x00FF00FF00FF00FFULL;
        x[r + 1] ^= t;
        x[r] ^= t << 8;
    }
    for (int r = 0; r < 8; r += 4) {
        for (int s = r; s < r + 2; s++) {
            t = ((x[s] >> 16) ^ x[s + 2]) & 0x0000FFFF0000FFFFULL;
            x[s + 2] ^= t;
            x[s] ^= t << 16;
        }
    }
    for (int s = 0; s < 4; s++) {
        t = ((x[s] >> 32) ^ x[s + 4]) & 0x00000000FFFFFFFFULL;
        x[s + 4] ^= t;
        x[s] ^= t << 32;
    }
}

/* Byte j of value i moves from src[i*sv + j*sb] to dst[i*dv + j*db], for i < n, j <
 * width. The split reads values (sb = 1) and writes streams (dv = 1); the join reads
 * streams (sv = 1) and writes values (db = 1). Either way an 8x8 block of 8-byte values
 * is eight 8-byte rows read contiguously (values for the split, streams for the join),
 * transposed, and written as eight contiguous rows of the other kind. */
static inline void move_bytes(const unsigned char *src, Py_ssize_t sv, Py_ssize_t sb,
                       unsigned char *dst, Py_ssize_t dv, Py_ssize_t db, Py_ssize_t n,
                       Py_ssize_t width, int split) {
    Py_ssize_t i = 0;
    if (width == 8) {
        Py_ssize_t src_row = split ? sv : sb, dst_row = split ? db : dv;
        uint64_t x[8];
        for (; i + 8 <= n; i += 8) {
            for (int r = 0; r < 8; r++) x[r] = load64(src + i * sv + r * src_row);
            transpose8(x);
            for (int r = 0; r < 8; r++) store64(dst + i * dv + r * dst_row, x[r]);
        }
    }
    for (; i < n; i++)
        for (Py_ssize_t j = 0; j < width; j++) dst[i * dv + j * db] = src[i * sv + j * sb];
}

/* Checks the arguments and moves the bytes without the GIL. `split`: src holds n values
 * at `stride`, dst n*width bytes; join: the other way round. */
static PyObject *run(PyObject *args, int split) {
    Py_buffer src, dst;
    Py_ssize_t n, width, stride;
    if (!PyArg_ParseTuple(args, "y*w*nnn", &src, &dst, &n, &width, &stride)) return NULL;
    Py_ssize_t packed = n * width, spread = n > 0 ? (n - 1) * stride + width : 0;
    Py_ssize_t need_src = split ? spread : packed, need_dst = split ? packed : spread;
    PyObject *result = NULL;
    if (n < 0 || width < 1 || width > 16 || stride < width) {
        PyErr_SetString(PyExc_ValueError, "byte split: bad count, width or stride");
    } else if (src.len < need_src || dst.len < need_dst) {
        PyErr_SetString(PyExc_ValueError, "byte split: buffer too short");
    } else {
        Py_BEGIN_ALLOW_THREADS
        if (split)
            move_bytes(src.buf, stride, 1, dst.buf, 1, n, n, width, 1);
        else
            move_bytes(src.buf, 1, n, dst.buf, stride, 1, n, width, 0);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyObject *py_split(PyObject *self, PyObject *args) { return run(args, 1); }
static PyObject *py_join(PyObject *self, PyObject *args) { return run(args, 0); }

static PyMethodDef methods[] = {
    {"split", py_split, METH_VARARGS,
     "split(src, dst, n, width, stride): byte j of value i (at src + i*stride) to "
     "dst[j*n + i]"},
    {"join", py_join, METH_VARARGS,
     "join(src, dst, n, width, stride): byte j of value i from src[j*n + i] to "
     "dst + i*stride + j"},
    {NULL, NULL, 0, NULL},
};

CDC_SINK_PLAIN_MODULE(_cbytesplit, "Byte stream split of fixed-width values.")

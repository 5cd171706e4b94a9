/*
 * Filling an empty slot array of the key index (cdc_sink.tablet.keyindex), in C.
 *
 * place(hashes, slots, shift, first): for i = 0, 1, ..., n-1 (hashes[i], uint64), take
 *     the first free slot (a negative value: empty or removed) at or after the home
 *     slot hashes[i] >> shift, wrapping at the end, and write row id first + i there.
 *     `slots` is int32 of length 2**(64 - shift). The caller keeps the load low (the
 *     rows' keys are absent and distinct); a probe that finds every slot taken raises
 *     instead of looping.
 *
 * This is linear probing, one row after another, as a scalar hash table inserts. numpy
 * cannot probe row by row, so without this extension the index sorts the rows by home
 * slot and takes a running maximum (KeyIndex._build): 0.46-0.66 s for 10M rows here,
 * against 0.12-0.17 s for this loop. The homes are random, so each insert is a cache
 * miss; the home slot of the row 16 ahead is prefetched, so the misses of several rows
 * overlap instead of coming one after another. The GIL is released while placing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_cmodule.h"
#include <stdint.h>

#define AHEAD 16

/* Returns the number of rows placed: n, or fewer when a probe found no empty slot. */
static Py_ssize_t place(const uint64_t *hashes, Py_ssize_t n, int shift, int32_t *slots,
                        uint64_t mask, int32_t first) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + AHEAD < n) __builtin_prefetch(&slots[hashes[i + AHEAD] >> shift], 1, 0);
        uint64_t p = hashes[i] >> shift, steps = 0;
        while (slots[p] >= 0) {
            if (++steps > mask) return i;  /* every slot taken */
            p = (p + 1) & mask;
        }
        slots[p] = first + (int32_t)i;
    }
    return n;
}

static PyObject *py_place(PyObject *self, PyObject *args) {
    Py_buffer hashes, slots;
    int shift;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "y*w*in", &hashes, &slots, &shift, &first)) return NULL;
    Py_ssize_t n = hashes.len / 8, size = slots.len / 4;
    PyObject *result = NULL;
    if (hashes.len % 8 || slots.len % 4 || size < 1 || (size & (size - 1))) {
        PyErr_SetString(PyExc_ValueError,
                        "place: hashes must be uint64, slots int32 of a power-of-two length");
    } else if (n >= size || first < 0 || first > INT32_MAX - n) {
        PyErr_SetString(PyExc_ValueError, "place: more rows than slots, or bad row ids");
    } else if (shift < 1 || shift > 63 || (uint64_t)size != (uint64_t)1 << (64 - shift)) {
        PyErr_SetString(PyExc_ValueError, "place: shift does not match the slot count");
    } else {
        Py_ssize_t placed;
        Py_BEGIN_ALLOW_THREADS
        placed = place(hashes.buf, n, shift, slots.buf, (uint64_t)size - 1, (int32_t)first);
        Py_END_ALLOW_THREADS
        if (placed < n)
            PyErr_SetString(PyExc_ValueError, "place: no free slot left");
        else
            result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&slots);
    return result;
}

static PyMethodDef methods[] = {
    {"place", py_place, METH_VARARGS,
     "place(hashes, slots, shift, first): row first+i into the first free slot at or "
     "after hashes[i] >> shift (linear probing)"},
    {NULL, NULL, 0, NULL},
};

CDC_SINK_PLAIN_MODULE(_cslots, "Linear-probing placement of the key index's rows.")

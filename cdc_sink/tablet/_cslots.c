/*
 * The key index (cdc_sink.tablet.keyindex) in C: filling its slot array, and its salted
 * hash (SipHash of each key's bytes, cdc_sink.tablet.keyhash).
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
 * slot and takes a running maximum (KeyIndex._build): several passes over arrays of the
 * keys' length where this loop makes one (docs/benchmarks-history.md, "zstd pages by default",
 * "The key index in C", times the two). The homes are random, so each insert is a cache
 * miss; the home slot of the row 16 ahead is prefetched, so the misses of several rows
 * overlap instead of coming one after another. The GIL is released while placing.
 *
 * probe(hashes, slots, shift, row_hash, out): for each i, out[i] (int64) = the first row
 *     id r met probing from the home slot hashes[i] >> shift whose row_hash[r] equals
 *     hashes[i] (uint64), or -1 where the probe reaches an empty slot first (removed
 *     slots are passed over). A lookup's candidates, in one loop where numpy makes a
 *     round of array operations per probe step; the caller compares their keys (two
 *     keys may share a hash) and probes on in numpy for a key that differs.
 *
 * siphash(k0, k1, c, d, data, offsets, width, out): out[i] (uint64) = SipHash-c-d with
 *     the 128-bit key (k0, k1) of row i's bytes: data[offsets[i]:offsets[i+1]] (offsets
 *     int64, n + 1 of them), or with offsets None, data[i*width:(i+1)*width]. Bytes are
 *     read as little-endian words whatever the host (the reference algorithm, and what
 *     the numpy version in keyhash.py computes). The GIL is released while hashing.
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

/* Returns 0, or -1 when a probe met neither an empty slot nor its row (a full table). */
static int probe(const uint64_t *hashes, Py_ssize_t n, int shift, const int32_t *slots,
                 uint64_t mask, const uint64_t *row_hash, Py_ssize_t rows, int64_t *out) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + AHEAD < n) __builtin_prefetch(&slots[hashes[i + AHEAD] >> shift], 0, 0);
        uint64_t p = hashes[i] >> shift, steps = 0;
        int64_t found = -1;
        for (;;) {
            int32_t s = slots[p];
            if (s == -1) break;
            if (s >= 0 && s < rows && row_hash[s] == hashes[i]) {
                found = s;
                break;
            }
            if (++steps > mask) return -1;
            p = (p + 1) & mask;
        }
        out[i] = found;
    }
    return 0;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                           \
    do {                                                                                   \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                         \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                             \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                             \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                         \
    } while (0)

static inline uint64_t le64(const uint8_t *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

/* SipHash-c-d of in[0:len] under the key (k0, k1): the reference algorithm. */
static uint64_t siphash(uint64_t k0, uint64_t k1, int c, int d, const uint8_t *in,
                        size_t len) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    const uint8_t *end = in + (len & ~(size_t)7);
    uint64_t m, b = (uint64_t)len << 56;
    int i;
    for (; in != end; in += 8) {
        m = le64(in);
        v3 ^= m;
        for (i = 0; i < c; i++) SIPROUND;
        v0 ^= m;
    }
    switch (len & 7) {
        case 7: b |= (uint64_t)in[6] << 48; /* fall through */
        case 6: b |= (uint64_t)in[5] << 40; /* fall through */
        case 5: b |= (uint64_t)in[4] << 32; /* fall through */
        case 4: b |= (uint64_t)in[3] << 24; /* fall through */
        case 3: b |= (uint64_t)in[2] << 16; /* fall through */
        case 2: b |= (uint64_t)in[1] << 8;  /* fall through */
        case 1: b |= (uint64_t)in[0];       /* fall through */
        default: break;
    }
    v3 ^= b;
    for (i = 0; i < c; i++) SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    for (i = 0; i < d; i++) SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* Hashes n rows; returns -1 (nothing more written) at the first bad offset, else 0. */
static int hash_rows(uint64_t k0, uint64_t k1, int c, int d, const uint8_t *data,
                     Py_ssize_t size, const int64_t *offs, Py_ssize_t width, uint64_t *out,
                     Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (offs == NULL) {
            out[i] = siphash(k0, k1, c, d, data + i * width, (size_t)width);
        } else {
            int64_t lo = offs[i], hi = offs[i + 1];
            if (lo < 0 || hi < lo || hi > size) return -1;
            out[i] = siphash(k0, k1, c, d, data + lo, (size_t)(hi - lo));
        }
    }
    return 0;
}

static PyObject *py_siphash(PyObject *self, PyObject *args) {
    unsigned long long k0, k1;
    int c, d;
    Py_buffer data, out, offs = {0};
    PyObject *offsets;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "KKiiy*Onw*", &k0, &k1, &c, &d, &data, &offsets, &width, &out))
        return NULL;
    PyObject *result = NULL;
    int have_offs = offsets != Py_None;
    if (have_offs && PyObject_GetBuffer(offsets, &offs, PyBUF_SIMPLE) < 0) goto done_noffs;
    Py_ssize_t n = out.len / 8;
    if (c < 1 || c > 8 || d < 1 || d > 8) {
        PyErr_SetString(PyExc_ValueError, "siphash: rounds must be 1 to 8");
    } else if (out.len % 8) {
        PyErr_SetString(PyExc_ValueError, "siphash: out must be uint64");
    } else if (have_offs ? offs.len != (n + 1) * 8
                         : (width < 0 || (width > 0 && n > data.len / width))) {
        PyErr_SetString(PyExc_ValueError,
                        "siphash: offsets must be n + 1 int64, or width * n bytes of data");
    } else {
        int bad;
        Py_BEGIN_ALLOW_THREADS
        bad = hash_rows(k0, k1, c, d, data.buf, data.len, have_offs ? offs.buf : NULL, width,
                        out.buf, n);
        Py_END_ALLOW_THREADS
        if (bad)
            PyErr_SetString(PyExc_ValueError, "siphash: an offset is outside the data");
        else
            result = Py_NewRef(Py_None);
    }
    if (have_offs) PyBuffer_Release(&offs);
done_noffs:
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    return result;
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

static PyObject *py_probe(PyObject *self, PyObject *args) {
    Py_buffer hashes, slots, row_hash, out;
    int shift;
    if (!PyArg_ParseTuple(args, "y*y*iy*w*", &hashes, &slots, &shift, &row_hash, &out))
        return NULL;
    Py_ssize_t n = hashes.len / 8, size = slots.len / 4;
    PyObject *result = NULL;
    if (hashes.len % 8 || row_hash.len % 8 || out.len != n * 8 || slots.len % 4 || size < 1 ||
        (size & (size - 1))) {
        PyErr_SetString(PyExc_ValueError,
                        "probe: hashes, row_hash uint64, out int64 of n, slots int32 of a "
                        "power-of-two length");
    } else if (shift < 1 || shift > 63 || (uint64_t)size != (uint64_t)1 << (64 - shift)) {
        PyErr_SetString(PyExc_ValueError, "probe: shift does not match the slot count");
    } else {
        int bad;
        Py_BEGIN_ALLOW_THREADS
        bad = probe(hashes.buf, n, shift, slots.buf, (uint64_t)size - 1, row_hash.buf,
                    row_hash.len / 8, out.buf);
        Py_END_ALLOW_THREADS
        if (bad)
            PyErr_SetString(PyExc_ValueError, "probe: no empty slot left");
        else
            result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&slots);
    PyBuffer_Release(&row_hash);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"probe", py_probe, METH_VARARGS,
     "probe(hashes, slots, shift, row_hash, out): out[i] = the first row met from the home "
     "slot of hashes[i] with that hash, or -1 at an empty slot"},
    {"place", py_place, METH_VARARGS,
     "place(hashes, slots, shift, first): row first+i into the first free slot at or "
     "after hashes[i] >> shift (linear probing)"},
    {"siphash", py_siphash, METH_VARARGS,
     "siphash(k0, k1, c, d, data, offsets, width, out): out[i] = SipHash-c-d under the key "
     "(k0, k1) of row i's bytes (data[offsets[i]:offsets[i+1]], or rows of width bytes)"},
    {NULL, NULL, 0, NULL},
};

CDC_SINK_PLAIN_MODULE(_cslots, "The key index's slot placement, lookup probe and salted hash.")

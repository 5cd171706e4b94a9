/* Flat native JSON events decoded in one compiled pass (private; see _jsonflat.py).
 *
 * decode(data, starts, ends, ops, names, nkeys, types, lo, hi,
 *        op, seq, seq_given, ts, ts_given, present, isnull, v, vend, ok) -> int
 *
 * Decodes each event data[starts[i]:ends[i]] of the native `json` format when it is in
 * the common flat form, writing its op, seq, ts_ms and every key and value column it
 * names into the outputs, and sets ok[i] = 1. An event in any other form gets ok[i] = 0
 * and the caller decodes it the general way (cdc_sink/formats/native_json.py), which
 * also gives every refused event its reason: this pass never refuses an event, and it
 * accepts one only when the general path would decode it to the same values.
 *
 * An event is accepted when it is one JSON object, with optional whitespace around every
 * token, whose members are, each at most once and in any order:
 *   "op"    : one of the strings of `ops` (its index is written to op[i]);
 *   "key"   : an object of every key column (names[0..nkeys)) exactly once, or, for a
 *             one-column key, a bare scalar; no null key;
 *   "set"   : an object of value columns (names[nkeys..]), each at most once, or null
 *             or false (sets nothing); a delete's set is ignored;
 *   "seq", "ts_ms" : a plain integer literal within int64 (at most 19 digits).
 * Values: `null` (a null value column), or the JSON value of the column's type:
 *   T_INT    a plain integer literal (-?(0|[1-9][0-9]*), at most 19 digits) within
 *            [lo[c], hi[c]]: v = the integer;
 *   T_FLOAT  any JSON number whose double is finite (not by overflow; an underflow is
 *            left to the general path): v = the bits of the correctly rounded double;
 *   T_FLOAT32 the same, when the double also fits a float32 (the general path reads a
 *            float32 column as doubles, then casts);
 *   T_BOOL   true or false: v = 1 or 0;
 *   T_STRING a string without a backslash, control character or invalid UTF-8:
 *            v, vend = the span of its contents in data;
 *   T_OTHER  nothing (the column is decoded the general way).
 * Output matrices are column-major: entry [c * n + i] is column c of event i. Runs
 * without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_cjson.h"

enum { T_OTHER = 0, T_INT = 1, T_FLOAT = 2, T_BOOL = 3, T_STRING = 4, T_FLOAT32 = 5 };
enum { M_OP = 1, M_KEY = 2, M_SET = 4, M_SEQ = 8, M_TS = 16 };
#define MAX_COLUMNS 4096
#define MAX_NUMBER 64 /* longest float literal converted here */

static locale_t c_locale; /* strtod_l in the C locale, whatever the process's */

typedef struct {
    const uint8_t *d;
    int64_t e;
    /* the columns */
    const char *const *name;
    const Py_ssize_t *name_len;
    int64_t ncols, nkeys, n;
    const int8_t *types;
    const int64_t *lo, *hi;
    /* the ops */
    const char *const *op_name;
    const Py_ssize_t *op_len;
    int64_t nops, delete_code;
    /* outputs */
    uint8_t *present, *isnull;
    int64_t *v, *vend;
    int64_t *seen; /* per column: 1 + the last event that named it */
} Ctx;

static inline int64_t ws(const uint8_t *d, int64_t p, int64_t e) {
    while (p < e && (d[p] == ' ' || d[p] == '\t' || d[p] == '\n' || d[p] == '\r')) p++;
    return p;
}

/* A plain string whose opening quote is at p: the position of its closing quote, or -1
 * (a backslash, a control character, invalid UTF-8, or no closing quote). */
static int64_t plain_string(const uint8_t *d, int64_t p, int64_t e) {
    int64_t q = p + 1;
    while (q < e) {
        uint8_t c = d[q];
        if (c == '"') return q;
        if (c == '\\' || c < 0x20) return -1;
        if (c < 0x80) {
            q++;
            continue;
        }
        int k = utf8_len(d, q, e);
        if (!k) return -1;
        q += k;
    }
    return -1;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

typedef struct {
    int64_t end; /* one past the literal */
    int is_int;  /* no fraction and no exponent */
    int small;   /* an integer literal of at most 19 digits within int64: `value` */
    int64_t value;
} Number;

/* A JSON number (RFC 8259) at p; end = -1 when there is none. */
static Number number(const uint8_t *d, int64_t p, int64_t e) {
    Number r = {-1, 0, 0, 0};
    int64_t q = p;
    int neg = q < e && d[q] == '-';
    q += neg;
    if (q >= e) return r;
    int64_t digits0 = q;
    uint64_t v = 0;
    if (d[q] == '0') q++;
    else if (d[q] >= '1' && d[q] <= '9')
        while (q < e && d[q] >= '0' && d[q] <= '9') {
            if (q - digits0 < 19) v = v * 10 + (uint64_t)(d[q] - '0'); /* < 2^64 */
            q++;
        }
    else
        return r;
    int64_t ndigits = q - digits0;
    int frac = 0, expo = 0;
    if (q < e && d[q] == '.') {
        q++;
        if (q >= e || d[q] < '0' || d[q] > '9') return r;
        while (q < e && d[q] >= '0' && d[q] <= '9') q++;
        frac = 1;
    }
    if (q < e && (d[q] == 'e' || d[q] == 'E')) {
        q++;
        if (q < e && (d[q] == '+' || d[q] == '-')) q++;
        if (q >= e || d[q] < '0' || d[q] > '9') return r;
        while (q < e && d[q] >= '0' && d[q] <= '9') q++;
        expo = 1;
    }
    r.end = q;
    r.is_int = !frac && !expo;
    r.small = r.is_int && ndigits <= 19 && v <= (uint64_t)INT64_MAX + (uint64_t)neg;
    r.value = neg ? (int64_t)(0 - v) : (int64_t)v;
    return r;
}

/* The double of the JSON number d[p:end], correctly rounded; 0 when it is not finite
 * or under/overflows (left to the general path). Exact fast path (Clinger): at most 15
 * significant digits and a power of ten of at most 22, else strtod_l. */
static int to_double(const uint8_t *d, int64_t p, int64_t end, double *out) {
    int neg = d[p] == '-';
    int64_t q = p + neg, mant = 0, scale = 0;
    int sig = 0, exp10 = 0, simple = 1;
    for (; q < end && d[q] != 'e' && d[q] != 'E'; q++) {
        if (d[q] == '.') {
            scale = 1;
            continue;
        }
        if (sig == 0 && d[q] == '0') {
            exp10 -= (int)scale; /* a leading zero after the point */
            continue;
        }
        if (++sig > 15) simple = 0;
        else mant = mant * 10 + (d[q] - '0');
        exp10 -= (int)scale;
    }
    if (q < end) { /* the exponent */
        int64_t x = 0;
        int xneg = 0;
        q++;
        if (d[q] == '+' || d[q] == '-') xneg = d[q++] == '-';
        for (; q < end; q++) {
            x = x * 10 + (d[q] - '0');
            if (x > 100000) {
                simple = 0;
                break;
            }
        }
        exp10 += (int)(xneg ? -x : x);
    }
    if (simple && sig == 0) {
        *out = neg ? -0.0 : 0.0;
        return 1;
    }
    if (simple && exp10 >= -22 && exp10 <= 22) {
        double m = (double)mant;
        m = exp10 < 0 ? m / POW10[-exp10] : m * POW10[exp10];
        *out = neg ? -m : m;
        return 1;
    }
    if (end - p >= MAX_NUMBER) return 0;
    char buf[MAX_NUMBER];
    memcpy(buf, d + p, (size_t)(end - p));
    buf[end - p] = 0;
    errno = 0;
    double x = strtod_l(buf, NULL, c_locale);
    if (errno == ERANGE || !isfinite(x)) return 0;
    *out = x;
    return 1;
}

/* A scalar value of column c at p for event i: writes it and returns one past it, or -1
 * when it is not a value this pass accepts. `nullable`: a null is accepted (value
 * columns; a key is never null). */
static int64_t value(Ctx *x, int64_t c, int64_t i, int64_t p, int nullable) {
    const uint8_t *d = x->d;
    int64_t e = x->e, at = c * x->n + i;
    if (d[p] == 'n') {
        if (!nullable || p + 4 > e || memcmp(d + p, "null", 4)) return -1;
        x->isnull[at] = 1;
        x->present[at] = 1;
        return p + 4;
    }
    switch (x->types[c]) {
    case T_INT: {
        Number r = number(d, p, e);
        if (r.end < 0 || !r.small || r.value < x->lo[c] || r.value > x->hi[c]) return -1;
        x->v[at] = r.value;
        p = r.end;
        break;
    }
    case T_FLOAT:
    case T_FLOAT32: {
        Number r = number(d, p, e);
        double f;
        if (r.end < 0 || !to_double(d, p, r.end, &f)) return -1;
        if (x->types[c] == T_FLOAT32 && !isfinite((double)(float)f)) return -1;
        memcpy(&x->v[at], &f, 8);
        p = r.end;
        break;
    }
    case T_BOOL:
        if (p + 4 <= e && !memcmp(d + p, "true", 4)) {
            x->v[at] = 1;
            p += 4;
        } else if (p + 5 <= e && !memcmp(d + p, "false", 5)) {
            x->v[at] = 0;
            p += 5;
        } else
            return -1;
        break;
    case T_STRING: {
        if (d[p] != '"') return -1;
        int64_t q = plain_string(d, p, e);
        if (q < 0) return -1;
        x->v[at] = p + 1;
        x->vend[at] = q;
        p = q + 1;
        break;
    }
    default:
        return -1;
    }
    x->isnull[at] = 0;
    x->present[at] = 1;
    return p;
}

/* The column among names[from..to) named d[p:q], or -1. */
static int64_t column(const Ctx *x, int64_t from, int64_t to, int64_t p, int64_t q) {
    Py_ssize_t len = (Py_ssize_t)(q - p);
    for (int64_t c = from; c < to; c++)
        if (x->name_len[c] == len && !memcmp(x->name[c], x->d + p, (size_t)len)) return c;
    return -1;
}

/* Members of an object whose '{' is at p, each a column among names[from..to) named at
 * most once: their values are written for event i. Returns one past the '}', or -1.
 * *count = how many members. */
static int64_t columns(Ctx *x, int64_t from, int64_t to, int64_t i, int64_t p, int nullable,
                       int64_t *count) {
    const uint8_t *d = x->d;
    int64_t e = x->e;
    *count = 0;
    p = ws(d, p + 1, e);
    if (p < e && d[p] == '}') return p + 1;
    for (;;) {
        if (p >= e || d[p] != '"') return -1;
        int64_t q = plain_string(d, p, e);
        if (q < 0) return -1;
        int64_t c = column(x, from, to, p + 1, q);
        if (c < 0 || x->seen[c] == i + 1) return -1;
        x->seen[c] = i + 1;
        p = ws(d, q + 1, e);
        if (p >= e || d[p] != ':') return -1;
        p = ws(d, p + 1, e);
        if (p >= e || (p = value(x, c, i, p, nullable)) < 0) return -1;
        ++*count;
        p = ws(d, p, e);
        if (p >= e) return -1;
        if (d[p] == '}') return p + 1;
        if (d[p] != ',') return -1;
        p = ws(d, p + 1, e);
    }
}

static int top_member(const uint8_t *d, int64_t p, int64_t q) {
    int64_t len = q - p;
    if (len == 2 && !memcmp(d + p, "op", 2)) return M_OP;
    if (len == 3 && !memcmp(d + p, "key", 3)) return M_KEY;
    if (len == 3 && !memcmp(d + p, "set", 3)) return M_SET;
    if (len == 3 && !memcmp(d + p, "seq", 3)) return M_SEQ;
    if (len == 5 && !memcmp(d + p, "ts_ms", 5)) return M_TS;
    return 0;
}

/* Decodes event i, data[p:e); returns whether it is accepted. */
static int event(Ctx *x, int64_t i, int64_t p, int8_t *op, int64_t *seq, uint8_t *seq_given,
                 int64_t *ts, uint8_t *ts_given) {
    const uint8_t *d = x->d;
    int64_t e = x->e, nset = 0;
    int got = 0;
    *seq_given = *ts_given = 0;
    p = ws(d, p, e);
    if (p >= e || d[p] != '{') return 0;
    p = ws(d, p + 1, e);
    for (;;) {
        if (p >= e || d[p] != '"') return 0;
        int64_t q = plain_string(d, p, e);
        if (q < 0) return 0;
        int which = top_member(d, p + 1, q);
        if (!which || (got & which)) return 0;
        got |= which;
        p = ws(d, q + 1, e);
        if (p >= e || d[p] != ':') return 0;
        p = ws(d, p + 1, e);
        if (p >= e) return 0;
        if (which == M_OP) {
            if (d[p] != '"' || (q = plain_string(d, p, e)) < 0) return 0;
            int64_t code = -1;
            for (int64_t k = 0; k < x->nops; k++)
                if (x->op_len[k] == q - p - 1 && !memcmp(x->op_name[k], d + p + 1, (size_t)(q - p - 1)))
                    code = k;
            if (code < 0) return 0;
            *op = (int8_t)code;
            p = q + 1;
        } else if (which == M_KEY) {
            int64_t count;
            if (d[p] == '{') {
                if ((p = columns(x, 0, x->nkeys, i, p, 0, &count)) < 0 || count != x->nkeys)
                    return 0;
            } else if (x->nkeys == 1 && d[p] != '[') {
                if ((p = value(x, 0, i, p, 0)) < 0) return 0;
            } else
                return 0;
        } else if (which == M_SET) {
            if (d[p] == '{') {
                if ((p = columns(x, x->nkeys, x->ncols, i, p, 1, &nset)) < 0) return 0;
            } else if (p + 4 <= e && !memcmp(d + p, "null", 4))
                p += 4;
            else if (p + 5 <= e && !memcmp(d + p, "false", 5))
                p += 5;
            else
                return 0;
        } else {
            Number r = number(d, p, e);
            if (r.end < 0 || !r.small) return 0;
            if (which == M_SEQ) {
                *seq = r.value;
                *seq_given = 1;
            } else {
                *ts = r.value;
                *ts_given = 1;
            }
            p = r.end;
        }
        p = ws(d, p, e);
        if (p >= e) return 0;
        if (d[p] == '}') break;
        if (d[p] != ',') return 0;
        p = ws(d, p + 1, e);
    }
    if (ws(d, p + 1, e) != e || !(got & M_OP) || !(got & M_KEY)) return 0;
    if (*op == x->delete_code && nset) /* a delete's set is ignored */
        for (int64_t c = x->nkeys; c < x->ncols; c++)
            if (x->seen[c] == i + 1) x->present[c * x->n + i] = 0;
    return 1;
}

/* Borrowed pointers and lengths of a tuple of bytes; 0 with an exception set if not. */
static int byte_names(PyObject *t, const char **name, Py_ssize_t *len) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(t); k++) {
        PyObject *o = PyTuple_GET_ITEM(t, k);
        if (!PyBytes_Check(o)) {
            PyErr_SetString(PyExc_TypeError, "names must be bytes");
            return 0;
        }
        name[k] = PyBytes_AS_STRING(o);
        len[k] = PyBytes_GET_SIZE(o);
    }
    return 1;
}

#define N_BUF 16

static PyObject *py_decode(PyObject *self, PyObject *args) {
    PyObject *o[N_BUF], *ops, *names;
    Py_ssize_t nkeys, delete_code;
    Py_buffer b[N_BUF];
    int got = 0;
    int64_t accepted = 0;
    void *mem = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO!nO!nOOOOOOOOOOOOO", &o[0], &o[1], &o[2], &PyTuple_Type,
                          &ops, &delete_code, &PyTuple_Type, &names, &nkeys, &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13],
                          &o[14], &o[15]))
        return NULL;
    Py_ssize_t ncols = PyTuple_GET_SIZE(names), nops = PyTuple_GET_SIZE(ops);
    if (nkeys < 1 || nkeys > ncols || ncols > MAX_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "need 1 <= nkeys <= len(names) <= 4096");
        return NULL;
    }
    if (get_buffer(o[1], &b[1], 0, 8, -1) < 0) return NULL;
    got = 1;
    Py_ssize_t n = b[1].len / 8;
    /* data, starts, ends, types, lo, hi; op, seq, seq_given, ts, ts_given (per event);
     * present, isnull, v, vend (per column and event); ok (per event) */
    const Py_ssize_t size[N_BUF] = {1, 8, 8, 1, 8, 8, 1, 8, 1, 8, 1, 1, 1, 8, 8, 1};
    const Py_ssize_t count[N_BUF] = {-1,       n,         n,         ncols,     ncols, ncols,
                                     n,        n,         n,         n,         n,     ncols * n,
                                     ncols * n, ncols * n, ncols * n, n};
    got = 0;
    PyBuffer_Release(&b[1]);
    for (; got < N_BUF; got++)
        if (get_buffer(o[got], &b[got], got >= 6, size[got], count[got]) < 0) goto fail;
    mem = PyMem_Calloc((size_t)(ncols + nops) * (sizeof(char *) + sizeof(Py_ssize_t)) +
                           (size_t)ncols * sizeof(int64_t) + 1,
                       1);
    if (!mem) {
        PyErr_NoMemory();
        goto fail;
    }
    {
        const char **name = mem;
        Py_ssize_t *name_len = (Py_ssize_t *)(name + ncols + nops);
        int64_t *seen = (int64_t *)(name_len + ncols + nops);
        if (!byte_names(names, name, name_len) || !byte_names(ops, name + ncols, name_len + ncols))
            goto fail;
        const uint8_t *data = b[0].buf;
        const int64_t *starts = b[1].buf, *ends = b[2].buf;
        for (Py_ssize_t i = 0; i < n; i++)
            if (starts[i] < 0 || ends[i] > b[0].len || starts[i] > ends[i]) {
                PyErr_Format(PyExc_ValueError, "event %zd is out of the data's bounds", i);
                goto fail;
            }
        Ctx x = {.d = data,
                 .name = name,
                 .name_len = name_len,
                 .ncols = ncols,
                 .nkeys = nkeys,
                 .n = n,
                 .types = b[3].buf,
                 .lo = b[4].buf,
                 .hi = b[5].buf,
                 .op_name = name + ncols,
                 .op_len = name_len + ncols,
                 .nops = nops,
                 .delete_code = delete_code,
                 .present = b[11].buf,
                 .isnull = b[12].buf,
                 .v = b[13].buf,
                 .vend = b[14].buf,
                 .seen = seen};
        int8_t *op = b[6].buf;
        int64_t *seq = b[7].buf, *ts = b[9].buf;
        uint8_t *seq_given = b[8].buf, *ts_given = b[10].buf, *ok = b[15].buf;
        Py_BEGIN_ALLOW_THREADS
        memset(x.present, 0, (size_t)(ncols * n));
        for (Py_ssize_t i = 0; i < n; i++) {
            x.e = ends[i];
            op[i] = -1;
            ok[i] = (uint8_t)event(&x, i, starts[i], &op[i], &seq[i], &seq_given[i], &ts[i],
                                   &ts_given[i]);
            accepted += ok[i];
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(mem);
    return released(b, got, PyLong_FromLongLong(accepted));
fail:
    PyMem_Free(mem);
    return released(b, got, NULL);
}

/* strings(data, starts, lengths, out): out = the concatenation of data[starts[i]:
 * starts[i] + lengths[i]] (the caller sizes out to the sum of lengths). */
static PyObject *py_strings(PyObject *self, PyObject *args) {
    PyObject *o[4];
    Py_buffer b[4];
    int got = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    static const Py_ssize_t size[4] = {1, 8, 8, 1};
    for (; got < 4; got++)
        if (get_buffer(o[got], &b[got], got == 3, size[got], -1) < 0) goto fail;
    {
        const uint8_t *data = b[0].buf;
        const int64_t *starts = b[1].buf, *lengths = b[2].buf;
        uint8_t *out = b[3].buf;
        Py_ssize_t n = b[1].len / 8, total = 0;
        if (b[2].len / 8 != n) {
            PyErr_SetString(PyExc_ValueError, "starts and lengths differ in length");
            goto fail;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (starts[i] < 0 || lengths[i] < 0 || starts[i] + lengths[i] > b[0].len) {
                PyErr_Format(PyExc_ValueError, "span %zd is out of the data's bounds", i);
                goto fail;
            }
            total += lengths[i];
        }
        if (total != b[3].len) {
            PyErr_SetString(PyExc_ValueError, "out is not the sum of the lengths");
            goto fail;
        }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(out, data + starts[i], (size_t)lengths[i]);
            out += lengths[i];
        }
        Py_END_ALLOW_THREADS
    }
    return released(b, got, Py_NewRef(Py_None));
fail:
    return released(b, got, NULL);
}

static PyMethodDef methods[] = {
    {"decode", py_decode, METH_VARARGS,
     "decode(data, starts, ends, ops, delete_code, names, nkeys, types, lo, hi, op, seq, "
     "seq_given, ts, ts_given, present, isnull, v, vend, ok) -> accepted events"},
    {"strings", py_strings, METH_VARARGS,
     "strings(data, starts, lengths, out): the spans concatenated into out"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cflat", "Flat native JSON events, compiled (private).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__cflat(void) {
    c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!c_locale) return PyErr_NoMemory();
    return PyModule_Create(&module);
}

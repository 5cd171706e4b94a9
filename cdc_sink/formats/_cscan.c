/* The JSON structural index in one compiled pass (private; see _cscan.py).
 *
 * scan(data, starts, ends, max_level, max_members, max_depth, event, level, parent,
 *      name_start, name_end, name_escaped, kind, value_start, value_end, value_escaped,
 *      status) -> int
 *
 * Indexes the object members of events data[starts[i]:ends[i]] exactly as the numpy
 * scanner of _jsonscan.py does for an event that is well-formed JSON, writing one entry
 * per member (levels 1..max_level, document order) into the output buffers. Returns the
 * number of members, or -1 - i when event i is anything this strict parser does not
 * accept (bad grammar, a raw line break in a string, ...) or the outputs would overflow
 * (status[i] = ST_ROOM, so the caller can retry with room for more): the caller then
 * indexes the chunk with the numpy scanner, which gives every such event its exact
 * reason. Runs without the GIL.
 *
 * The budgets (issue 38): an accepted event holding more than max_members members at
 * levels 1..max_level, or nested deeper than max_depth (0: no bound), gets status
 * ST_DEEP or ST_MEMBERS (depth first) and no members in the outputs: it is parsed to its
 * end (so a malformed event is still refused as above, and the numpy scanner, which
 * checks the structure before the budgets, agrees), but what it writes is bounded by
 * max_members whatever its size. Nesting has no other limit: the open containers are
 * kept one bit each, and what is recorded per level only down to max_level + 1.
 *
 * status[i] = ST_VERIFIED when event i is also valid JSON text as a whole (RFC 8259
 * grammar of every value, UTF-8 strings, no surrogate escape): such an event needs no
 * further grammar check. ST_ACCEPTED leaves it to grammar() below, which gives the
 * reason of a refused event.
 *
 * grammar() is the grammar check of the events the scan did not verify: the verdict
 * Arrow's JSON reader would reach, computed without it (see _cgrammar.h); unescape()
 * decodes string contents with backslash escapes the way that reader does.
 *
 * Two helpers of the per-column work that follows the index (_jsonstrings.match_strings
 * and _jsonnumbers.int_values use them when built): match() maps byte spans (member names,
 * op strings) to an index in a list of names, and ints() converts the plain decimal
 * integer literals among number spans, leaving every other literal to the general path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_cgrammar.h"
#include "_cjson.h"

#define MAX_LEVEL 16 /* deepest member level indexed (the decoders use 1, 2 and 4) */

/* status[i] of event i */
enum { ST_ACCEPTED = 0, ST_VERIFIED = 1, ST_MEMBERS = 2, ST_DEEP = 3, ST_ROOM = 4 };

/* the KIND_* codes of _jsonscan.py */
enum { K_BAD = 0, K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_TRUE, K_FALSE, K_NULL };

typedef struct {
    int64_t *event, *level, *parent, *name_start, *name_end, *value_start, *value_end;
    uint8_t *name_escaped, *value_escaped;
    int8_t *kind;
    int64_t cap;
} Out;

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int64_t skip_ws(const uint8_t *d, int64_t p, int64_t e) {
    while (p < e && is_ws(d[p])) p++;
    return p;
}

static int hex4(const uint8_t *d, int64_t p, int64_t e, unsigned *v) {
    *v = 0;
    if (p + 4 > e) return 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = d[p + i];
        unsigned x;
        if (c >= '0' && c <= '9') x = c - '0';
        else if (c >= 'a' && c <= 'f') x = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') x = c - 'A' + 10;
        else return 0;
        *v = *v << 4 | x;
    }
    return 1;
}

/* A string whose opening quote is at p: returns the position of its closing quote (or
 * -1: unterminated, or a raw line break inside); *esc tells whether it holds a
 * backslash. Clears *ok unless the string is valid JSON text (RFC 8259: no control
 * character, valid escapes, UTF-8) and holds no surrogate escape (\uD800-\uDFFF, whose
 * pairing rules the parsers differ on). */
static uint8_t plain[256]; /* printable ASCII but '"' and '\\': nothing to check */

static void init_plain(void) {
    for (int c = 0x20; c < 0x80; c++) plain[c] = c != '"' && c != '\\';
}

static int64_t string_end(const uint8_t *d, int64_t p, int64_t e, int *esc, int *ok) {
    int64_t q = p + 1;
    *esc = 0;
    while (q < e) {
        while (q + 4 <= e && plain[d[q]] && plain[d[q + 1]] && plain[d[q + 2]] && plain[d[q + 3]])
            q += 4;
        while (q < e && plain[d[q]]) q++;
        if (q >= e) break;
        uint8_t c = d[q];
        if (c == '"') return q;
        if (c == '\\') {
            *esc = 1;
            if (q + 1 < e) {
                uint8_t x = d[q + 1];
                if (x == 'u') {
                    unsigned v;
                    if (!hex4(d, q + 2, e, &v) || (v >= 0xD800 && v <= 0xDFFF)) *ok = 0;
                } else if (!strchr("\"\\/bfnrt", x) || x == 0) {
                    *ok = 0;
                }
            }
            q += 2;
            continue;
        }
        if (c == '\n' || c == '\r') return -1;
        if (c < 0x20) {
            *ok = 0;
        } else if (c >= 0x80) {
            int n = utf8_len(d, q, e);
            if (n) {
                q += n;
                continue;
            }
            *ok = 0;
        }
        q++;
    }
    return -1;
}

/* Whether d[p:q] is a JSON literal, or a JSON number (RFC 8259) well inside a double's
 * range: Arrow's parser refuses a number too big for a double, so one with more than
 * MAX_EXP integer digits or an exponent beyond +-MAX_EXP is left to it. */
#define MAX_EXP 300
static int scalar_ok(const uint8_t *d, int64_t p, int64_t q) {
    int64_t n = q - p, digits = 0, exp = 0;
    if (n == 4 && !memcmp(d + p, "true", 4)) return 1;
    if (n == 5 && !memcmp(d + p, "false", 5)) return 1;
    if (n == 4 && !memcmp(d + p, "null", 4)) return 1;
    if (p < q && d[p] == '-') p++;
    if (p >= q) return 0;
    if (d[p] == '0') p++;
    else if (d[p] >= '1' && d[p] <= '9')
        while (p < q && d[p] >= '0' && d[p] <= '9') p++, digits++;
    else
        return 0;
    if (p < q && d[p] == '.') {
        p++;
        if (p >= q || d[p] < '0' || d[p] > '9') return 0;
        while (p < q && d[p] >= '0' && d[p] <= '9') p++;
    }
    if (p < q && (d[p] == 'e' || d[p] == 'E')) {
        p++;
        if (p < q && (d[p] == '+' || d[p] == '-')) p++;
        if (p >= q || d[p] < '0' || d[p] > '9') return 0;
        while (p < q && d[p] >= '0' && d[p] <= '9') {
            if (exp <= MAX_EXP) exp = exp * 10 + (d[p] - '0');
            p++;
        }
    }
    return p == q && digits <= MAX_EXP && exp <= MAX_EXP;
}

static int scalar_kind(uint8_t c) {
    if (c == '-' || (c >= '0' && c <= '9') || c == 'N' || c == 'I') return K_NUMBER;
    if (c == 't') return K_TRUE;
    if (c == 'f') return K_FALSE;
    if (c == 'n') return K_NULL;
    return K_BAD;
}

/* One past a scalar starting at p (its bytes up to a blank, ',', '}' or ']'); -1 when it
 * holds a byte the numpy scanner treats as structure. */
static int64_t scalar_end(const uint8_t *d, int64_t p, int64_t e) {
    while (p < e) {
        uint8_t c = d[p];
        if (is_ws(c) || c == ',' || c == '}' || c == ']') return p;
        if (c == '"' || c == '{' || c == '[' || c == '\\') return -1;
        p++;
    }
    return p;
}

/* The limits of a scan: levels indexed, the budgets, and the stack of open containers
 * (one bit per level: 1 for an array; room for the longest event). */
typedef struct {
    int max_level;
    int64_t max_members, max_depth;
    uint64_t *arrays;
} Limits;

#define IS_ARRAY(l, d) (((l)->arrays[(d) >> 6] >> ((d) & 63)) & 1)

/* Indexes one event; returns the new member count, -1 if the event is not accepted, -2
 * if the outputs are full. Clears *ok unless the event is valid JSON text as a whole
 * (every value's grammar checked, UTF-8 in strings; see string_end); sets *over to
 * ST_DEEP or ST_MEMBERS for an accepted event beyond a budget (its members dropped). */
static int64_t scan_event(const uint8_t *d, int64_t s, int64_t e, int64_t ev, const Limits *lim,
                          Out *o, int64_t n, int *ok, int *over) {
    int64_t owner[MAX_LEVEL + 2]; /* the member owning the container open at each level */
    int64_t depth = 0, deepest = 0, n0 = n;
    int64_t cur = -1; /* the member whose value comes next (-1: none recorded) */
    int esc, full = 0; /* full: the member budget is spent, nothing more is recorded */
    const int max_level = lim->max_level;
    int64_t p = skip_ws(d, s, e);
    *over = 0;
    if (p >= e || d[p] != '{') return -1;
    for (;;) {
        /* a value starts at p (blanks skipped) */
        p = skip_ws(d, p, e);
        if (p >= e) return -1;
        uint8_t c = d[p];
        if (c == '{' || c == '[') {
            depth++;
            if (depth > deepest) deepest = depth;
            if (c == '[') lim->arrays[depth >> 6] |= (uint64_t)1 << (depth & 63);
            else lim->arrays[depth >> 6] &= ~((uint64_t)1 << (depth & 63));
            if (depth <= max_level + 1) owner[depth] = cur;
            if (cur >= 0) {
                o->kind[cur] = c == '{' ? K_OBJECT : K_ARRAY;
                o->value_start[cur] = p;
                o->value_escaped[cur] = 0;
            }
            p = skip_ws(d, p + 1, e);
            if (p >= e) return -1;
            if (d[p] == (c == '{' ? '}' : ']')) goto close;
            if (c == '[') {
                cur = -1;
                continue;
            }
            goto name;
        } else if (c == '"') {
            int64_t q = string_end(d, p, e, &esc, ok);
            if (q < 0) return -1;
            if (cur >= 0) {
                o->kind[cur] = K_STRING;
                o->value_start[cur] = p;
                o->value_end[cur] = q + 1;
                o->value_escaped[cur] = (uint8_t)esc;
            }
            p = q + 1;
        } else {
            int k = scalar_kind(c);
            int64_t q;
            if (depth == 0 || k == K_BAD) return -1;
            q = scalar_end(d, p, e);
            if (q < 0) return -1;
            if (!scalar_ok(d, p, q)) *ok = 0;
            if (cur >= 0) {
                o->kind[cur] = (int8_t)k;
                o->value_start[cur] = p;
                o->value_end[cur] = q;
                o->value_escaped[cur] = 0;
            }
            p = q;
        }
    after_value:
        /* after a value: ',' or the closing bracket of the enclosing container */
        p = skip_ws(d, p, e);
        if (p >= e) return -1;
        if (d[p] == ',') {
            p++;
            if (IS_ARRAY(lim, depth)) {
                cur = -1;
                continue;
            }
            goto name;
        }
    close:
        if (d[p] != (IS_ARRAY(lim, depth) ? ']' : '}')) return -1;
        if (depth <= max_level + 1 && owner[depth] >= 0) o->value_end[owner[depth]] = p + 1;
        depth--;
        p++;
        if (depth == 0) {
            if (skip_ws(d, p, e) != e) return -1;
            if (lim->max_depth > 0 && deepest > lim->max_depth) *over = ST_DEEP;
            else if (full) *over = ST_MEMBERS;
            return *over ? n0 : n;
        }
        goto after_value;
    name:
        /* a member of the object at `depth`: "name" : value */
        p = skip_ws(d, p, e);
        if (p >= e || d[p] != '"') return -1;
        {
            int64_t q = string_end(d, p, e, &esc, ok);
            int64_t colon;
            if (q < 0) return -1;
            colon = skip_ws(d, q + 1, e);
            if (colon >= e || d[colon] != ':') return -1;
            cur = -1;
            if (depth <= max_level && !full) {
                if (lim->max_members > 0 && n - n0 >= lim->max_members) {
                    full = 1; /* one member too many: the event is over budget */
                } else {
                    if (n >= o->cap) return -2;
                    o->event[n] = ev;
                    o->level[n] = depth;
                    o->parent[n] = depth == 1 ? -1 : (owner[depth] >= 0 ? owner[depth] : -2);
                    o->name_start[n] = p + 1;
                    o->name_end[n] = q;
                    o->name_escaped[n] = (uint8_t)esc;
                    cur = n++;
                }
            }
            p = colon + 1;
        }
    }
}

/* The first three arguments of every function here: the data, and spans
 * [starts[i], ends[i]) in it. */
typedef struct {
    const uint8_t *data;
    const int64_t *starts, *ends;
    int64_t n;
} Spans;

/* The spans of buffers b[0..2]; 0 with a ValueError when starts and ends differ in
 * length or a span leaves the data (naming the first, `what`: "event", "span", ...). */
static int get_spans(const Py_buffer *b, Spans *sp, const char *what) {
    sp->data = (const uint8_t *)b[0].buf;
    sp->starts = (const int64_t *)b[1].buf;
    sp->ends = (const int64_t *)b[2].buf;
    sp->n = b[1].len / 8;
    if (b[2].len / 8 != sp->n) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        return 0;
    }
    for (int64_t i = 0; i < sp->n; i++)
        if (sp->starts[i] < 0 || sp->ends[i] > b[0].len || sp->starts[i] > sp->ends[i]) {
            PyErr_Format(PyExc_ValueError, "%s %lld is out of the data's bounds", what,
                         (long long)i);
            return 0;
        }
    return 1;
}

/* A ValueError unless an output buffer has the `want` items it needs. */
static int sized(const Py_buffer *b, int64_t want, const char *name) {
    if (b->len / (b->itemsize ? b->itemsize : 1) >= want) return 1;
    PyErr_Format(PyExc_ValueError, "%s needs %lld items", name, (long long)want);
    return 0;
}

/* The buffers of a call whose arguments are data, starts, ends and then n - 3 outputs
 * (item sizes `sizes`), and its spans. Returns 1, or 0 with the exception set and
 * nothing to release. */
static int open_spans(PyObject *args, int n, const Py_ssize_t *sizes, Py_buffer *b, Spans *sp,
                      const char *what) {
    if (get_buffers(args, n, sizes, 3, b) < 0) return 0;
    if (get_spans(b, sp, what)) return 1;
    released(b, n, NULL);
    return 0;
}

#define N_BUF 14

static PyObject *py_scan(PyObject *self, PyObject *args) {
    PyObject *objs[N_BUF];
    int max_level;
    long long max_members, max_depth;
    /* data, starts, ends, the 10 member outputs, then `status` (one per event) */
    static const Py_ssize_t sizes[N_BUF] = {1, 8, 8, 8, 8, 8, 8, 8, 1, 1, 8, 8, 1, 1};
    Py_buffer b[N_BUF];
    int got = 0;
    int64_t n = 0, bad = -1;
    uint64_t *arrays = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOiLLOOOOOOOOOOO", &objs[0], &objs[1], &objs[2], &max_level,
                          &max_members, &max_depth, &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7], &objs[8], &objs[9], &objs[10], &objs[11], &objs[12],
                          &objs[13]))
        return NULL;
    if (max_level < 1 || max_level > MAX_LEVEL) {
        PyErr_Format(PyExc_ValueError, "max_level must be in 1..%d", MAX_LEVEL);
        return NULL;
    }
    for (; got < N_BUF; got++)
        if (get_buffer(objs[got], &b[got], got >= 3, sizes[got], -1) < 0) goto fail;
    {
        Spans sp;
        if (!get_spans(b, &sp, "event")) goto fail;
        Out o;
        o.event = b[3].buf;
        o.level = b[4].buf;
        o.parent = b[5].buf;
        o.name_start = b[6].buf;
        o.name_end = b[7].buf;
        o.name_escaped = b[8].buf;
        o.kind = b[9].buf;
        o.value_start = b[10].buf;
        o.value_end = b[11].buf;
        o.value_escaped = b[12].buf;
        o.cap = b[3].len / 8;
        uint8_t *status = b[13].buf;
        for (int i = 4; i < 13; i++)
            if (b[i].len / b[i].itemsize < o.cap) o.cap = b[i].len / b[i].itemsize;
        if (!sized(&b[13], sp.n, "status")) goto fail;
        int64_t longest = 0;
        for (int64_t i = 0; i < sp.n; i++)
            if (sp.ends[i] - sp.starts[i] > longest) longest = sp.ends[i] - sp.starts[i];
        /* a level opens with a byte: an event is never deeper than it is long */
        arrays = PyMem_Calloc((size_t)(longest / 64 + 2), sizeof(uint64_t));
        if (!arrays) {
            PyErr_NoMemory();
            goto fail;
        }
        Limits lim = {max_level, max_members, max_depth, arrays};
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < sp.n; i++) {
            int ok = 1, over = 0;
            int64_t m = scan_event(sp.data, sp.starts[i], sp.ends[i], i, &lim, &o, n, &ok, &over);
            status[i] = (uint8_t)(m == -2 ? ST_ROOM : over ? over : ok ? ST_VERIFIED : ST_ACCEPTED);
            if (m < 0) {
                bad = i;
                break;
            }
            n = m;
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(arrays);
    return released(b, got, PyLong_FromLongLong(bad >= 0 ? -1 - bad : n));
fail:
    PyMem_Free(arrays);
    return released(b, got, NULL);
}

/* match(data, starts, ends, names, codes): codes[i] = the index in `names` (a tuple of
 * bytes) of the bytes data[starts[i]:ends[i]], or -1. Exact byte comparison through a
 * small open-addressing hash table of the names; runs without the GIL. */
static uint64_t span_hash(const uint8_t *p, int64_t len) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)len;
    for (int64_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static PyObject *py_match(PyObject *self, PyObject *args) {
    PyObject *objs[3], *names, *codes_obj;
    Py_buffer b[4];
    int got = 0;
    int64_t *slots = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO!O", &objs[0], &objs[1], &objs[2], &PyTuple_Type, &names,
                          &codes_obj))
        return NULL;
    static const Py_ssize_t sizes[3] = {1, 8, 8};
    for (; got < 3; got++)
        if (get_buffer(objs[got], &b[got], 0, sizes[got], -1) < 0) goto fail;
    if (get_buffer(codes_obj, &b[3], 1, 8, -1) < 0) goto fail;
    got = 4;
    {
        Spans sp;
        int64_t *codes = (int64_t *)b[3].buf;
        int64_t k = PyTuple_GET_SIZE(names);
        if (!get_spans(b, &sp, "span") || !sized(&b[3], sp.n, "codes")) goto fail;
        const uint8_t *data = sp.data;
        const int64_t *starts = sp.starts, *ends = sp.ends, n = sp.n;
        int64_t cap = 4;
        while (cap < 2 * k) cap <<= 1;
        slots = PyMem_Malloc(sizeof(int64_t) * cap);
        if (!slots) {
            PyErr_NoMemory();
            goto fail;
        }
        for (int64_t s = 0; s < cap; s++) slots[s] = -1;
        for (int64_t j = 0; j < k; j++) {
            PyObject *nm = PyTuple_GET_ITEM(names, j);
            if (!PyBytes_Check(nm)) {
                PyErr_SetString(PyExc_TypeError, "names must be bytes");
                goto fail;
            }
            uint64_t h = span_hash((const uint8_t *)PyBytes_AS_STRING(nm), PyBytes_GET_SIZE(nm));
            int64_t s = (int64_t)(h & (uint64_t)(cap - 1));
            int dup = 0;
            while (slots[s] >= 0) {
                PyObject *o = PyTuple_GET_ITEM(names, slots[s]);
                if (PyBytes_GET_SIZE(o) == PyBytes_GET_SIZE(nm) &&
                    !memcmp(PyBytes_AS_STRING(o), PyBytes_AS_STRING(nm), PyBytes_GET_SIZE(nm)))
                    dup = 1; /* the first of equal names wins */
                s = (s + 1) & (cap - 1);
            }
            if (!dup) slots[s] = j;
        }
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *p = data + starts[i];
            int64_t len = ends[i] - starts[i];
            int64_t s = (int64_t)(span_hash(p, len) & (uint64_t)(cap - 1)), code = -1;
            while (slots[s] >= 0) {
                PyObject *o = PyTuple_GET_ITEM(names, slots[s]);
                if (PyBytes_GET_SIZE(o) == len && !memcmp(PyBytes_AS_STRING(o), p, len)) {
                    code = slots[s];
                    break;
                }
                s = (s + 1) & (cap - 1);
            }
            codes[i] = code;
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(slots);
    return released(b, got, Py_NewRef(Py_None));
fail:
    PyMem_Free(slots);
    return released(b, got, NULL);
}

/* ints(data, starts, ends, values, ok) -> count: for each span that is a plain decimal
 * integer of at most 18 digits (-?[0-9]{1,18}, so it always fits int64), values[i] = its
 * value and ok[i] = 1; else ok[i] = 0 and the caller converts it the general way.
 * Returns how many spans were converted; runs without the GIL. */
static PyObject *py_ints(PyObject *self, PyObject *args) {
    static const Py_ssize_t sizes[5] = {1, 8, 8, 8, 1};
    Py_buffer b[5];
    Spans sp;
    (void)self;
    if (!open_spans(args, 5, sizes, b, &sp, "span")) return NULL;
    if (!sized(&b[3], sp.n, "values") || !sized(&b[4], sp.n, "ok")) return released(b, 5, NULL);
    const uint8_t *data = sp.data;
    int64_t *values = (int64_t *)b[3].buf, count = 0;
    uint8_t *ok = (uint8_t *)b[4].buf;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < sp.n; i++) {
        int64_t p = sp.starts[i], e = sp.ends[i], v = 0;
        int neg = p < e && data[p] == '-';
        p += neg;
        int good = e > p && e - p <= 18;
        for (; good && p < e; p++) {
            uint8_t c = data[p];
            if (c < '0' || c > '9') good = 0;
            else v = v * 10 + (c - '0');
        }
        values[i] = good ? (neg ? -v : v) : 0;
        ok[i] = (uint8_t)good;
        count += good;
    }
    Py_END_ALLOW_THREADS
    return released(b, 5, PyLong_FromLongLong(count));
}

/* grammar(data, starts, ends, codes): codes[i] = the RapidJSON error code of the document
 * data[starts[i]:ends[i]] (0 when it is exactly one JSON value; see _cgrammar.h). Runs
 * without the GIL. */
static PyObject *py_grammar(PyObject *self, PyObject *args) {
    static const Py_ssize_t sizes[4] = {1, 8, 8, 1};
    Py_buffer b[4];
    Spans sp;
    (void)self;
    if (!open_spans(args, 4, sizes, b, &sp, "event")) return NULL;
    if (!sized(&b[3], sp.n, "codes")) return released(b, 4, NULL);
    uint8_t *codes = (uint8_t *)b[3].buf;
    GStack st = {NULL, 0, 0};
    int no_memory = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < sp.n && !no_memory; i++) {
        codes[i] = (uint8_t)grammar_code(sp.data, sp.starts[i], sp.ends[i], &st);
        no_memory = codes[i] == G_NO_MEMORY;
    }
    free(st.items);
    Py_END_ALLOW_THREADS
    return released(b, 4, no_memory ? PyErr_NoMemory() : Py_NewRef(Py_None));
}

/* unescape(data, starts, ends, offsets, out, bad) -> bytes: the contents of the JSON
 * strings data[starts[i]:ends[i]] (between quotes) decoded back to back into out (which
 * needs the sum of their lengths), offsets (int32, n + 1) where each begins; bad[i] = 1
 * (and nothing written) for a string RapidJSON refuses. Runs without the GIL. */
static PyObject *py_unescape(PyObject *self, PyObject *args) {
    static const Py_ssize_t sizes[6] = {1, 8, 8, 4, 1, 1};
    Py_buffer b[6];
    Spans sp;
    (void)self;
    if (!open_spans(args, 6, sizes, b, &sp, "string")) return NULL;
    if (!sized(&b[3], sp.n + 1, "offsets") || !sized(&b[5], sp.n, "bad"))
        return released(b, 6, NULL);
    int64_t need = 0, total = 0;
    for (int64_t i = 0; i < sp.n; i++) need += sp.ends[i] - sp.starts[i];
    if (need > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the strings pass int32 offsets");
        return released(b, 6, NULL);
    }
    if (!sized(&b[4], need, "out")) return released(b, 6, NULL);
    int32_t *offsets = (int32_t *)b[3].buf;
    uint8_t *out = (uint8_t *)b[4].buf, *bad = (uint8_t *)b[5].buf;
    Py_BEGIN_ALLOW_THREADS
    offsets[0] = 0;
    for (int64_t i = 0; i < sp.n; i++) {
        int64_t w = g_unescape(sp.data, sp.starts[i], sp.ends[i], out + total);
        bad[i] = w < 0;
        total += w < 0 ? 0 : w;
        offsets[i + 1] = (int32_t)total;
    }
    Py_END_ALLOW_THREADS
    return released(b, 6, PyLong_FromLongLong(total));
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS,
     "scan(data, starts, ends, max_level, max_members, max_depth, *outputs, status) -> "
     "members, or -1 - event"},
    {"match", py_match, METH_VARARGS,
     "match(data, starts, ends, names, codes): the index in names of each span, or -1"},
    {"grammar", py_grammar, METH_VARARGS,
     "grammar(data, starts, ends, codes): the RapidJSON error code of each document"},
    {"unescape", py_unescape, METH_VARARGS,
     "unescape(data, starts, ends, offsets, out, bad) -> bytes: JSON string contents"},
    {"ints", py_ints, METH_VARARGS,
     "ints(data, starts, ends, values, ok) -> count: plain decimal integers of <= 18 digits"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cscan", "The JSON structural index, compiled (private).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__cscan(void) {
    init_plain();
    return PyModule_Create(&module);
}

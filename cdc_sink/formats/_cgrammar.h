/* The JSON grammar check of whole events, compiled (private; used by _cscan.c).
 *
 * grammar_code(d, p, e) gives the verdict Arrow's JSON reader (pyarrow.json, which runs
 * RapidJSON's iterative reader with kParseIterativeFlag | kParseNanAndInfFlag |
 * kParseStopWhenDoneFlag | kParseNumbersAsStringsFlag) reaches on the document
 * d[p:e]: 0 when it reads as exactly one value, else the RapidJSON error code of the
 * first error, whose message _jsongrammar.py gives as the event's reject reason.
 *
 * It is a transcription of RapidJSON's state machine (reader.h: Predict, Transit,
 * HandleError, ParseStringToStream, ParseNumber), so an event gets the same reason with
 * or without this extension, and the decoders never hand event bytes to Arrow's JSON
 * reader, which can crash the process on some malformed input (pyarrow 26 segfaults on
 * a document starting with `null`). What is RapidJSON's, on purpose:
 * - a NUL byte reads as the end of the input;
 * - NaN, Inf, Infinity (signed or not) are numbers; nothing may follow them;
 * - a positive exponent past 308 minus the fraction digits is "too big" (however
 *   small the number);
 * - bytes >= 0x80 are not checked here (the caller checks UTF-8 first).
 * tests/formats/test_grammar.py checks it against Arrow's reader, message for message.
 */
#ifndef CDC_SINK_CGRAMMAR_H
#define CDC_SINK_CGRAMMAR_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* RapidJSON's ParseErrorCode values, and one of our own */
enum {
    G_OK = 0,
    G_DOCUMENT_EMPTY = 1,
    G_ROOT_NOT_SINGULAR = 2,
    G_VALUE_INVALID = 3,
    G_OBJECT_MISS_NAME = 4,
    G_OBJECT_MISS_COLON = 5,
    G_OBJECT_MISS_COMMA_OR_CURLY = 6,
    G_ARRAY_MISS_COMMA_OR_SQUARE = 7,
    G_STRING_INVALID_HEX = 8,
    G_STRING_SURROGATE_INVALID = 9,
    G_STRING_ESCAPE_INVALID = 10,
    G_STRING_MISS_QUOTE = 11,
    G_STRING_INVALID_ENCODING = 12,
    G_NUMBER_TOO_BIG = 13,
    G_NUMBER_MISS_FRACTION = 14,
    G_NUMBER_MISS_EXPONENT = 15,
    /* ours: Arrow reads no row, or more than one (the structural scan refuses both
     * before the grammar check, so the decoders never give these) */
    G_NO_VALUE = 100,
    G_NOT_SINGLE = 101,
    G_NO_MEMORY = 102,
};

/* states and tokens of RapidJSON's iterative reader, in its order */
enum {
    GS_FINISH, GS_ERROR, GS_START, GS_OBJ_INIT, GS_MEMBER_KEY, GS_MEMBER_VALUE, GS_OBJ_FINISH,
    GS_ARR_INIT, GS_ELEMENT, GS_ARR_FINISH, GS_VALUE, GS_ELEM_DELIM, GS_MEMBER_DELIM,
    GS_KV_DELIM, GS_COUNT
};
enum { GT_LBRACKET, GT_RBRACKET, GT_LCURLY, GT_RCURLY, GT_COMMA, GT_COLON, GT_STRING,
       GT_FALSE, GT_TRUE, GT_NULL, GT_NUMBER, GT_COUNT };

typedef struct {
    const uint8_t *d;
    int64_t p, e;
} GStream;

/* RapidJSON's MemoryStream: the end, and a NUL byte, both peek as 0 */
static inline uint8_t g_peek(const GStream *s) { return s->p < s->e ? s->d[s->p] : 0; }

static inline int g_consume(GStream *s, uint8_t c) {
    if (g_peek(s) == c && c) {
        s->p++;
        return 1;
    }
    return 0;
}

static inline int g_digit(const GStream *s) {
    uint8_t c = g_peek(s);
    return c >= '0' && c <= '9';
}

static inline void g_skip_ws(GStream *s) {
    uint8_t c;
    while ((c = g_peek(s)) == ' ' || c == '\n' || c == '\r' || c == '\t') s->p++;
}

static int g_token(uint8_t c) {
    switch (c) {
    case '[': return GT_LBRACKET;
    case ']': return GT_RBRACKET;
    case '{': return GT_LCURLY;
    case '}': return GT_RCURLY;
    case ',': return GT_COMMA;
    case ':': return GT_COLON;
    case '"': return GT_STRING;
    case 'f': return GT_FALSE;
    case 't': return GT_TRUE;
    case 'n': return GT_NULL;
    default: return GT_NUMBER;
    }
}

/* RapidJSON's Predict table G[state][token] */
static const uint8_t g_predict[GS_COUNT][GT_COUNT] = {
#define E GS_ERROR
#define ALL_E {E, E, E, E, E, E, E, E, E, E, E}
    ALL_E, /* finish */
    ALL_E, /* error */
    {GS_ARR_INIT, E, GS_OBJ_INIT, E, E, E, GS_VALUE, GS_VALUE, GS_VALUE, GS_VALUE, GS_VALUE},
    {E, E, E, GS_OBJ_FINISH, E, E, GS_MEMBER_KEY, E, E, E, E},     /* object initial */
    {E, E, E, E, E, GS_KV_DELIM, E, E, E, E, E},                  /* member key */
    {E, E, E, GS_OBJ_FINISH, GS_MEMBER_DELIM, E, E, E, E, E, E},  /* member value */
    ALL_E,                                                        /* object finish */
    {GS_ARR_INIT, GS_ARR_FINISH, GS_OBJ_INIT, E, E, E, GS_ELEMENT, GS_ELEMENT, GS_ELEMENT,
     GS_ELEMENT, GS_ELEMENT},                                     /* array initial */
    {E, GS_ARR_FINISH, E, E, GS_ELEM_DELIM, E, E, E, E, E, E},    /* element */
    ALL_E,                                                        /* array finish */
    ALL_E,                                                        /* value */
    {GS_ARR_INIT, GS_ARR_FINISH, GS_OBJ_INIT, E, E, E, GS_ELEMENT, GS_ELEMENT, GS_ELEMENT,
     GS_ELEMENT, GS_ELEMENT},                                     /* element delimiter */
    {E, E, E, GS_OBJ_FINISH, E, E, GS_MEMBER_KEY, E, E, E, E},    /* member delimiter */
    {GS_ARR_INIT, E, GS_OBJ_INIT, E, E, E, GS_MEMBER_VALUE, GS_MEMBER_VALUE, GS_MEMBER_VALUE,
     GS_MEMBER_VALUE, GS_MEMBER_VALUE},                           /* key-value delimiter */
#undef ALL_E
#undef E
};

static int g_hex4(GStream *s, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = g_peek(s);
        unsigned x;
        if (c >= '0' && c <= '9') x = c - '0';
        else if (c >= 'A' && c <= 'F') x = c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') x = c - 'a' + 10;
        else return G_STRING_INVALID_HEX;
        *v = *v << 4 | x;
        s->p++;
    }
    return G_OK;
}

/* ParseStringToStream from the opening quote at s->p */
static int g_string(GStream *s) {
    s->p++;
    for (;;) {
        uint8_t c = g_peek(s);
        if (c == '\\') {
            s->p++;
            uint8_t x = g_peek(s);
            if (x && strchr("\"\\/bfnrt", x)) {
                s->p++;
            } else if (x == 'u') {
                unsigned v, v2;
                s->p++;
                if (g_hex4(s, &v)) return G_STRING_INVALID_HEX;
                if (v >= 0xD800 && v <= 0xDFFF) {
                    if (v > 0xDBFF) return G_STRING_SURROGATE_INVALID;
                    if (!g_consume(s, '\\') || !g_consume(s, 'u')) return G_STRING_SURROGATE_INVALID;
                    if (g_hex4(s, &v2)) return G_STRING_INVALID_HEX;
                    if (v2 < 0xDC00 || v2 > 0xDFFF) return G_STRING_SURROGATE_INVALID;
                }
            } else {
                return G_STRING_ESCAPE_INVALID;
            }
        } else if (c == '"') {
            s->p++;
            return G_OK;
        } else if (c < 0x20) {
            return c == 0 ? G_STRING_MISS_QUOTE : G_STRING_INVALID_ENCODING;
        } else {
            s->p++;
        }
    }
}

/* The integer part of ParseNumber (after the sign): only the count of significant
 * digits and whether the value left the 64-bit fast path matter to what follows. */
static void g_integer(GStream *s, int minus, int *digits, int *use64, int *use_double,
                      uint64_t *i64, double *dd) {
    unsigned i = (unsigned)(s->d[s->p++] - '0');
    while (g_digit(s)) {
        if (i >= (minus ? 214748364u : 429496729u) &&
            (i != (minus ? 214748364u : 429496729u) || g_peek(s) > (minus ? '8' : '5'))) {
            *use64 = 1;
            break;
        }
        i = i * 10 + (unsigned)(s->d[s->p++] - '0');
        (*digits)++;
    }
    *i64 = i;
    if (!*use64) return;
    const uint64_t lim = minus ? 0x0CCCCCCCCCCCCCCCULL : 0x1999999999999999ULL;
    while (g_digit(s)) {
        if (*i64 >= lim && (*i64 != lim || g_peek(s) > (minus ? '8' : '5'))) {
            *dd = (double)*i64;
            *use_double = 1;
            break;
        }
        *i64 = *i64 * 10 + (unsigned)(s->d[s->p++] - '0');
        (*digits)++;
    }
    if (*use_double)
        while (g_digit(s)) *dd = *dd * 10 + (s->d[s->p++] - '0');
}

/* ParseNumber with kParseNumbersAsStringsFlag: the value itself is never converted, but
 * RapidJSON still counts fraction digits to bound a positive exponent. */
static int g_number(GStream *s) {
    int minus = g_consume(s, '-'), digits = 0, use64 = 0, use_double = 0;
    uint64_t i64 = 0;
    double dd = 0.0;
    uint8_t c = g_peek(s);
    if (c == '0') {
        s->p++;
    } else if (c >= '1' && c <= '9') {
        g_integer(s, minus, &digits, &use64, &use_double, &i64, &dd);
    } else if (c == 'N') {
        s->p++;
        return g_consume(s, 'a') && g_consume(s, 'N') ? G_OK : G_VALUE_INVALID;
    } else if (c == 'I') {
        s->p++;
        if (!(g_consume(s, 'n') && g_consume(s, 'f'))) return G_VALUE_INVALID;
        if (g_peek(s) == 'i' && !(g_consume(s, 'i') && g_consume(s, 'n') && g_consume(s, 'i') &&
                                   g_consume(s, 't') && g_consume(s, 'y')))
            return G_VALUE_INVALID;
        return G_OK;
    } else {
        return G_VALUE_INVALID;
    }
    int64_t exp_frac = 0;
    if (g_consume(s, '.')) {
        if (!g_digit(s)) return G_NUMBER_MISS_FRACTION;
        if (!use_double) {
            while (g_digit(s)) {
                if (i64 > 0x1FFFFFFFFFFFFFULL) break;
                i64 = i64 * 10 + (unsigned)(s->d[s->p++] - '0');
                exp_frac--;
                if (i64 != 0) digits++;
            }
            dd = (double)i64;
            use_double = 1;
        }
        while (g_digit(s)) {
            if (digits < 17) {
                dd = dd * 10.0 + (s->d[s->p++] - '0');
                exp_frac--;
                if (dd > 0.0) digits++;
            } else {
                s->p++;
            }
        }
    }
    if (g_consume(s, 'e') || g_consume(s, 'E')) {
        int exp_minus = 0;
        if (!g_consume(s, '+')) exp_minus = g_consume(s, '-');
        if (!g_digit(s)) return G_NUMBER_MISS_EXPONENT;
        if (exp_minus) {
            while (g_digit(s)) s->p++;
        } else {
            int64_t exp = 0, max_exp = 308 - exp_frac;
            while (g_digit(s)) {
                exp = exp * 10 + (s->d[s->p++] - '0');
                if (exp > max_exp) return G_NUMBER_TOO_BIG;
            }
        }
    }
    return G_OK;
}

static int g_literal(GStream *s, const char *rest) {
    s->p++;
    for (; *rest; rest++)
        if (!g_consume(s, (uint8_t)*rest)) return G_VALUE_INVALID;
    return G_OK;
}

static int g_scalar(GStream *s) {
    switch (g_peek(s)) {
    case 'n': return g_literal(s, "ull");
    case 't': return g_literal(s, "rue");
    case 'f': return g_literal(s, "alse");
    case '"': return g_string(s);
    default: return g_number(s);
    }
}

/* HandleError: the error of a token the state does not allow */
static int g_state_error(int state) {
    switch (state) {
    case GS_START: return G_DOCUMENT_EMPTY;
    case GS_FINISH: return G_ROOT_NOT_SINGULAR;
    case GS_OBJ_INIT:
    case GS_MEMBER_DELIM: return G_OBJECT_MISS_NAME;
    case GS_MEMBER_KEY: return G_OBJECT_MISS_COLON;
    case GS_MEMBER_VALUE: return G_OBJECT_MISS_COMMA_OR_CURLY;
    case GS_KV_DELIM:
    case GS_ARR_INIT:
    case GS_ELEM_DELIM: return G_VALUE_INVALID;
    default: return G_ARRAY_MISS_COMMA_OR_SQUARE;
    }
}

typedef struct {
    uint8_t *items; /* per open bracket: the state to return to when it closes */
    int64_t n, cap;
} GStack;

static int g_push(GStack *st, uint8_t v) {
    if (st->n == st->cap) {
        int64_t cap = st->cap ? 2 * st->cap : 64;
        uint8_t *items = realloc(st->items, (size_t)cap);
        if (!items) return 0;
        st->items = items;
        st->cap = cap;
    }
    st->items[st->n++] = v;
    return 1;
}

/* Transit for a closing bracket: the state after it, or the error */
static int g_close(GStack *st, int src, int dst, int *code) {
    if (dst == GS_OBJ_FINISH && src == GS_MEMBER_DELIM) *code = G_OBJECT_MISS_NAME;
    else if (dst == GS_ARR_FINISH && src == GS_ELEM_DELIM) *code = G_VALUE_INVALID;
    if (*code) return GS_ERROR;
    int back = st->items[--st->n];
    return back == GS_START ? GS_FINISH : back;
}

/* IterativeParse of one value from s->p (stopping when it is done): its error code */
static int g_value(GStream *s, GStack *st) {
    int state = GS_START, code = G_OK;
    st->n = 0;
    g_skip_ws(s);
    while (g_peek(s)) {
        int dst = g_predict[state][g_token(g_peek(s))];
        switch (dst) {
        case GS_ERROR: break;
        case GS_OBJ_INIT:
        case GS_ARR_INIT: {
            int back = state;
            if (state == GS_ARR_INIT || state == GS_ELEM_DELIM) back = GS_ELEMENT;
            else if (state == GS_KV_DELIM) back = GS_MEMBER_VALUE;
            if (!g_push(st, (uint8_t)back)) return G_NO_MEMORY;
            s->p++;
            break;
        }
        case GS_MEMBER_KEY: code = g_string(s); break;
        case GS_MEMBER_VALUE:
        case GS_ELEMENT:
        case GS_VALUE: code = g_scalar(s); break;
        case GS_OBJ_FINISH:
        case GS_ARR_FINISH: dst = g_close(st, state, dst, &code); s->p++; break;
        default: s->p++; /* delimiters */
        }
        if (code) return code;
        if (dst == GS_ERROR) return g_state_error(state);
        state = dst == GS_VALUE ? GS_FINISH : dst;
        if (state == GS_FINISH) return G_OK;
        g_skip_ws(s);
    }
    return g_state_error(state);
}

/* Arrow's read of the document d[p:e] as rows of values: 0 when it is exactly one */
static int grammar_code(const uint8_t *d, int64_t p, int64_t e, GStack *st) {
    GStream s = {d, p, e};
    int code = g_value(&s, st);
    if (code == G_DOCUMENT_EMPTY && s.p >= s.e) return G_NO_VALUE;
    if (code) return code;
    g_skip_ws(&s);
    if (s.p >= s.e) return G_OK;
    /* Arrow reads on: a token no value starts with (or a NUL) is RapidJSON's "document
     * empty" error at its start state; a value is a second row */
    return g_predict[GS_START][g_token(g_peek(&s))] == GS_ERROR || !g_peek(&s)
               ? G_DOCUMENT_EMPTY
               : G_NOT_SINGLE;
}

/* The contents of the JSON string d[p:e] (between its quotes) decoded as RapidJSON
 * decodes them (escapes to UTF-8, other bytes as they are) into out; returns the number
 * of bytes written, or -1 when RapidJSON refuses the string. out needs e - p bytes. */
static int64_t g_unescape(const uint8_t *d, int64_t p, int64_t e, uint8_t *out) {
    static const uint8_t simple[256] = {['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b',
                                        ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t'};
    GStream s = {d, p, e};
    int64_t n = 0;
    while (s.p < e) {
        uint8_t c = d[s.p];
        if (c == '\\') {
            uint8_t x = s.p + 1 < e ? d[s.p + 1] : 0;
            if (simple[x]) {
                out[n++] = simple[x];
                s.p += 2;
                continue;
            }
            if (x != 'u') return -1;
            unsigned v, v2;
            s.p += 2;
            if (g_hex4(&s, &v)) return -1;
            if (v >= 0xD800 && v <= 0xDFFF) {
                if (v > 0xDBFF || !g_consume(&s, '\\') || !g_consume(&s, 'u') || g_hex4(&s, &v2) ||
                    v2 < 0xDC00 || v2 > 0xDFFF)
                    return -1;
                v = (((v - 0xD800) << 10) | (v2 - 0xDC00)) + 0x10000;
            }
            if (v < 0x80) {
                out[n++] = (uint8_t)v;
            } else if (v < 0x800) {
                out[n++] = (uint8_t)(0xC0 | v >> 6);
                out[n++] = (uint8_t)(0x80 | (v & 0x3F));
            } else if (v < 0x10000) {
                out[n++] = (uint8_t)(0xE0 | v >> 12);
                out[n++] = (uint8_t)(0x80 | ((v >> 6) & 0x3F));
                out[n++] = (uint8_t)(0x80 | (v & 0x3F));
            } else {
                out[n++] = (uint8_t)(0xF0 | v >> 18);
                out[n++] = (uint8_t)(0x80 | ((v >> 12) & 0x3F));
                out[n++] = (uint8_t)(0x80 | ((v >> 6) & 0x3F));
                out[n++] = (uint8_t)(0x80 | (v & 0x3F));
            }
        } else if (c == '"' || c < 0x20) {
            return -1;
        } else {
            out[n++] = c;
            s.p++;
        }
    }
    return n;
}

#endif

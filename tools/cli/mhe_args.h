/* mhe_args.h - the one number parser of the mhe tool's flags (tools/cli/mhe.c
   and tools/cli/mhe_params.c; the config and train fields go through mhe.h's
   own checked parser). A value is the whole text in base 10 (no spaces, no
   trailing characters), inside its range; a float must be finite. Each
   returns 0 when the text is not a number (a usage error, exit status 2),
   1 when it is one (check the range with arg_in_range: exit status 1), and
   prints a message naming the flag and the text. */
#ifndef MHE_ARGS_H
#define MHE_ARGS_H
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* strto* skip leading spaces and read a sign; a flag value may not start so */
static inline int arg_starts_clean(const char *text, int sign_ok) {
    return text && *text && (text[0] >= '0' && text[0] <= '9' ? 1 : sign_ok && (text[0] == '-' || text[0] == '+' || text[0] == '.'));
}

/* an integer; out of long's range is "not a number" here only when strtol says so */
static inline int arg_long(const char *flag, const char *text, long *out) {
    char *end;
    if (!arg_starts_clean(text, 1) || text[0] == '.') {
        fprintf(stderr, "mhe: %s needs an integer, not '%s'\n", flag, text ? text : "");
        return 0;
    }
    errno = 0;
    *out = strtol(text, &end, 10);
    if (*end || end == text) { fprintf(stderr, "mhe: %s needs an integer, not '%s'\n", flag, text); return 0; }
    if (errno == ERANGE) { fprintf(stderr, "mhe: %s %s is out of range\n", flag, text); return -1; }
    return 1;
}

static inline int arg_u64(const char *flag, const char *text, unsigned long long *out) {
    char *end;
    if (!arg_starts_clean(text, 0)) { fprintf(stderr, "mhe: %s needs an unsigned integer, not '%s'\n", flag, text ? text : ""); return 0; }
    errno = 0;
    *out = strtoull(text, &end, 10);
    if (*end || end == text) { fprintf(stderr, "mhe: %s needs an unsigned integer, not '%s'\n", flag, text); return 0; }
    if (errno == ERANGE) { fprintf(stderr, "mhe: %s %s is out of range [0, %llu]\n", flag, text, (unsigned long long)-1); return -1; }
    return 1;
}

/* on the bits, so -ffast-math cannot fold the test away */
static inline int arg_finite(double x) {
    unsigned long long b;
    memcpy(&b, &x, sizeof b);
    return (b >> 52 & 0x7ff) != 0x7ff;
}

/* a finite number: nan, inf and 1e999 are refused */
static inline int arg_double(const char *flag, const char *text, double *out) {
    char *end;
    /* strtod also reads hexadecimal floats (0x1p3): decimal only here */
    if (!arg_starts_clean(text, 1) || strpbrk(text, "xXpP")) { fprintf(stderr, "mhe: %s needs a number, not '%s'\n", flag, text ? text : ""); return 0; }
    errno = 0;
    *out = strtod(text, &end);
    if (*end || end == text) { fprintf(stderr, "mhe: %s needs a number, not '%s'\n", flag, text); return 0; }
    if (!arg_finite(*out) || (errno == ERANGE && fabs(*out) > 1)) { fprintf(stderr, "mhe: %s %s is not a finite number\n", flag, text); return -1; }
    return 1;
}

/* 1 when lo <= v <= hi, else a message with the range */
static inline int arg_in_range(const char *flag, const char *text, double v, double lo, double hi) {
    if (v >= lo && v <= hi) return 1;
    fprintf(stderr, "mhe: %s %s is out of range [%.15g, %.15g]\n", flag, text, lo, hi);
    return 0;
}

/* an integer flag in [lo, hi]: 1 ok, 0 not an integer (exit 2), -1 out of range (exit 1) */
static inline int arg_int_in(const char *flag, const char *text, long lo, long hi, long *out) {
    int r = arg_long(flag, text, out);
    if (r <= 0) return r;
    return arg_in_range(flag, text, (double)*out, (double)lo, (double)hi) ? 1 : -1;
}

/* a finite float flag in [lo, hi]: as arg_int_in */
static inline int arg_double_in(const char *flag, const char *text, double lo, double hi, double *out) {
    int r = arg_double(flag, text, out);
    if (r <= 0) return r;
    return arg_in_range(flag, text, *out, lo, hi) ? 1 : -1;
}
#endif

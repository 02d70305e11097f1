/*
 * The variadic entry points of vargr.h, in C because stable Rust cannot define
 * variadic functions.
 *
 * Each one asks Rust for the format's fields (vargr_format_fields: one parser, in
 * vargr-wire), walks them with va_arg into an array of vargr_arg, and calls the
 * non-variadic Rust function (the *_args forms). Unpack goes the other way: Rust fills
 * the array, this file stores each value through the caller's pointers. The functions
 * are hidden; libvargr exports them through tail-jump trampolines (src/variadic.rs)
 * under their public names.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "vargr.h"

#define SHIM __attribute__((visibility("hidden")))

/* Reads one field's arguments as vargr_stream_send documents them. Integers narrower
 * than int arrive promoted to int, float arrives as double. */
static void read_arg(uint8_t code, vargr_arg *a, va_list *ap)
{
    a->i = 0;
    a->f = 0.0;
    a->ptr = NULL;
    a->len = 0;
    if ((code & VARGR_FIELD_ARRAY) || code == VARGR_FIELD_RAW) {
        a->ptr = va_arg(*ap, const void *);
        a->len = va_arg(*ap, size_t);
        return;
    }
    switch (code) {
    case VARGR_FIELD_CHAR:
    case VARGR_FIELD_SHORT:
    case VARGR_FIELD_INT:
        a->i = va_arg(*ap, int);
        break;
    case VARGR_FIELD_UCHAR:
    case VARGR_FIELD_USHORT:
    case VARGR_FIELD_UINT:
        a->i = (int64_t)va_arg(*ap, unsigned int);
        break;
    case VARGR_FIELD_LONG:
        a->i = va_arg(*ap, int64_t);
        break;
    case VARGR_FIELD_ULONG:
        a->i = (int64_t)va_arg(*ap, uint64_t);
        break;
    case VARGR_FIELD_FLOAT:
    case VARGR_FIELD_DOUBLE:
        a->f = va_arg(*ap, double);
        break;
    case VARGR_FIELD_STR:
        a->ptr = va_arg(*ap, const char *);
        break;
    default:
        break; /* vargr_format_fields only returns the codes above */
    }
}

/* Fills args[0..*n] from the variable arguments. On a format error returns its status
 * with *n = 0; the caller then lets the *_args function report it under its own name. */
static int collect(const char *format, va_list ap, vargr_arg *args, size_t *n)
{
    uint8_t codes[VARGR_MAX_FIELDS];
    va_list cp;
    size_t i;
    int rc = vargr_format_fields(format, codes, VARGR_MAX_FIELDS, n);
    if (rc != VARGR_OK) {
        *n = 0;
        return rc;
    }
    va_copy(cp, ap);
    for (i = 0; i < *n; i++)
        read_arg(codes[i], &args[i], &cp);
    va_end(cp);
    return VARGR_OK;
}

SHIM int vargr_shim_stream_vsend(const vargr_stream *s, int32_t tag, const char *format,
                                 va_list ap)
{
    vargr_arg args[VARGR_MAX_FIELDS];
    size_t n = 0;
    collect(format, ap, args, &n);
    return vargr_stream_send_args(s, tag, format, args, n);
}

SHIM int vargr_shim_stream_send(const vargr_stream *s, int32_t tag, const char *format, ...)
{
    va_list ap;
    int rc;
    va_start(ap, format);
    rc = vargr_shim_stream_vsend(s, tag, format, ap);
    va_end(ap);
    return rc;
}

SHIM int vargr_shim_backend_vsend(const vargr_backend *be, uint32_t stream, int32_t tag,
                                  const char *format, va_list ap)
{
    vargr_arg args[VARGR_MAX_FIELDS];
    size_t n = 0;
    collect(format, ap, args, &n);
    return vargr_backend_send_args(be, stream, tag, format, args, n);
}

SHIM int vargr_shim_backend_send(const vargr_backend *be, uint32_t stream, int32_t tag,
                                 const char *format, ...)
{
    va_list ap;
    int rc;
    va_start(ap, format);
    rc = vargr_shim_backend_vsend(be, stream, tag, format, ap);
    va_end(ap);
    return rc;
}

SHIM int vargr_shim_backend_vsend_to(const vargr_backend *be, uint32_t dest, int32_t tag,
                                     const char *format, va_list ap)
{
    vargr_arg args[VARGR_MAX_FIELDS];
    size_t n = 0;
    collect(format, ap, args, &n);
    return vargr_backend_send_to_args(be, dest, tag, format, args, n);
}

SHIM int vargr_shim_backend_send_to(const vargr_backend *be, uint32_t dest, int32_t tag,
                                    const char *format, ...)
{
    va_list ap;
    int rc;
    va_start(ap, format);
    rc = vargr_shim_backend_vsend_to(be, dest, tag, format, ap);
    va_end(ap);
    return rc;
}

SHIM int vargr_shim_packet_vcreate(vargr_packet **out, uint32_t stream, int32_t tag,
                                   const char *format, va_list ap)
{
    vargr_arg args[VARGR_MAX_FIELDS];
    size_t n = 0;
    collect(format, ap, args, &n);
    return vargr_packet_create_args(out, stream, tag, format, args, n);
}

SHIM int vargr_shim_packet_create(vargr_packet **out, uint32_t stream, int32_t tag,
                                  const char *format, ...)
{
    va_list ap;
    int rc;
    va_start(ap, format);
    rc = vargr_shim_packet_vcreate(out, stream, tag, format, ap);
    va_end(ap);
    return rc;
}

/* Stores an unpacked array (or string) through a T ** destination, or frees it when
 * the caller passed NULL to skip the field. */
#define STORE_PTR(T)                                                                     \
    do {                                                                                 \
        T **dst = va_arg(*ap, T **);                                                     \
        if (dst)                                                                         \
            *dst = (T *)a->ptr;                                                          \
        else                                                                             \
            vargr_free((void *)a->ptr);                                                  \
    } while (0)

#define STORE_ARRAY(T)                                                                   \
    do {                                                                                 \
        size_t *len;                                                                     \
        STORE_PTR(T);                                                                    \
        len = va_arg(*ap, size_t *);                                                     \
        if (len)                                                                         \
            *len = a->len;                                                               \
    } while (0)

#define STORE_SCALAR(T, v)                                                               \
    do {                                                                                 \
        T *dst = va_arg(*ap, T *);                                                       \
        if (dst)                                                                         \
            *dst = (T)(v);                                                               \
    } while (0)

static void store(uint8_t code, const vargr_arg *a, va_list *ap)
{
    switch (code) {
    case VARGR_FIELD_CHAR: STORE_SCALAR(int8_t, a->i); break;
    case VARGR_FIELD_UCHAR: STORE_SCALAR(uint8_t, a->i); break;
    case VARGR_FIELD_SHORT: STORE_SCALAR(int16_t, a->i); break;
    case VARGR_FIELD_USHORT: STORE_SCALAR(uint16_t, a->i); break;
    case VARGR_FIELD_INT: STORE_SCALAR(int32_t, a->i); break;
    case VARGR_FIELD_UINT: STORE_SCALAR(uint32_t, a->i); break;
    case VARGR_FIELD_LONG: STORE_SCALAR(int64_t, a->i); break;
    case VARGR_FIELD_ULONG: STORE_SCALAR(uint64_t, a->i); break;
    case VARGR_FIELD_FLOAT: STORE_SCALAR(float, a->f); break;
    case VARGR_FIELD_DOUBLE: STORE_SCALAR(double, a->f); break;
    case VARGR_FIELD_STR: STORE_PTR(char); break;
    case VARGR_FIELD_RAW: STORE_ARRAY(void); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_CHAR: STORE_ARRAY(int8_t); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_UCHAR: STORE_ARRAY(uint8_t); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_SHORT: STORE_ARRAY(int16_t); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_USHORT: STORE_ARRAY(uint16_t); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_INT: STORE_ARRAY(int32_t); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_UINT: STORE_ARRAY(uint32_t); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_LONG: STORE_ARRAY(int64_t); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_ULONG: STORE_ARRAY(uint64_t); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_FLOAT: STORE_ARRAY(float); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_DOUBLE: STORE_ARRAY(double); break;
    case VARGR_FIELD_ARRAY | VARGR_FIELD_STR: STORE_ARRAY(char *); break;
    default: break; /* vargr_format_fields only returns the codes above */
    }
}

SHIM int vargr_shim_packet_vunpack(const vargr_packet *p, const char *format, va_list ap)
{
    uint8_t codes[VARGR_MAX_FIELDS];
    vargr_arg args[VARGR_MAX_FIELDS];
    size_t n = 0, i;
    va_list cp;
    int rc = vargr_format_fields(format, codes, VARGR_MAX_FIELDS, &n);
    if (rc != VARGR_OK)
        /* Reported again under vargr_packet_unpack's name. */
        return vargr_packet_unpack_args(p, format, NULL, 0);
    rc = vargr_packet_unpack_args(p, format, args, n);
    if (rc != VARGR_OK)
        return rc;
    va_copy(cp, ap);
    for (i = 0; i < n; i++)
        store(codes[i], &args[i], &cp);
    va_end(cp);
    return VARGR_OK;
}

SHIM int vargr_shim_packet_unpack(const vargr_packet *p, const char *format, ...)
{
    va_list ap;
    int rc;
    va_start(ap, format);
    rc = vargr_shim_packet_vunpack(p, format, ap);
    va_end(ap);
    return rc;
}

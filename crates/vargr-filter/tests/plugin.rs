//! C-ABI plugins: the example plugin, helper functions, and every way loading can fail.
//! Needs a C compiler (`cc`) on the PATH.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use vargr_filter::{apply_guarded, FilterError, Registry};
use vargr_wire::Value;

fn example(dir: &Path) -> PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/filter-plugin/int_filters.c");
    compile(dir, "libint_filters.so", Source::File(src))
}

fn ints(xs: &[i32]) -> Vec<vargr_wire::Packet> {
    xs.iter().map(|x| pkt("%d", vec![Value::Int(*x)])).collect()
}

#[test]
fn example_plugin_filters() {
    let dir = tempfile::tempdir().unwrap();
    let so = example(dir.path());
    let mut r = Registry::with_builtins();
    let names = r.load_plugin(&so).unwrap();
    assert_eq!(names, vec!["plugin_sum", "int_max_plus"]);
    assert!(r.names().contains(&"plugin_sum".to_string()));
    assert_eq!(
        r.load_plugin(&so).unwrap(),
        names,
        "loading twice is harmless"
    );

    let mut sum = r.create("plugin_sum").unwrap();
    assert_eq!(sum.name(), "plugin_sum");
    let out = apply_guarded(sum.as_mut(), &ctx(true, 3), ints(&[1, 2, 39])).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (
            out[0].format.as_str(),
            &out[0].values,
            out[0].tag,
            out[0].stream
        ),
        ("%d", &vec![Value::Int(42)], TAG, STREAM)
    );
    let out = apply_guarded(sum.as_mut(), &ctx(true, 2), ints(&[i32::MAX, 1])).unwrap();
    assert_eq!(out[0].values, vec![Value::Int(i32::MIN)]);
    assert!(apply_guarded(sum.as_mut(), &ctx(true, 0), vec![])
        .unwrap()
        .is_empty());

    // Two instances, two states.
    let mut a = r.create("int_max_plus:1").unwrap();
    let mut b = r.create("int_max_plus:100").unwrap();
    assert_eq!(
        apply_guarded(a.as_mut(), &ctx(false, 3), ints(&[5, -2, 9])).unwrap()[0].values,
        vec![Value::Int(10)]
    );
    assert_eq!(
        apply_guarded(b.as_mut(), &ctx(false, 3), ints(&[5, -2, 9])).unwrap()[0].values,
        vec![Value::Int(109)]
    );
    assert_eq!(
        apply_guarded(
            r.create("int_max_plus").unwrap().as_mut(),
            &ctx(true, 1),
            ints(&[-7])
        )
        .unwrap()[0]
            .values,
        vec![Value::Int(-7)]
    );

    // Errors: create and apply, with and without last_error.
    match r.create("int_max_plus:ten").err().unwrap() {
        FilterError::PluginFailed {
            filter,
            status,
            message,
        } => {
            assert_eq!((filter.as_str(), status), ("int_max_plus", 1));
            assert_eq!(message, "int_max_plus: \"ten\" is not an integer");
        }
        other => panic!("{other:?}"),
    }
    let e = apply_guarded(
        a.as_mut(),
        &ctx(true, 1),
        vec![pkt("%f", vec![Value::Float(1.0)])],
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "int_max_plus: plugin returned status 7: packet 0 has format \"%f\", int_max_plus needs \"%d\"");
    let e = apply_guarded(
        sum.as_mut(),
        &ctx(true, 1),
        vec![pkt("%f", vec![Value::Float(1.0)])],
    )
    .unwrap_err();
    assert!(
        matches!(e, FilterError::PluginFailed { status: 2, .. }),
        "{e}"
    );

    // Dropping instances, then the registry, unloads cleanly.
    drop((sum, a, b));
    drop(r);
}

const PROBE: &str = r#"
#include <string.h>
#include "vargr_filter.h"

static void put(uint8_t **p, const void *v, size_t n) { memcpy(*p, v, n); *p += n; }

/* Reads "%ad %s %lf %as %uld %b" and emits "%ld %lf %ud %d" = (sum of the array, the double,
 * total string bytes, error codes seen on purpose). Assumes a little-endian host. */
static int probe_apply(void *state, const vargr_filter_ctx *ctx, const vargr_packet_view *w,
                       size_t n, const vargr_host_api *host, void *out) {
    (void)state;
    if (n != 1 || w[0].num_fields != 6 || host->abi_version != VARGR_FILTER_ABI_VERSION) return 90;
    uint32_t elem; const void *ptr; size_t count; int64_t sum = 0;
    if (host->array(&w[0], 0, &elem, &ptr, &count) || elem != VARGR_ELEM_INT) return 91;
    for (size_t i = 0; i < count; i++) sum += ((const int32_t *)ptr)[i];
    double d; if (host->get_f64(&w[0], 2, &d)) return 92;
    const char *s; size_t len; uint32_t bytes = 0;
    if (host->get_str(&w[0], 1, 0, &s, &len)) return 93;
    bytes += len;
    for (uint32_t i = 0; host->get_str(&w[0], 3, i, &s, &len) == VARGR_OK; i++) bytes += len;
    if (host->array(&w[0], 5, &elem, &ptr, &count) || elem != VARGR_ELEM_RAW) return 94;
    bytes += count;
    int32_t codes = 0; int64_t big;
    codes += host->get_i64(&w[0], 9, &big) == VARGR_ERR_FIELD;
    codes += host->get_i64(&w[0], 2, &big) == VARGR_ERR_TYPE;
    codes += host->get_i64(&w[0], 4, &big) == VARGR_ERR_RANGE;
    codes += host->array(&w[0], 1, &elem, &ptr, &count) == VARGR_ERR_TYPE;
    codes += (int32_t)ctx->is_root * 100;
    uint8_t buf[24], *p = buf;
    put(&p, &sum, 8); put(&p, &d, 8); put(&p, &bytes, 4); put(&p, &codes, 4);
    return host->emit(out, w[0].tag, "%ld %lf %ud %d", buf, sizeof buf);
}

/* Emits a %d with three bytes, then claims success. */
static int bad_emit_apply(void *state, const vargr_filter_ctx *ctx, const vargr_packet_view *w,
                          size_t n, const vargr_host_api *host, void *out) {
    (void)state; (void)ctx; (void)w; (void)n;
    uint8_t three[3] = {1, 2, 3};
    host->emit(out, 0, "%d", three, 3);
    return 0;
}

static int create(const char *params, void **state, char *err, size_t len) {
    (void)params; (void)err; (void)len; *state = NULL; return 0;
}
static void destroy(void *state) { (void)state; }

static const vargr_filter_desc LIST[] = {
    {"probe", NULL, create, probe_apply, destroy, NULL},
    {"bad_emit", NULL, create, bad_emit_apply, destroy, NULL},
};
uint32_t vargr_filter_abi_version(void) { return VARGR_FILTER_ABI_VERSION; }
const vargr_filter_desc *vargr_filter_list(size_t *n) { *n = 2; return LIST; }
"#;

#[test]
fn host_helpers_and_emit_validation() {
    let dir = tempfile::tempdir().unwrap();
    let so = compile(dir.path(), "libprobe.so", Source::Text(PROBE));
    let mut r = Registry::default();
    assert_eq!(r.load_plugin(&so).unwrap(), vec!["probe", "bad_emit"]);
    let input = pkt(
        "%ad %s %lf %as %uld %b",
        vec![
            Value::IntArray(vec![1, -2, 40]),
            Value::Str("héllo".into()),
            Value::Double(2.5),
            Value::StrArray(vec!["ab".into(), "".into(), "cde".into()]),
            Value::ULong(u64::MAX),
            Value::Raw(bytes::Bytes::from_static(b"1234567")),
        ],
    );
    let out = apply_guarded(
        r.create("probe").unwrap().as_mut(),
        &ctx(true, 1),
        vec![input],
    )
    .unwrap();
    assert_eq!(out[0].format.as_str(), "%ld %lf %ud %d");
    assert_eq!(
        out[0].values,
        vec![
            Value::Long(39),
            Value::Double(2.5),
            Value::UInt(6 + 5 + 7),
            Value::Int(104)
        ]
    );
    assert_eq!(out[0].source, u32::MAX);

    let e = apply_guarded(
        r.create("bad_emit").unwrap().as_mut(),
        &ctx(true, 1),
        ints(&[1]),
    )
    .unwrap_err();
    assert!(matches!(e, FilterError::Format { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("bad_emit: emitted an invalid packet: "),
        "{e}"
    );
}

#[test]
fn load_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Registry::with_builtins();
    let err = |r: &mut Registry, p: &Path| r.load_plugin(p).unwrap_err().to_string();

    let e = err(&mut r, &dir.path().join("nope.so"));
    assert!(e.contains("nope.so") && e.contains("cannot open"), "{e}");

    let text = dir.path().join("text.so");
    std::fs::write(&text, "not a shared object").unwrap();
    assert!(err(&mut r, &text).contains("cannot load"));

    let none = compile(
        dir.path(),
        "libnone.so",
        Source::Text("int unrelated(void) { return 1; }\n"),
    );
    let e = err(&mut r, &none);
    assert!(
        e.contains("missing symbol vargr_filter_abi_version: not a vargr filter plugin"),
        "{e}"
    );

    let v2 = compile(
        dir.path(),
        "libv2.so",
        Source::Text(
            "#include <stdint.h>\nuint32_t vargr_filter_abi_version(void) { return 2; }\n",
        ),
    );
    let e = err(&mut r, &v2);
    assert!(
        e.contains("plugin speaks filter ABI version 2, this vargr speaks 1"),
        "{e}"
    );

    let nolist = compile(
        dir.path(),
        "libnolist.so",
        Source::Text(
            "#include <stdint.h>\nuint32_t vargr_filter_abi_version(void) { return 1; }\n",
        ),
    );
    assert!(err(&mut r, &nolist).contains("missing symbol vargr_filter_list"));

    let bad_desc = compile(
        dir.path(),
        "libbaddesc.so",
        Source::Text(
            "#include \"vargr_filter.h\"\nstatic const vargr_filter_desc L[] = {{\"has:colon\", 0, 0, 0, 0, 0}};\n\
             uint32_t vargr_filter_abi_version(void) { return VARGR_FILTER_ABI_VERSION; }\n\
             const vargr_filter_desc *vargr_filter_list(size_t *n) { *n = 1; return L; }\n",
        ),
    );
    assert!(err(&mut r, &bad_desc).contains("no valid name"));

    let no_fns = compile(
        dir.path(),
        "libnofns.so",
        Source::Text(
            "#include \"vargr_filter.h\"\nstatic const vargr_filter_desc L[] = {{\"ok\", 0, 0, 0, 0, 0}};\n\
             uint32_t vargr_filter_abi_version(void) { return VARGR_FILTER_ABI_VERSION; }\n\
             const vargr_filter_desc *vargr_filter_list(size_t *n) { *n = 1; return L; }\n",
        ),
    );
    assert!(err(&mut r, &no_fns).contains("lacks create, apply or destroy"));

    // The same filters from another file clash with the names already registered.
    let so = example(dir.path());
    r.load_plugin(&so).unwrap();
    let copy = dir.path().join("copy.so");
    std::fs::copy(&so, &copy).unwrap();
    assert!(err(&mut r, &copy).contains("\"plugin_sum\" is already registered"));
    assert!(
        r.names().iter().all(|n| n != "ok"),
        "failed loads register nothing"
    );
}

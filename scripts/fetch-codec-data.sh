#!/bin/sh
# Real data for `vargr bench codec`: arrays nobody on this project wrote, so that the codec
# benchmark is not judged only on data made to suit the codecs.
#
#   scripts/fetch-codec-data.sh [DIR]        (default DIR: target/codec-data)
#
# - matplotlib's sample data (from its wheel, fetched with `pip download`, no
#   dependencies): a digital elevation model (int16), sea-floor topography (float32), an
#   MRI slice (uint16, stored big-endian), EEG traces (float64), a membrane potential
#   recording (float32), stock prices (float64 columns) and a CSV file (text);
# - the largest ELF binary in /usr/bin, capped at $BULK_MB MiB (default 64), as bytes
#   (also the bulk-transfer file).
#
# Every array becomes a raw little-endian file DIR/NAME.DTYPE, listed in DIR/manifest.tsv
# (name, dtype, file, bytes, source), which the benchmark reads. Conversion uses only
# Python's standard library (.npz is a zip of .npy files whose header gives dtype and
# shape). Idempotent: a second run downloads and converts nothing and only prints the
# manifest. Exit status non-zero, with the reason on stderr, if something is missing.
set -eu

DIR=${1:-target/codec-data}
BULK_MB=${BULK_MB:-64}
PYTHON=${PYTHON:-python3}

command -v "$PYTHON" >/dev/null 2>&1 || {
    echo "fetch-codec-data: $PYTHON not found (needed for pip and the conversion)" >&2
    exit 1
}
mkdir -p "$DIR/wheel"

if [ ! -s "$DIR/manifest.tsv" ]; then
    if ! ls "$DIR"/wheel/matplotlib-*.whl >/dev/null 2>&1; then
        # Only the wheel itself: the sample data needs none of matplotlib's dependencies.
        # Bounded retries, so that an offline machine fails in seconds, not minutes.
        if ! "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
            --retries 1 --timeout 30 \
            --dest "$DIR/wheel" matplotlib >"$DIR/pip.log" 2>&1; then
            echo "fetch-codec-data: 'pip download matplotlib' failed (see $DIR/pip.log):" >&2
            tail -n 3 "$DIR/pip.log" >&2
            exit 1
        fi
    fi
    WHEEL=$(ls "$DIR"/wheel/matplotlib-*.whl | head -n 1)

    "$PYTHON" - "$WHEEL" "$DIR" "$BULK_MB" <<'EOF'
import ast, gzip, io, os, struct, sys, zipfile

wheel, out, bulk_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
src = os.path.join(out, "sample_data")
rows = []

# Unpack mpl-data/sample_data (kept for inspection; the conversion reads from there).
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        if "/mpl-data/sample_data/" in n and not n.endswith("/"):
            dest = os.path.join(src, n.split("/mpl-data/sample_data/", 1)[1])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(z.read(n))
origin = "matplotlib " + os.path.basename(wheel).split("-")[1] + " wheel: sample_data/"

def emit(name, dtype, data, source):
    path = os.path.join(out, name + "." + dtype)
    with open(path, "wb") as f:
        f.write(data)
    rows.append((name, dtype, os.path.basename(path), len(data), source))

def npy(blob):
    """(descr, shape, raw bytes) of a .npy file, version 1 or 2."""
    if blob[:6] != b"\x93NUMPY":
        raise ValueError("not a .npy file")
    if blob[6] == 1:
        hlen, start = struct.unpack("<H", blob[8:10])[0], 10
    else:
        hlen, start = struct.unpack("<I", blob[8:12])[0], 12
    header = ast.literal_eval(blob[start:start + hlen].decode("latin1"))
    if header["fortran_order"]:
        raise ValueError("Fortran-ordered arrays are not handled")
    return header["descr"], header["shape"], blob[start + hlen:]

def npz_member(path, member):
    with zipfile.ZipFile(path) as z:
        return npy(z.read(member))

NPY = {"<i2": "i16", "<u2": "u16", "<i4": "i32", "<f4": "f32", "<f8": "f64"}

def plain_array(file, member, name):
    descr, shape, raw = npz_member(os.path.join(src, file), member)
    dtype = NPY[descr]
    emit(name, dtype, raw, origin + file + ":" + member + " " + descr + " " + str(shape))

# Digital elevation model of the Jacksboro fault: int16 heights, 344 x 403.
plain_array("jacksboro_fault_dem.npz", "elevation.npy", "dem-elevation")
# Topography and bathymetry: float32, 91 x 120.
plain_array("topobathy.npz", "topo.npy", "topobathy")

# Stock prices: a record array; the float64 columns, one after the other.
descr, shape, raw = npz_member(os.path.join(src, "goog.npz"), "price_data.npy")
width = {"<f8": 8, "<i8": 8, "<M8[D]": 8}
offsets, off = {}, 0
for field, t in descr:
    offsets[field] = (off, t)
    off += width[t]
cols = [f for f, t in descr if t == "<f8"]
data = bytearray()
for c in cols:
    o = offsets[c][0]
    for r in range(shape[0]):
        data += raw[r * off + o: r * off + o + 8]
emit("goog-prices", "f64", bytes(data),
     origin + "goog.npz:price_data.npy columns " + ",".join(cols))

# EEG: raw float64, 800 samples x 4 channels (matplotlib's mri_with_eeg example reads
# it with dtype=float); membrane potential: raw float32 (its fill-between example).
for file, dtype, size, name in (("eeg.dat", "f64", 8, "eeg"),
                                ("membrane.dat", "f32", 4, "membrane")):
    blob = open(os.path.join(src, file), "rb").read()
    code = "<%d%s" % (len(blob) // size, "d" if size == 8 else "f")
    vals = struct.unpack(code, blob[: len(blob) // size * size])
    if not all(abs(v) < 1e6 for v in vals):
        raise ValueError(file + ": values do not look like " + dtype)
    emit(name, dtype, blob, origin + file + " (raw " + dtype + ")")

# MRI slice: 256 x 256 uint16, stored big-endian; made little-endian like the rest.
blob = gzip.open(os.path.join(src, "s1045.ima.gz")).read()
n = len(blob) // 2
emit("mri-s1045", "u16", struct.pack("<%dH" % n, *struct.unpack(">%dH" % n, blob)),
     origin + "s1045.ima.gz (gunzipped, big-endian uint16 256x256)")

# Text: a CSV of stock quotes.
emit("stocks-csv", "u8", open(os.path.join(src, "Stocks.csv"), "rb").read(),
     origin + "Stocks.csv")

# The largest ELF executable in /usr/bin, capped.
best = None
for e in os.scandir("/usr/bin"):
    try:
        if e.is_file() and not e.is_symlink():
            with open(e.path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    size = e.stat().st_size
                    if best is None or size > best[0]:
                        best = (size, e.path)
    except OSError:
        pass
if best is not None:
    with open(best[1], "rb") as f:
        blob = f.read(bulk_mb << 20)
    emit("system-binary", "u8", blob,
         best[1] + " (ELF, first %d of %d bytes)" % (len(blob), best[0]))

with open(os.path.join(out, "manifest.tsv.tmp"), "w") as f:
    for r in rows:
        f.write("\t".join(str(x) for x in r) + "\n")
os.replace(os.path.join(out, "manifest.tsv.tmp"), os.path.join(out, "manifest.tsv"))
EOF
fi

printf '%-15s %-5s %10s  %s\n' name dtype bytes source
while IFS="$(printf '\t')" read -r name dtype file bytes source; do
    printf '%-15s %-5s %10s  %s\n' "$name" "$dtype" "$bytes" "$source"
done <"$DIR/manifest.tsv"

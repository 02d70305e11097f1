//! Segmenters by name: `cdc:2k:8k:64k`, `tiles:64x16`, `varg:width=4,every=32`, ...

use super::{
    Cdc, Fixed, NdArray, SegmentError, Segmenter, SpringWetherall, Tiles, Varg, VargParams,
};

const FORMS: &str = "one of cdc, cdc:AVG, cdc:MIN:AVG:MAX, static[:SIZE], \
    sw[:SEG[:WIN[:EVERY]]], tiles[:WxH or :N], varg[:width=W,every=N,min=N,similar=N,max=N,motion=on|off], \
    ndarray[:SIZE] (sizes like 64, 8k, 1m)";

/// Builds a segmenter from a spec such as `cdc`, `cdc:2k:8k:64k` (min:avg:max; `cdc:AVG`
/// takes min AVG/4 and max 8·AVG), `static:4k`, `sw:256:32:128` (segment:window:every),
/// `tiles:64x16` (width x height in pixels), `varg:width=4,every=32` or `ndarray:4k`
/// (block size). Sizes take a `k`, `m` or `g` suffix (powers of 1024).
pub fn by_name(spec: &str) -> Result<Box<dyn Segmenter>, SegmentError> {
    let err = |reason: String| SegmentError::Spec {
        spec: spec.to_string(),
        reason,
        expected: FORMS,
    };
    // Constructors' own complaints, restated against the spec.
    let built = |r: Result<Box<dyn Segmenter>, SegmentError>| {
        r.map_err(|e| match e {
            SegmentError::Invalid { reason, .. } => err(reason),
            other => other,
        })
    };
    let (name, args) = match spec.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (spec, None),
    };
    let sizes = |a: Option<&str>| -> Result<Vec<usize>, SegmentError> {
        match a {
            None => Ok(Vec::new()),
            Some(a) => a.split(':').map(|s| size(s).map_err(err)).collect(),
        }
    };
    match name {
        "cdc" => {
            let c = match sizes(args)?[..] {
                [] => Ok(Cdc::default()),
                [avg] => Cdc::new((avg / 4).max(1), avg, avg.saturating_mul(8)),
                [min, avg, max] => Cdc::new(min, avg, max),
                _ => return Err(err("cdc takes one size (AVG) or three (MIN:AVG:MAX)".into())),
            };
            built(c.map(|c| Box::new(c) as Box<dyn Segmenter>))
        }
        "static" => {
            let f = match sizes(args)?[..] {
                [] => Fixed::new(4 << 10),
                [n] => Fixed::new(n),
                _ => return Err(err("static takes one size".into())),
            };
            built(f.map(|f| Box::new(f) as Box<dyn Segmenter>))
        }
        "sw" => {
            let d = SpringWetherall::default().params();
            let s = match sizes(args)?[..] {
                [] => SpringWetherall::new(d.0, d.1, d.2),
                [seg] => SpringWetherall::new(seg, d.1.min(seg), d.2),
                [seg, win] => SpringWetherall::new(seg, win, d.2),
                [seg, win, every] => SpringWetherall::new(seg, win, every),
                _ => return Err(err("sw takes at most three sizes (SEG:WIN:EVERY)".into())),
            };
            built(s.map(|s| Box::new(s) as Box<dyn Segmenter>))
        }
        "tiles" => {
            let t = match args {
                None => Ok(Tiles::default()),
                Some(a) => match a.split_once(['x', 'X']) {
                    Some((w, h)) => Tiles::new(count(w).map_err(err)?, count(h).map_err(err)?),
                    None => {
                        let n = count(a).map_err(err)?;
                        Tiles::new(n, n)
                    }
                },
            };
            built(t.map(|t| Box::new(t) as Box<dyn Segmenter>))
        }
        "varg" => {
            let mut p = VargParams::default();
            for kv in args.into_iter().flat_map(|a| a.split(',')) {
                let Some((k, v)) = kv.split_once('=') else {
                    return Err(err(format!("{kv:?} is not key=value")));
                };
                match k.trim() {
                    "width" => p.width = count(v).map_err(err)?,
                    "every" => p.every = count(v).map_err(err)? as u64,
                    "min" => p.min = count(v).map_err(err)?,
                    "similar" => p.similar = count(v).map_err(err)?,
                    "max" => p.max = count(v).map_err(err)?,
                    "motion" => {
                        p.motion = match v.trim() {
                            "on" | "1" | "true" | "yes" => true,
                            "off" | "0" | "false" | "no" => false,
                            other => return Err(err(format!("motion {other:?} is not on or off"))),
                        }
                    }
                    other => {
                        return Err(err(format!(
                            "unknown varg key {other:?} (width, every, min, similar, max, motion)"
                        )))
                    }
                }
            }
            built(Varg::new(p).map(|v| Box::new(v) as Box<dyn Segmenter>))
        }
        "ndarray" => {
            let n = match sizes(args)?[..] {
                [] => Ok(NdArray::default()),
                [n] => NdArray::new(n),
                _ => return Err(err("ndarray takes one size".into())),
            };
            built(n.map(|n| Box::new(n) as Box<dyn Segmenter>))
        }
        other => Err(err(format!("unknown segmenter {other:?}"))),
    }
}

/// A plain count.
fn count(s: &str) -> Result<usize, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number"))
}

/// A byte size: digits, then optionally `k`, `m` or `g` (powers of 1024) and `b`/`ib`.
fn size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k')) => (&t[..i], 10),
        Some((i, 'm')) => (&t[..i], 20),
        Some((i, 'g')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (like 64, 8k, 1m)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(size("64"), Ok(64));
        assert_eq!(size("8k"), Ok(8192));
        assert_eq!(size("2KiB"), Ok(2048));
        assert_eq!(size("1M"), Ok(1 << 20));
        assert_eq!(size("16b"), Ok(16));
        assert!(size("k").is_err());
        assert!(size("1.5k").is_err());
        assert!(size("99999999999999999999g").is_err());
    }

    #[test]
    fn specs_build_the_right_segmenters() {
        for (spec, name) in [
            ("cdc", "cdc"),
            ("cdc:64", "cdc"),
            ("cdc:2k:8k:64k", "cdc"),
            ("cdc:16:64:256", "cdc"),
            ("static:4k", "static"),
            ("static", "static"),
            ("sw", "sw"),
            ("sw:128:16:64", "sw"),
            ("tiles:64x16", "tiles"),
            ("tiles:8", "tiles"),
            ("varg", "varg"),
            (
                "varg:width=4,every=32,min=8,similar=0,max=512,motion=off",
                "varg",
            ),
            ("ndarray", "ndarray"),
            ("ndarray:1k", "ndarray"),
        ] {
            assert_eq!(by_name(spec).unwrap().name(), name, "{spec}");
        }
    }

    #[test]
    fn bad_specs_say_what_and_what_was_expected() {
        for spec in [
            "lzma",
            "cdc:1:2",
            "cdc:8k:2k:64k",
            "static:0",
            "static:x",
            "sw:16:32",
            "sw:256:32:100",
            "tiles:0x4",
            "tiles:4x",
            "varg:width",
            "varg:depth=3",
            "varg:motion=maybe",
            "ndarray:0",
        ] {
            let e = by_name(spec)
                .err()
                .unwrap_or_else(|| panic!("{spec} built"));
            let msg = e.to_string();
            assert!(msg.contains(spec) && msg.contains("expected"), "{msg}");
        }
    }
}

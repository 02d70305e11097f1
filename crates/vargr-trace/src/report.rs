//! A one-file HTML report of a traced job: what an operator wants to see first after
//! `vargr run --trace DIR` — which rank holds the others up, where the slowest
//! collectives spent their time, and how fast the links were — readable offline, mailed
//! around, or attached to an issue.
//!
//! The file is self-contained (inline CSS and SVG, no scripts, no external resources),
//! every text from the trace is escaped, and drawings stay bounded for big runs: at most
//! [`MAX_TIMEMAPS`] time maps, [`MAX_ROWS`] rows per drawing (ranks beyond that are
//! bucketed), and capped tables.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::analysis::{format_ns, Analysis, Dist, Instance, LoadBalance};
use crate::stages::StageTime;
use crate::tree::{Half, PathTimemap};

/// Slowest collective instances drawn as time maps.
pub const MAX_TIMEMAPS: usize = 8;
/// Rows (ranks or rank buckets) and columns per drawing.
pub const MAX_ROWS: usize = 64;
/// Collectors with an arrival-order histogram.
const MAX_HISTOGRAMS: usize = 6;
const MAX_TABLE_ROWS: usize = 256;

const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}\
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;margin-top:2em}\
h3{font-size:1em;margin:1.2em 0 .2em}\
table{border-collapse:collapse;margin:.5em 0}th,td{padding:2px 10px;border-bottom:1px solid #eee;text-align:right}\
th{background:#f4f4f4}.l{text-align:left}.culprit td{background:#fde2e2;font-weight:600}\
.warn{color:#a33}.note{color:#666;font-size:.9em}svg{display:block;margin:.4em 0}\
svg text{font:11px system-ui,sans-serif;fill:#333}\
.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 14px;vertical-align:-1px}";

const WAIT: &str = "#f0a030";
const COLL: &str = "#4878d0";
const DEPART: &str = "#8cc08f";
const BAR: &str = "#7d9cc8";
const HOT: &str = "#d03030";
/// Colours of stages and paths, in turn.
const PALETTE: [&str; 8] = [
    "#4878d0", "#ee854a", "#6acc64", "#d65f5f", "#956cb4", "#8c613c", "#dc7ec0", "#797979",
];
/// Back-end paths drawn in the tree's time map.
const MAX_PATHS: usize = 32;

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

fn t(ns: f64) -> String {
    esc(&format_ns(ns))
}

/// At most `max` consecutive ranges covering `0..n`.
fn buckets(n: usize, max: usize) -> Vec<std::ops::Range<usize>> {
    let per = n.div_ceil(max.max(1)).max(1);
    (0..n).step_by(per).map(|s| s..(s + per).min(n)).collect()
}

/// `rank 3` or `ranks 0–15` for a bucket of sorted ranks.
fn rank_label(ranks: &[u32]) -> String {
    match ranks {
        [] => String::new(),
        [r] => format!("rank {r}"),
        [a, .., b] => format!("ranks {a}–{b}"),
    }
}

fn ordinal(k: usize) -> String {
    let suffix = match (k % 10, k % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{k}{suffix}")
}

/// The report as one HTML document; `title` names the trace (e.g. its directory).
pub fn render(a: &Analysis, title: &str) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>vargr trace report: {}</title><style>{STYLE}</style></head><body>\n\
         <h1>vargr trace report</h1><p class=\"note\">{}</p>\n",
        esc(title),
        esc(title)
    );
    summary(&mut h, a);
    load_balance(&mut h, a);
    timemaps(&mut h, a);
    histograms(&mut h, a);
    statistics(&mut h, a);
    stage_section(&mut h, a);
    tree_section(&mut h, a);
    threads_section(&mut h, a);
    links(&mut h, a);
    h.push_str("</body></html>\n");
    h
}

fn summary(h: &mut String, a: &Analysis) {
    let s = &a.summary;
    h.push_str("<h2 id=\"summary\">Summary</h2>\n<table>\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(h, "<tr><th class=\"l\">{k}</th><td>{v}</td></tr>");
    };
    row("Ranks", s.ranks.to_string());
    row("Processes", s.processes.to_string());
    row("Hosts", s.hosts.to_string());
    row("Threads", s.tracks.to_string());
    row("Collectives", s.collectives.to_string());
    row(
        "Collective instances",
        format!("{} ({} partial)", s.instances, s.partial_instances),
    );
    row("Records", s.records.to_string());
    row("Records lost", s.lost.to_string());
    row("Messages matched", s.messages.to_string());
    row("Time span", t(s.span_ns as f64));
    row(
        "Culprit",
        match s.culprit {
            Some(c) => format!("rank {} (last in {} of {})", c.rank, c.last, c.of),
            None => "none".into(),
        },
    );
    h.push_str("</table>\n");
    let warnings = s.warnings();
    if !warnings.is_empty() {
        h.push_str("<ul class=\"warn\">\n");
        for w in warnings {
            let _ = writeln!(h, "<li>{}</li>", esc(&w));
        }
        h.push_str("</ul>\n");
    }
    let probed = a.timeline.processes.iter().all(|p| p.align.aligned);
    if probed && a.timeline.processes.len() > 1 {
        h.push_str(
            "<p class=\"note\">Clocks were aligned at start-up by the tree's skew estimation \
             (offsets summed along the tree; the error is half the fastest round trip per \
             hop, summed).</p>\n<table><tr><th class=\"l\">process</th><th class=\"l\">host</th>\
             <th>offset to the root</th><th>± error</th><th>hops</th></tr>\n",
        );
        for p in &a.timeline.processes {
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&p.process),
                esc(&p.host),
                t(p.align.offset_ns as f64),
                t(p.align.error_ns as f64),
                p.align.hops
            );
        }
        h.push_str("</table>\n");
    } else if a.timeline.hosts.len() > 1 {
        h.push_str(
            "<p class=\"note\">Hosts' monotonic clocks are put on the first host's axis \
             with offsets estimated from messages in both directions.</p>\n<table>\
             <tr><th class=\"l\">host</th><th>offset</th><th class=\"l\">how</th></tr>\n",
        );
        for c in &a.timeline.hosts {
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
                esc(&c.host),
                t(c.offset_ns as f64),
                esc(&format!("{:?}", c.alignment))
            );
        }
        h.push_str("</table>\n");
    }
}

fn load_balance(h: &mut String, a: &Analysis) {
    h.push_str("<h2 id=\"load-balance\">Load balance</h2>\n");
    let Some(c) = a.summary.culprit else {
        h.push_str(
            "<p>No complete collective of two or more ranks, so no rank arrived last.</p>\n",
        );
        return;
    };
    let _ = writeln!(
        h,
        "<p>Rank <b>{}</b> arrived last most often: in {} of the {} collective instances it \
         took part in ({:.0}%); the longest the others waited for it was {}.</p>",
        c.rank,
        c.last,
        c.of,
        100.0 * c.last as f64 / c.of.max(1) as f64,
        t(c.longest_wait_caused as f64)
    );
    // Last arrivals per rank over all collectors.
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    for b in a.load_balance.iter().flat_map(|l| &l.ranks) {
        *last.entry(b.rank).or_default() += b.last;
    }
    let ranks: Vec<(u32, u64)> = last.into_iter().collect();
    bar_chart(h, &ranks, c.rank);
    h.push_str(
        "<table><tr><th class=\"l\">collector</th><th>instances</th><th>partial</th>\
         <th>most often last</th><th>times last</th><th>longest wait it caused</th>\
         <th class=\"l\">last arrivals per host</th></tr>\n",
    );
    let mut rows: Vec<&LoadBalance> = a.load_balance.iter().collect();
    rows.sort_by(|x, y| y.instances.cmp(&x.instances).then(x.name.cmp(&y.name)));
    for l in rows.iter().take(MAX_TABLE_ROWS) {
        let culprit = l.culprit.and_then(|r| l.ranks.iter().find(|b| b.rank == r));
        let (who, times, longest) = match culprit {
            Some(b) => (
                format!("rank {}", b.rank),
                format!(
                    "{} ({:.0}%)",
                    b.last,
                    100.0 * b.last as f64 / l.instances.max(1) as f64
                ),
                t(b.longest_wait_caused as f64),
            ),
            None => ("–".into(), "–".into(), "–".into()),
        };
        let hosts: Vec<String> = l
            .hosts
            .iter()
            .take(3)
            .map(|(host, n)| format!("{} {n}", esc(host)))
            .collect();
        let class = if l.culprit == Some(c.rank) {
            " class=\"culprit\""
        } else {
            ""
        };
        let _ = writeln!(
            h,
            "<tr{class}><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{who}</td><td>{times}</td>\
             <td>{longest}</td><td class=\"l\">{}</td></tr>",
            esc(&l.name),
            l.instances,
            l.partial,
            hosts.join(", ")
        );
    }
    h.push_str("</table>\n");
    more(h, rows.len(), MAX_TABLE_ROWS, "collectors");
}

fn more(h: &mut String, n: usize, shown: usize, what: &str) {
    if n > shown {
        let _ = writeln!(
            h,
            "<p class=\"note\">{} more {what} not shown.</p>",
            n - shown
        );
    }
}

/// Bars of last-arrival counts per rank (bucketed beyond [`MAX_ROWS`]); the culprit's
/// bar is red.
fn bar_chart(h: &mut String, ranks: &[(u32, u64)], culprit: u32) {
    let groups = buckets(ranks.len(), MAX_ROWS);
    let bars: Vec<(String, u64, bool)> = groups
        .iter()
        .map(|g| {
            let part = &ranks[g.clone()];
            let members: Vec<u32> = part.iter().map(|x| x.0).collect();
            (
                rank_label(&members),
                part.iter().map(|x| x.1).sum(),
                members.contains(&culprit),
            )
        })
        .collect();
    let max = bars.iter().map(|b| b.1).max().unwrap_or(0).max(1);
    let bw = (760 / bars.len().max(1)).clamp(6, 40);
    let (top, ph) = (14, 120);
    let width = 40 + bars.len() * bw + 10;
    let height = top + ph + 40;
    let _ = writeln!(
        h,
        "<svg width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" \
         role=\"img\" aria-label=\"last arrivals per rank\">"
    );
    let _ = writeln!(
        h,
        "<text x=\"0\" y=\"10\">times last (max {max})</text>\
         <line x1=\"38\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>",
        top + ph,
        width - 10,
        top + ph
    );
    let label_every = bars.len().div_ceil(24).max(1);
    for (k, (label, n, hot)) in bars.iter().enumerate() {
        let bh = (*n as f64 / max as f64 * ph as f64).round() as usize;
        let x = 40 + k * bw;
        let _ = writeln!(
            h,
            "<rect x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{bh}\" fill=\"{}\"><title>{}: last {n} times</title></rect>",
            top + ph - bh,
            bw.saturating_sub(2).max(1),
            if *hot { HOT } else { BAR },
            esc(label)
        );
        if k % label_every == 0 {
            let short = label
                .trim_start_matches("ranks ")
                .trim_start_matches("rank ");
            let _ = writeln!(
                h,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                x + bw / 2,
                top + ph + 14,
                esc(short)
            );
        }
    }
    let _ = writeln!(
        h,
        "<text x=\"40\" y=\"{}\">rank</text></svg>",
        top + ph + 30
    );
}

fn timemaps(h: &mut String, a: &Analysis) {
    h.push_str(
        "<h2 id=\"timemap\">Time map of the slowest collectives</h2>\n<p class=\"key\">\
         Each rank's call from arrival to departure:\
         <span style=\"background:#f0a030\"></span>waiting for the last rank to arrive\
         <span style=\"background:#4878d0\"></span>the collective (last arrival to first \
         departure)<span style=\"background:#8cc08f\"></span>departure (after the first \
         rank left). The last rank to arrive is in red.</p>\n",
    );
    let mut slow: Vec<&Instance> = a.instances.list.iter().filter(|i| i.complete()).collect();
    if slow.is_empty() {
        h.push_str("<p>No complete collective instance.</p>\n");
        return;
    }
    slow.sort_by(|x, y| y.latency().cmp(&x.latency()).then(x.seq.cmp(&y.seq)));
    for i in slow.iter().take(MAX_TIMEMAPS) {
        let name = a
            .timeline
            .collectors
            .get(i.collector)
            .map_or("?", String::as_str);
        let _ = writeln!(
            h,
            "<h3>{} #{} (group of rank {}): {} from first arrival to last departure, last to \
             arrive: rank {}, {} after the first</h3>",
            esc(name),
            i.seq,
            i.group,
            t(i.latency() as f64),
            i.last_rank(),
            t(i.spread() as f64)
        );
        timemap(h, i);
    }
    more(h, slow.len(), MAX_TIMEMAPS, "instances");
}

fn timemap(h: &mut String, i: &Instance) {
    let (left, plot) = (110.0, 760.0);
    let t0 = i.first_arrival;
    let span = i.latency().max(1) as f64;
    let x = |ns: i64| left + ns.saturating_sub(t0) as f64 / span * plot;
    // Rows: ranks, or buckets of ranks shown by the member that arrived last.
    let rows: Vec<(String, usize)> = buckets(i.ranks.len(), MAX_ROWS)
        .into_iter()
        .map(|g| {
            let members: Vec<u32> = i.ranks[g.clone()].iter().map(|r| r.rank).collect();
            let latest = g
                .clone()
                .max_by_key(|&k| (i.ranks[k].arrival, std::cmp::Reverse(k)))
                .unwrap_or(g.start);
            let label = if members.len() == 1 {
                rank_label(&members)
            } else {
                format!("{} ({})", rank_label(&members), i.ranks[latest].rank)
            };
            (label, latest)
        })
        .collect();
    let (top, rh) = (18.0, 16.0);
    let height = top + rh * rows.len() as f64 + 6.0;
    let width = left + plot + 20.0;
    let _ = writeln!(
        h,
        "<svg width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-label=\"time map\">"
    );
    for (k, frac) in [0.0, 0.25, 0.5, 0.75, 1.0].iter().enumerate() {
        let anchor = ["start", "middle", "middle", "middle", "end"][k];
        let _ = writeln!(
            h,
            "<text x=\"{:.1}\" y=\"11\" text-anchor=\"{anchor}\">{}</text>\
             <line x1=\"{:.1}\" y1=\"14\" x2=\"{:.1}\" y2=\"{height}\" stroke=\"#eee\"/>",
            left + frac * plot,
            t(frac * span),
            left + frac * plot,
            left + frac * plot
        );
    }
    for (row, (label, k)) in rows.iter().enumerate() {
        let r = &i.ranks[*k];
        let y = top + rh * row as f64;
        let hot = r.rank == i.last_rank();
        let _ = writeln!(
            h,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\"{}>{}</text>",
            left - 6.0,
            y + 10.0,
            if hot {
                " style=\"fill:#d03030;font-weight:bold\""
            } else {
                ""
            },
            esc(label)
        );
        // Arrival → last arrival → first departure → departure, each clamped to the
        // rank's own call (non-synchronizing collectives may leave before the last
        // rank arrives).
        let (a, d) = (r.arrival, r.departure);
        let la = i.last_arrival.clamp(a, d);
        let fd = i.first_departure.clamp(la, d);
        for (s, e, colour, what) in [
            (a, la, WAIT, "waiting for the last rank"),
            (la, fd, COLL, "in the collective"),
            (fd, d, DEPART, "departing"),
        ] {
            if e > s {
                let _ = writeln!(
                    h,
                    "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"11\" fill=\"{colour}\">\
                     <title>rank {}: {what} {}</title></rect>",
                    x(s),
                    (x(e) - x(s)).max(0.5),
                    r.rank,
                    t(e.saturating_sub(s) as f64)
                );
            }
        }
        if d == a {
            // A call too short to see still gets a mark.
            let _ = writeln!(
                h,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"1\" height=\"11\" fill=\"{COLL}\"/>",
                x(a)
            );
        }
    }
    let _ = writeln!(
        h,
        "<line x1=\"{0:.1}\" y1=\"14\" x2=\"{0:.1}\" y2=\"{height}\" stroke=\"{HOT}\" \
         stroke-dasharray=\"3,3\"><title>last arrival</title></line></svg>",
        x(i.last_arrival)
    );
}

fn histograms(h: &mut String, a: &Analysis) {
    h.push_str(
        "<h2 id=\"arrival-order\">Arrival and departure order</h2>\n<p class=\"note\">How \
         often each rank arrived (left) and departed (right) 1st, 2nd, … last at a collective \
         (darker: a larger share of its calls). A rank always in the last arrival column \
         holds the others up; departures show the order in which the result reached \
         the ranks.</p>\n",
    );
    let mut lbs: Vec<&LoadBalance> = a.load_balance.iter().filter(|l| l.instances > 0).collect();
    if lbs.is_empty() {
        h.push_str("<p>No complete collective of two or more ranks.</p>\n");
        return;
    }
    lbs.sort_by(|x, y| y.instances.cmp(&x.instances).then(x.name.cmp(&y.name)));
    for l in lbs.iter().take(MAX_HISTOGRAMS) {
        let _ = writeln!(h, "<h3>{} ({} instances)</h3>", esc(&l.name), l.instances);
        let rows: Vec<OrderRow> = l
            .ranks
            .iter()
            .map(|b| (b.rank, &b.arrival_hist[..], &b.departure_hist[..]))
            .collect();
        order_pair(h, &rows, l.culprit, "rank");
    }
    more(h, lbs.len(), MAX_HISTOGRAMS, "collectors");
}

/// A member (rank or child node) with its arrival and departure order histograms.
type OrderRow<'a> = (u32, &'a [u64], &'a [u64]);

/// Arrival and departure heat maps side by side.
fn order_pair(h: &mut String, rows: &[OrderRow], hot: Option<u32>, noun: &str) {
    let arrivals: Vec<(u32, &[u64])> = rows.iter().map(|r| (r.0, r.1)).collect();
    let departures: Vec<(u32, &[u64])> = rows.iter().map(|r| (r.0, r.2)).collect();
    h.push_str("<div style=\"display:flex;gap:2em;flex-wrap:wrap\"><div><b>arrival</b>\n");
    heatmap(h, &arrivals, hot, noun, "arrival order");
    h.push_str("</div><div><b>departure</b>\n");
    heatmap(h, &departures, None, noun, "departure order");
    h.push_str("</div></div>\n");
}

/// `node 3` or `nodes 2–5`: [`rank_label`] for other members.
fn member_label(noun: &str, ids: &[u32]) -> String {
    let l = rank_label(ids);
    if noun == "rank" {
        l
    } else {
        l.replacen("ranks", &format!("{noun}s"), 1)
            .replacen("rank", noun, 1)
    }
}

/// Rows: members and how often each was (k+1)-th; bucketed beyond [`MAX_ROWS`].
fn heatmap(h: &mut String, members: &[(u32, &[u64])], hot: Option<u32>, noun: &str, what: &str) {
    let cols_n = members.iter().map(|m| m.1.len()).max().unwrap_or(0);
    let rows = buckets(members.len(), MAX_ROWS);
    let cols = buckets(cols_n, MAX_ROWS);
    let cw = (480 / cols.len().max(1)).clamp(8, 40) as f64;
    let (left, top, rh) = (110.0, 18.0, 14.0);
    let width = left + cw * cols.len() as f64 + 10.0;
    let height = top + rh * rows.len() as f64 + 4.0;
    let _ = writeln!(
        h,
        "<svg width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-label=\"{what}\">"
    );
    for (c, g) in cols.iter().enumerate() {
        let label = if g.len() == 1 {
            if g.start + 1 == cols_n {
                "last".to_string()
            } else {
                ordinal(g.start + 1)
            }
        } else {
            format!("{}–{}", g.start + 1, g.end)
        };
        if cw >= 20.0 || c % 4 == 0 {
            let _ = writeln!(
                h,
                "<text x=\"{:.1}\" y=\"12\" text-anchor=\"middle\">{}</text>",
                left + cw * (c as f64 + 0.5),
                esc(&label)
            );
        }
    }
    for (r, g) in rows.iter().enumerate() {
        let ids: Vec<u32> = members[g.clone()].iter().map(|m| m.0).collect();
        let name = member_label(noun, &ids);
        let counts: Vec<u64> = cols
            .iter()
            .map(|cg| {
                members[g.clone()]
                    .iter()
                    .map(|m| cg.clone().filter_map(|k| m.1.get(k)).sum::<u64>())
                    .sum()
            })
            .collect();
        let total = counts.iter().sum::<u64>().max(1);
        let y = top + rh * r as f64;
        let is_hot = hot.is_some_and(|c| ids.contains(&c));
        let _ = writeln!(
            h,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\"{}>{}</text>",
            left - 6.0,
            y + 10.5,
            if is_hot {
                " style=\"fill:#d03030;font-weight:bold\""
            } else {
                ""
            },
            esc(&name)
        );
        for (c, &n) in counts.iter().enumerate() {
            let share = n as f64 / total as f64;
            // White to dark blue.
            let shade = |full: f64| (255.0 - share * (255.0 - full)).round() as u8;
            let x = left + cw * c as f64;
            let _ = writeln!(
                h,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
                 fill=\"rgb({},{},{})\" stroke=\"#fff\"><title>{}: {n} times</title></rect>",
                cw,
                rh,
                shade(32.0),
                shade(80.0),
                shade(170.0),
                esc(&name)
            );
            if cw >= 20.0 && n > 0 {
                let fill = if share > 0.5 { "#fff" } else { "#333" };
                let _ = writeln!(
                    h,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" style=\"fill:{fill}\">{n}</text>",
                    x + cw / 2.0,
                    y + 10.5
                );
            }
        }
    }
    h.push_str("</svg>\n");
}

fn statistics(h: &mut String, a: &Analysis) {
    h.push_str(
        "<h2 id=\"statistics\">Latency per collective</h2>\n<p class=\"note\">Latency is the \
         time from the first rank's arrival to the last rank's departure; spread is the time \
         from the first arrival to the last. Median of the last 100 instances; standard \
         deviation over all.</p>\n",
    );
    if a.stats.is_empty() {
        h.push_str("<p>No complete collective instance.</p>\n");
        return;
    }
    h.push_str(
        "<table><tr><th class=\"l\">collector</th><th>instances</th><th>mean</th><th>min</th>\
         <th>max</th><th>sd</th><th>median</th><th>mean spread</th><th>max spread</th></tr>\n",
    );
    for s in a.stats.iter().take(MAX_TABLE_ROWS) {
        let l = &s.latency;
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.name),
            l.count,
            t(l.mean),
            t(l.min),
            t(l.max),
            t(l.sd),
            t(l.median),
            t(s.spread.mean),
            t(s.spread.max)
        );
    }
    h.push_str("</table>\n");
    more(h, a.stats.len(), MAX_TABLE_ROWS, "collectors");
}

/// `mean / median / p90` cells of a distribution, or dashes.
fn dist_cells(d: Option<&Dist>) -> String {
    match d {
        Some(d) => format!(
            "<td>{}</td><td>{}</td><td>{}</td>",
            t(d.mean),
            t(d.median),
            t(d.p90)
        ),
        None => "<td>–</td><td>–</td><td>–</td>".into(),
    }
}

fn stage_section(h: &mut String, a: &Analysis) {
    h.push_str(
        "<h2 id=\"stages\">Time per path stage</h2>\n<p class=\"note\">Time frames spent in \
         each stage of a link's chain (out: sending, in: receiving), from the \
         <code>link/stage/NAME/…</code> records. Links within a host have no stages.</p>\n",
    );
    let st = &a.stages;
    if st.stages.is_empty() {
        h.push_str("<p>No stage records.</p>\n");
        return;
    }
    stage_table(h, &st.stages, false);
    h.push_str("<h3>Per node or process</h3>\n");
    stage_bars(h, &st.places);
    stage_table(h, &st.places, true);
}

fn stage_table(h: &mut String, rows: &[StageTime], place: bool) {
    h.push_str("<table><tr>");
    if place {
        h.push_str("<th class=\"l\">where</th>");
    }
    h.push_str(
        "<th class=\"l\">stage</th><th class=\"l\">dir</th><th>frames</th><th>bytes</th>\
         <th>mean</th><th>median</th><th>p90</th><th>max</th><th>total</th></tr>\n",
    );
    for r in rows.iter().take(MAX_TABLE_ROWS) {
        h.push_str("<tr>");
        if place {
            let _ = write!(h, "<td class=\"l\">{}</td>", esc(&r.place));
        }
        let _ = writeln!(
            h,
            "<td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td>{}<td>{}</td>\
             <td>{}</td></tr>",
            esc(&r.stage),
            r.direction.name(),
            r.frames,
            r.bytes,
            dist_cells(Some(&r.time)),
            t(r.time.max as f64),
            t(r.time.total as f64)
        );
    }
    h.push_str("</table>\n");
    more(h, rows.len(), MAX_TABLE_ROWS, "rows");
}

/// One bar per place: the mean time of each of its stages, end to end (a frame that
/// passes every stage once spends about this long in the chain).
fn stage_bars(h: &mut String, rows: &[StageTime]) {
    let mut places: Vec<(&str, Vec<&StageTime>)> = Vec::new();
    for r in rows {
        match places.last_mut() {
            Some((p, v)) if *p == r.place => v.push(r),
            _ => places.push((&r.place, vec![r])),
        }
    }
    places.truncate(MAX_ROWS);
    let mut kinds: Vec<(String, &str)> = Vec::new();
    for r in rows {
        let k = (r.stage.clone(), r.direction.name());
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    let colour = |r: &StageTime| {
        let k = kinds
            .iter()
            .position(|k| k.0 == r.stage && k.1 == r.direction.name())
            .unwrap_or(0);
        PALETTE[k % PALETTE.len()]
    };
    let max = places
        .iter()
        .map(|(_, v)| v.iter().map(|r| r.time.mean).sum::<f64>())
        .fold(0.0, f64::max)
        .max(1.0);
    let (left, plot, top, rh) = (130.0, 700.0, 18.0, 16.0);
    let width = left + plot + 20.0;
    let height = top + rh * places.len() as f64 + 6.0;
    h.push_str("<p class=\"key\">");
    for (k, (stage, dir)) in kinds.iter().enumerate() {
        let _ = write!(
            h,
            "<span style=\"background:{}\"></span>{} {dir}",
            PALETTE[k % PALETTE.len()],
            esc(stage)
        );
    }
    h.push_str("</p>\n");
    let _ = writeln!(
        h,
        "<svg width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-label=\"time per stage\"><text x=\"{left}\" y=\"11\">mean time per frame, \
         stage after stage (max {})</text>",
        t(max)
    );
    for (row, (place, v)) in places.iter().enumerate() {
        let y = top + rh * row as f64;
        let _ = writeln!(
            h,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            y + 10.0,
            esc(place)
        );
        let mut x = left;
        for r in v {
            let w = r.time.mean / max * plot;
            let _ = writeln!(
                h,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"11\" fill=\"{}\">\
                 <title>{} {} {}: mean {}</title></rect>",
                w.max(0.5),
                colour(r),
                esc(place),
                esc(&r.stage),
                r.direction.name(),
                t(r.time.mean)
            );
            x += w;
        }
    }
    h.push_str("</svg>\n");
}

/// Per process: TLP, rank states, CPU time, switches and counters (seed 000 §7.4).
fn threads_section(h: &mut String, a: &Analysis) {
    if a.threads.is_empty() {
        return;
    }
    h.push_str(
        "<h2 id=\"threads\">Rank threads</h2>\n<p class=\"note\">Per process over its \
         ranks' lifetime (seed 000 §7.4): TLP<sub>N</sub> is the share of time with at least \
         N ranks not blocked in communication; computing, communication and slot wait are \
         the mean share of a rank's time in each state; R&ge;2 the share of <code>/proc</code> \
         samples with at least two rank threads runnable; user and system time and \
         context switches (voluntary / involuntary) are summed over the ranks; IPC from \
         the hardware counters where the kernel allowed them; waiting for a CPU is the \
         time the ranks were runnable without one (<code>schedstat</code>).</p>\n<table><tr>\
         <th class=\"l\">process</th><th>ranks</th><th>seconds</th><th>TLP<sub>1</sub></th>\
         <th>TLP<sub>2</sub></th><th>computing</th><th>communication</th><th>slot wait</th>\
         <th>R&ge;2</th><th>user</th><th>system</th><th>waiting for a CPU</th><th>switches</th>\
         <th class=\"l\">counters</th></tr>\n",
    );
    for p in a.threads.iter().take(MAX_TABLE_ROWS) {
        let u = &p.usage;
        let mut cells = thread_cells(u, "–");
        let counters = cells.pop().unwrap_or_default();
        let _ = write!(
            h,
            "<tr><td class=\"l\">{} ({}:{})</td><td>{}</td><td>{:.2}</td>",
            esc(&p.process),
            esc(&p.host),
            p.pid,
            cells[0],
            u.seconds,
        );
        for c in &cells[1..] {
            let _ = write!(h, "<td>{}</td>", esc(c));
        }
        let _ = writeln!(h, "<td class=\"l\">{}</td></tr>", esc(&counters));
    }
    h.push_str("</table>\n");
}

/// One process's "Rank threads" cells after its name, for the HTML and the text table:
/// ranks, TLP_1, TLP_2, computing, communication, slot wait, R>=2, user, system,
/// waiting for a CPU, switches (voluntary / involuntary), counters. `none` stands for a
/// figure that was not measured.
fn thread_cells(u: &crate::usage::ProcessUsage, none: &str) -> Vec<String> {
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    let (v, i) = u.switches();
    vec![
        u.ranks.to_string(),
        pct(u.tlp_at_least(1)),
        pct(u.tlp_at_least(2)),
        pct(u.share.computing),
        pct(u.share.communication),
        pct(u.share.other),
        if u.os_samples > 0 {
            pct(u.os_runnable_at_least(2))
        } else {
            none.into()
        },
        format!("{:.2} s", u.user_s()),
        format!("{:.2} s", u.system_s()),
        u.runqueue_wait_s()
            .map_or(none.into(), |w| format!("{w:.2} s")),
        format!("{v} / {i}"),
        counters_text(u),
    ]
}

/// `IPC 1.20, 3.1M L1D misses` or why there are no counters.
fn counters_text(u: &crate::usage::ProcessUsage) -> String {
    match (u.counter(|c| c.instructions), u.counter(|c| c.cycles)) {
        (Some(ins), Some(cyc)) if cyc > 0 => {
            let mut s = format!("IPC {:.2}", ins as f64 / cyc as f64);
            if let Some(m) = u.counter(|c| c.l1d_misses) {
                s += &format!(", {m} L1D misses");
            }
            if let Some(m) = u.counter(|c| c.llc_misses) {
                s += &format!(", {m} LLC misses");
            }
            s
        }
        _ => format!(
            "unavailable: {}",
            u.counters_unavailable().unwrap_or("not measured")
        ),
    }
}

fn tree_section(h: &mut String, a: &Analysis) {
    let tr = &a.tree;
    if tr.is_empty() {
        return;
    }
    h.push_str(
        "<h2 id=\"tree\">Tree nodes</h2>\n<p class=\"note\">Per node, as the seed defines \
         them (its paths run <i>down</i> to the root and back <i>up</i>): down latency is \
         from the last child's packet arriving to the reduced packet leaving for the parent \
         (at the root: to the end of its routing); up latency from the packet arriving from \
         the parent to its first forward to a child; subtree from that first forward to the \
         last reply. Mean / median / p90.</p>\n<table><tr><th>node</th><th class=\"l\">role</th>\
         <th>parent</th><th>children</th><th>waves</th><th colspan=\"3\">down latency</th>\
         <th colspan=\"3\">up latency</th><th colspan=\"3\">subtree</th>\
         <th>most often last</th></tr>\n",
    );
    for n in tr
        .nodes
        .iter()
        .filter(|n| !n.children.is_empty())
        .take(MAX_TABLE_ROWS)
    {
        let last = n
            .children_times
            .iter()
            .filter(|c| c.last > 0)
            .max_by(|x, y| x.last.cmp(&y.last).then(y.child.cmp(&x.child)))
            .map_or("–".into(), |c| format!("node {} ({}×)", c.child, c.last));
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td>{}{}{}<td>{}</td></tr>",
            n.node,
            esc(&n.role),
            n.parent.map_or("–".into(), |p| p.to_string()),
            n.children.len(),
            n.reduce_waves.max(n.multicast_waves),
            dist_cells(n.down_latency.as_ref()),
            dist_cells(n.up_latency.as_ref()),
            dist_cells(n.subtree.as_ref()),
            esc(&last)
        );
    }
    h.push_str("</table>\n");
    if tr.uneven > 0 {
        let _ = writeln!(
            h,
            "<p class=\"warn\">{} node streams had children that sent different numbers of \
             packets (records lost, or a stream that does not wait for all): only their \
             common waves are used.</p>",
            tr.uneven
        );
    }
    h.push_str(
        "<h3>Transit per edge</h3>\n<p class=\"note\">From the sender handing a frame to \
         the link to the receiver's arrival, on the aligned clocks.</p>\n<table><tr>\
         <th>parent</th><th>child</th><th colspan=\"3\">toward the root</th>\
         <th colspan=\"3\">toward the leaves</th></tr>\n",
    );
    for e in tr.edges.iter().take(MAX_TABLE_ROWS) {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td>{}{}</tr>",
            e.parent,
            e.child,
            dist_cells(e.toward_root.as_ref()),
            dist_cells(e.toward_leaves.as_ref())
        );
    }
    h.push_str("</table>\n");
    path_timemap(h, &tr.paths);
    for n in tr
        .nodes
        .iter()
        .filter(|n| n.children.len() > 1)
        .take(MAX_HISTOGRAMS)
    {
        let _ = writeln!(
            h,
            "<h3>Children of node {} ({}): arrival and departure order</h3>",
            n.node,
            esc(&n.role)
        );
        let rows: Vec<OrderRow> = n
            .children_times
            .iter()
            .map(|c| (c.child, &c.arrival_hist[..], &c.departure_hist[..]))
            .collect();
        let hot = n
            .children_times
            .iter()
            .filter(|c| c.last > 0)
            .max_by_key(|c| c.last)
            .map(|c| c.child);
        order_pair(h, &rows, hot, "node");
    }
}

/// The seed's time map: one line per back-end, y the position on its path (back-end,
/// root in the middle, back-end), x the mean time spent so far; the half toward the
/// root at x < 0, ending at the root at x = 0.
fn path_timemap(h: &mut String, paths: &[PathTimemap]) {
    if paths.is_empty() {
        return;
    }
    let mut shown: Vec<&PathTimemap> = paths.iter().collect();
    shown.sort_by(|x, y| {
        (y.toward_root + y.toward_leaves)
            .total_cmp(&(x.toward_root + x.toward_leaves))
            .then(x.leaf.cmp(&y.leaf))
    });
    shown.truncate(MAX_PATHS);
    h.push_str(
        "<h3>Time map of the back-ends' paths</h3>\n<p class=\"note\">Each line is one \
         back-end's path: down to the root (x &lt; 0, ending at the root at 0) and back up \
         (x &gt; 0), each step the mean of one stage (transit, arrival wait, down latency; \
         up latency, departure wait, transit). Hover a line for its stages.</p>\n",
    );
    let neg = shown
        .iter()
        .map(|p| p.toward_root)
        .fold(0.0, f64::max)
        .max(1.0);
    let pos = shown
        .iter()
        .map(|p| p.toward_leaves)
        .fold(0.0, f64::max)
        .max(1.0);
    let (left, plot, top, ph) = (20.0, 760.0, 20.0, 260.0);
    let zero = left + plot * neg / (neg + pos);
    let x = |v: f64| zero + v / (neg + pos) * plot;
    let y = |f: f64| top + f * ph;
    let width = left + plot + 20.0;
    let height = top + ph + 30.0;
    let _ = writeln!(
        h,
        "<svg width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-label=\"path time map\"><line x1=\"{zero:.1}\" y1=\"{}\" x2=\"{zero:.1}\" \
         y2=\"{:.1}\" stroke=\"#999\"/><text x=\"{left}\" y=\"12\">−{} (back-end to root)\
         </text><text x=\"{:.1}\" y=\"12\" text-anchor=\"end\">+{} (root to back-end)</text>\
         <text x=\"{zero:.1}\" y=\"{:.1}\" text-anchor=\"middle\">root</text>",
        top,
        top + ph,
        t(neg),
        left + plot,
        t(pos),
        top + ph + 16.0
    );
    for (k, p) in shown.iter().enumerate() {
        let down: Vec<_> = p
            .stages
            .iter()
            .filter(|s| s.half == Half::TowardRoot)
            .collect();
        let up: Vec<_> = p
            .stages
            .iter()
            .filter(|s| s.half == Half::TowardLeaves)
            .collect();
        let mut pts = vec![(x(-p.toward_root), y(0.0))];
        let mut at = -p.toward_root;
        for (i, s) in down.iter().enumerate() {
            at += s.mean.unwrap_or(0.0);
            pts.push((x(at), y(0.5 * (i + 1) as f64 / down.len() as f64)));
        }
        at = 0.0;
        for (i, s) in up.iter().enumerate() {
            at += s.mean.unwrap_or(0.0);
            pts.push((x(at), y(0.5 + 0.5 * (i + 1) as f64 / up.len() as f64)));
        }
        let line: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
        let steps: Vec<String> = p
            .stages
            .iter()
            .map(|s| {
                format!(
                    "node {} {}: {}",
                    s.node,
                    s.stage,
                    s.mean.map_or("–".into(), format_ns)
                )
            })
            .collect();
        let _ = writeln!(
            h,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\">\
             <title>back-end node {}: {}</title></polyline>",
            line.join(" "),
            PALETTE[k % PALETTE.len()],
            p.leaf,
            esc(&steps.join("; "))
        );
    }
    h.push_str("</svg>\n");
}

fn links(h: &mut String, a: &Analysis) {
    h.push_str(
        "<h2 id=\"links\">Links</h2>\n<p class=\"note\">Per pair of ranks, from each receive \
         and its send: receive end − send start. That includes the time the message waited \
         for a late receiver, so the minimum is the best estimate of the link's latency; \
         round trip is the minimum each way summed, which no clock offset between hosts \
         can distort.</p>\n",
    );
    if a.links.is_empty() {
        h.push_str(
            "<p>No messages were recorded (shared-memory collectives record calls only).</p>\n",
        );
        return;
    }
    h.push_str(
        "<table><tr><th>from</th><th>to</th><th>messages</th><th>mean</th><th>median</th>\
         <th>min</th><th>max</th><th>round trip</th></tr>\n",
    );
    for l in a.links.iter().take(MAX_TABLE_ROWS) {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td></tr>",
            l.src,
            l.dst,
            l.count,
            t(l.mean),
            t(l.median),
            t(l.min as f64),
            t(l.max as f64),
            l.round_trip.map_or("–".into(), |r| t(r as f64))
        );
    }
    h.push_str("</table>\n");
    more(h, a.links.len(), MAX_TABLE_ROWS, "links");
}

/// The report's analyses as one JSON document (`vargr trace report --json`): summary,
/// per collective the ranks' arrival and departure order histograms, latency statistics,
/// links, time per path stage, and the tree's nodes, edges and path time maps. Times are
/// ns.
pub fn json(a: &Analysis) -> serde_json::Value {
    use serde_json::json;
    let s = &a.summary;
    let collectives: Vec<serde_json::Value> = a
        .load_balance
        .iter()
        .map(|l| {
            json!({
                "collector": l.name,
                "instances": l.instances,
                "partial": l.partial,
                "culprit": l.culprit,
                "last_per_host": l.hosts,
                "ranks": l.ranks.iter().map(|b| json!({
                    "rank": b.rank,
                    "instances": b.instances,
                    "last": b.last,
                    "arrival_hist": b.arrival_hist,
                    "departure_hist": b.departure_hist,
                    "mean_arrival_wait": b.total_arrival_wait as f64 / b.instances.max(1) as f64,
                    "longest_wait_caused": b.longest_wait_caused,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let latency: Vec<serde_json::Value> = a
        .stats
        .iter()
        .map(|c| json!({ "collector": c.name, "latency": c.latency, "spread": c.spread }))
        .collect();
    let links: Vec<serde_json::Value> = a
        .links
        .iter()
        .map(|l| {
            json!({
                "src": l.src, "dst": l.dst, "messages": l.count, "mean": l.mean,
                "median": l.median, "min": l.min, "max": l.max, "round_trip": l.round_trip,
            })
        })
        .collect();
    json!({
        "summary": {
            "ranks": s.ranks,
            "processes": s.processes,
            "hosts": s.hosts,
            "collectives": s.collectives,
            "instances": s.instances,
            "partial_instances": s.partial_instances,
            "records": s.records,
            "lost": s.lost,
            "messages": s.messages,
            "span_ns": s.span_ns,
            "culprit": s.culprit.map(|c| json!({
                "rank": c.rank, "last": c.last, "of": c.of,
                "longest_wait_caused": c.longest_wait_caused,
            })),
            "warnings": s.warnings(),
        },
        "collectives": collectives,
        "latency": latency,
        "links": links,
        "stages": a.stages,
        "tree": a.tree,
        "threads": a.threads,
    })
}

/// `12 µs / 10 µs / 30 µs` for a table cell.
fn dist_text(d: Option<&Dist>) -> String {
    d.map_or("–".into(), |d| {
        format!(
            "{} / {} / {}",
            format_ns(d.mean),
            format_ns(d.median),
            format_ns(d.p90)
        )
    })
}

/// Fixed-width columns, the first left-aligned, the rest right-aligned.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = width[c].saturating_sub(cell.chars().count());
            if c == 0 {
                line += cell;
                line += &" ".repeat(pad);
            } else {
                line += "  ";
                line += &" ".repeat(pad);
                line += cell;
            }
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

/// Which rank was most often first and most often last, by `hist`.
fn extremes(
    ranks: &[crate::analysis::RankBalance],
    hist: fn(&crate::analysis::RankBalance) -> &[u64],
) -> (String, String) {
    let pick = |pos: fn(&[u64]) -> u64| {
        ranks
            .iter()
            .map(|b| (pos(hist(b)), b.rank))
            .filter(|x| x.0 > 0)
            .max_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)))
            .map_or("–".into(), |(n, r)| format!("rank {r} ({n}×)"))
    };
    (
        pick(|h| h.first().copied().unwrap_or(0)),
        pick(|h| h.last().copied().unwrap_or(0)),
    )
}

/// The report's tables for the terminal: arrival and departure order per collective,
/// time per path stage, and per tree node the seed's latencies.
pub fn text(a: &Analysis) -> String {
    let mut out = String::new();
    let mut lbs: Vec<&LoadBalance> = a.load_balance.iter().filter(|l| l.instances > 0).collect();
    lbs.sort_by(|x, y| y.instances.cmp(&x.instances).then(x.name.cmp(&y.name)));
    if !lbs.is_empty() {
        let mut rows = vec![[
            "collective",
            "instances",
            "first in",
            "last in",
            "first out",
            "last out",
        ]
        .map(String::from)
        .to_vec()];
        for l in lbs.iter().take(MAX_TABLE_ROWS) {
            let (fa, la) = extremes(&l.ranks, |b| &b.arrival_hist);
            let (fd, ld) = extremes(&l.ranks, |b| &b.departure_hist);
            rows.push(vec![
                l.name.clone(),
                l.instances.to_string(),
                fa,
                la,
                fd,
                ld,
            ]);
        }
        out += "\narrival and departure order (most often first and last):\n";
        out += &columns(&rows);
    }
    if !a.stages.stages.is_empty() {
        let mut rows = vec![["stage", "dir", "frames", "mean", "median", "p90", "total"]
            .map(String::from)
            .to_vec()];
        for r in &a.stages.stages {
            rows.push(vec![
                r.stage.clone(),
                r.direction.name().into(),
                r.frames.to_string(),
                format_ns(r.time.mean),
                format_ns(r.time.median),
                format_ns(r.time.p90),
                format_ns(r.time.total as f64),
            ]);
        }
        out += "\ntime per path stage:\n";
        out += &columns(&rows);
    }
    let tr = &a.tree;
    if !tr.is_empty() {
        let mut rows = vec![[
            "node",
            "role",
            "children",
            "waves",
            "down latency (mean / median / p90)",
            "up latency",
            "subtree",
        ]
        .map(String::from)
        .to_vec()];
        for n in tr.nodes.iter().filter(|n| !n.children.is_empty()) {
            rows.push(vec![
                n.node.to_string(),
                n.role.clone(),
                n.children.len().to_string(),
                n.reduce_waves.max(n.multicast_waves).to_string(),
                dist_text(n.down_latency.as_ref()),
                dist_text(n.up_latency.as_ref()),
                dist_text(n.subtree.as_ref()),
            ]);
        }
        out += "\ntree nodes (the seed's down latency: last child in to out toward the root; \
                up latency: in from the parent to the first forward):\n";
        out += &columns(&rows);
        if let Some(p) = tr.paths.iter().max_by(|x, y| {
            (x.toward_root + x.toward_leaves).total_cmp(&(y.toward_root + y.toward_leaves))
        }) {
            out += &format!(
                "slowest back-end path: node {} ({}), {} to the root, {} back\n",
                p.leaf,
                p.path
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join("→"),
                format_ns(p.toward_root),
                format_ns(p.toward_leaves)
            );
        }
    }
    if !a.threads.is_empty() {
        let mut rows = vec![[
            "process",
            "ranks",
            "TLP_1",
            "TLP_2",
            "computing",
            "comm",
            "slot wait",
            "R>=2",
            "user",
            "system",
            "CPU wait",
            "switches",
            "counters",
        ]
        .map(String::from)
        .to_vec()];
        for p in a.threads.iter().take(MAX_TABLE_ROWS) {
            let mut row = vec![p.process.clone()];
            row.extend(thread_cells(&p.usage, "-"));
            rows.push(row);
        }
        out += "\nrank threads (TLP_N: share of time with at least N ranks not blocked in \
                communication; R>=2: /proc samples with two or more runnable):\n";
        out += &columns(&rows);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyze;
    use crate::analysis::tests::{file, rec, slow_rank_job};
    use crate::{EventOp, TraceFile, NO_PEER};

    /// Tags that open must close, in order (the report has no void elements besides
    /// `<meta>`, and SVG shapes are written either self-closed or closed).
    fn balanced(html: &str) -> Result<(), String> {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(i) = rest.find('<') {
            rest = &rest[i + 1..];
            let end = rest.find('>').ok_or("unclosed <")?;
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if tag.starts_with('!') || tag.ends_with('/') {
                continue;
            }
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if name == "meta" {
                continue;
            }
            if tag.starts_with('/') {
                match stack.pop() {
                    Some(open) if open == name => {}
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
            } else {
                stack.push(name);
            }
        }
        if stack.is_empty() {
            Ok(())
        } else {
            Err(format!("left open: {stack:?}"))
        }
    }

    #[test]
    fn the_report_shows_the_culprit_and_its_parts() {
        let a = analyze(&slow_rank_job(20, 2, 5_000));
        let html = render(&a, "/tmp/<job>");
        balanced(&html).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("/tmp/&lt;job&gt;"));
        for part in [
            "id=\"summary\"",
            "id=\"load-balance\"",
            "id=\"timemap\"",
            "id=\"arrival-order\"",
            "id=\"statistics\"",
            "id=\"links\"",
        ] {
            assert!(html.contains(part), "{part} missing");
        }
        assert!(html.contains("Rank <b>2</b> arrived last most often: in 20 of the 20"));
        assert!(html.contains("<tr class=\"culprit\"><td class=\"l\">ctx0/allreduce"));
        // Bars, time maps, and arrival and departure orders of the one collector.
        assert_eq!(html.matches("<svg").count(), 1 + MAX_TIMEMAPS + 2);
        assert!(!html.contains("<script"));
        assert!(!html.contains("http"));
    }

    #[test]
    fn trace_text_is_escaped() {
        let mut f = file(
            "<b>host</b>",
            0,
            vec![
                (0, vec![rec(EventOp::Call, 0, 0, 1, 2, NO_PEER)]),
                (1, vec![rec(EventOp::Call, 0, 0, 5, 9, NO_PEER)]),
            ],
        );
        f.collectors = vec!["ctx0/<script>alert('x')</script>".into()];
        let html = render(&analyze(&[f]), "t");
        balanced(&html).unwrap();
        assert!(!html.contains("<script"));
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)"));
        assert!(html.contains("&lt;b&gt;host&lt;/b&gt;"));
    }

    #[test]
    fn thread_usage_shows_where_files_carry_it() {
        use crate::usage::{Counters, ProcessUsage, RankUsage, StateShare};
        let plain = file(
            "a",
            0,
            vec![(0, vec![rec(EventOp::Call, 0, 0, 1, 2, NO_PEER)])],
        );
        let mut with = file(
            "b",
            0,
            vec![(1, vec![rec(EventOp::Call, 0, 0, 1, 2, NO_PEER)])],
        );
        with.process = "ranks 1..3 of 3".into();
        with.usage = Some(Box::new(ProcessUsage {
            seconds: 2.0,
            ranks: 2,
            tlp: vec![0.25, 0.33, 0.42],
            computing: vec![0.5, 0.5],
            os_runnable: vec![0.0, 0.5, 0.5],
            os_samples: 10,
            share: StateShare {
                computing: 0.6,
                communication: 0.3,
                other: 0.1,
            },
            transitions: 40,
            per_rank: vec![RankUsage {
                rank: 1,
                user_s: 1.5,
                system_s: 0.25,
                voluntary_switches: 7,
                involuntary_switches: 3,
                runqueue_wait_s: Some(0.125),
                counters: Counters {
                    unavailable: Some("perf_event_open: <denied>".into()),
                    ..Default::default()
                },
            }],
        }));
        // A run without usage has no section.
        let none = analyze(std::slice::from_ref(&plain));
        assert!(!render(&none, "t").contains("id=\"threads\""));
        assert!(!text(&none).contains("rank threads"));
        let a = analyze(&[plain, with]);
        assert_eq!(a.threads.len(), 1);
        let html = render(&a, "t");
        balanced(&html).unwrap();
        assert!(html.contains("id=\"threads\""));
        assert!(html.contains("<td>75%</td><td>42%</td>"), "{html}");
        assert!(html.contains("unavailable: perf_event_open: &lt;denied&gt;"));
        let t = text(&a);
        assert!(t.contains("ranks 1..3 of 3"), "{t}");
        assert!(t.contains("1.50 s") && t.contains("7 / 3"), "{t}");
        assert!(html.contains("<td>7 / 3</td>"), "{html}");
        assert!(
            html.contains("<td>0.12 s</td>") && t.contains("0.12 s"),
            "{t}"
        );
        let j = json(&a);
        assert_eq!(j["threads"][0]["usage"]["tlp"][2], 0.42);
        assert_eq!(j["threads"][0]["process"], "ranks 1..3 of 3");
    }

    #[test]
    fn big_runs_stay_bounded() {
        // 300 ranks in one process, 30 calls each; rank 299 always last.
        let threads: Vec<(u32, Vec<crate::Record>)> = (0..300u32)
            .map(|r| {
                let recs = (0..30u32)
                    .map(|s| {
                        let t0 = u64::from(s) * 100_000;
                        let arrive = t0 + u64::from(r) * 10;
                        rec(EventOp::Call, 0, s, arrive, t0 + 50_000, NO_PEER)
                    })
                    .collect();
                (r, recs)
            })
            .collect();
        let a = analyze(&[file("h", 0, threads)]);
        assert_eq!(a.summary.culprit.map(|c| c.rank), Some(299));
        let html = render(&a, "big");
        balanced(&html).unwrap();
        // Time map rows and histogram rows are bucketed.
        let rows = html.matches("ranks 295–299").count();
        assert!(rows >= 2, "{rows}");
        assert!(html.len() < 2_000_000, "{} bytes", html.len());
    }

    #[test]
    fn an_empty_trace_still_renders() {
        let html = render(&analyze(&[] as &[TraceFile]), "empty");
        balanced(&html).unwrap();
        assert!(html.contains("No complete collective"));
    }

    #[test]
    fn a_trees_report_has_its_nodes_paths_and_orders() {
        let a = analyze(&crate::tree::tests::two_level_tree());
        let html = render(&a, "tree");
        balanced(&html).unwrap();
        assert!(html.contains("id=\"tree\""));
        // Node 1: down 30 ns, up 20 ns, subtree 1 930 ns, all waves alike.
        assert!(
            html.contains(
                "<tr><td>1</td><td class=\"l\">commnode</td><td>0</td><td>2</td><td>2</td>\
                 <td>30 ns</td><td>30 ns</td><td>30 ns</td><td>20 ns</td><td>20 ns</td>\
                 <td>20 ns</td><td>1.930 µs</td><td>1.930 µs</td><td>1.930 µs</td>\
                 <td>node 3 (2×)</td></tr>"
            ),
            "{html}"
        );
        assert_eq!(html.matches("<polyline").count(), 3);
        assert!(html.contains("back-end node 3: node 1 transit 3→1: 50 ns;"));
        assert!(html.contains("Children of node 0 (front-end)"));
        assert!(html.contains("Children of node 1 (commnode)"));

        let j = json(&a);
        assert_eq!(j["tree"]["root"], 0);
        assert_eq!(j["tree"]["nodes"][1]["down_latency"]["mean"], 30.0);
        assert_eq!(j["tree"]["paths"][1]["toward_root"], 300.0);
        assert_eq!(j["stages"]["stages"], serde_json::json!([]));

        let text = text(&a);
        assert!(text.contains("\n1      commnode"), "{text}");
        assert!(
            text.contains("slowest back-end path: node 4 (4→0), 1.800 µs to the root"),
            "{text}"
        );
    }

    #[test]
    fn json_and_text_carry_departure_orders() {
        let a = analyze(&slow_rank_job(5, 2, 5_000));
        let j = json(&a);
        let c = &j["collectives"][0];
        assert_eq!(c["collector"], "ctx0/allreduce");
        assert_eq!(c["culprit"], 2);
        // Ranks leave at last + 100 + rank: rank 0 first, rank 3 last every time.
        assert_eq!(
            c["ranks"][0]["departure_hist"],
            serde_json::json!([5, 0, 0, 0])
        );
        assert_eq!(
            c["ranks"][3]["departure_hist"],
            serde_json::json!([0, 0, 0, 5])
        );
        assert_eq!(
            c["ranks"][2]["arrival_hist"],
            serde_json::json!([0, 0, 0, 5])
        );
        assert_eq!(c["ranks"][0]["mean_arrival_wait"], 5_000.0);
        assert_eq!(j["summary"]["instances"], 5);
        let text = text(&a);
        assert!(
            text.contains(
                "ctx0/allreduce          5  rank 0 (5×)  rank 2 (5×)  rank 0 (5×)  rank 3 (5×)"
            ),
            "{text}"
        );
    }

    #[test]
    fn small_helpers() {
        assert_eq!(buckets(5, 64), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
        assert_eq!(
            buckets(130, 64),
            (0..130)
                .step_by(3)
                .map(|s| s..(s + 3).min(130))
                .collect::<Vec<_>>()
        );
        assert!(buckets(130, 64).len() <= 64);
        assert_eq!(buckets(0, 64), vec![]);
        assert_eq!(ordinal(1), "1st");
        assert_eq!(ordinal(12), "12th");
        assert_eq!(ordinal(23), "23rd");
        assert_eq!(rank_label(&[3]), "rank 3");
        assert_eq!(rank_label(&[3, 4, 9]), "ranks 3–9");
        assert_eq!(esc("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
    }
}

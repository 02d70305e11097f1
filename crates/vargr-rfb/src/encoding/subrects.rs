//! Covering an area's pixels with one-colour rectangles, for RRE and Hextile.

/// A rectangle of one pixel value inside an area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sub {
    pub value: u32,
    pub x: u16,
    pub y: u16,
    pub w: u16,
    pub h: u16,
}

/// The value most pixels have (the background that needs no rectangles).
pub(crate) fn most_common(values: &[u32]) -> u32 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let (mut best, mut best_n) = (sorted.first().copied().unwrap_or(0), 0);
    let mut i = 0;
    while i < sorted.len() {
        let j = i + sorted[i..].iter().take_while(|&&v| v == sorted[i]).count();
        if j - i > best_n {
            (best, best_n) = (sorted[i], j - i);
        }
        i = j;
    }
    best
}

/// Greedy cover of every pixel that is not `bg`: from the first uncovered pixel in
/// row order, the longest run of its value to the right, then as many rows down as
/// repeat that run. Stops (returns `None`) once more than `max` rectangles are needed.
pub(crate) fn cover(values: &[u32], w: u16, h: u16, bg: u32, max: usize) -> Option<Vec<Sub>> {
    let (w, h) = (w as usize, h as usize);
    let mut done = vec![false; values.len()];
    let mut subs = Vec::new();
    for y in 0..h {
        for x in 0..w {
            let i = y * w + x;
            if done[i] || values[i] == bg {
                continue;
            }
            let v = values[i];
            let run = (x..w)
                .take_while(|&xx| values[y * w + xx] == v && !done[y * w + xx])
                .count();
            let rows = 1
                + (y + 1..h)
                    .take_while(|&yy| {
                        (x..x + run).all(|xx| values[yy * w + xx] == v && !done[yy * w + xx])
                    })
                    .count();
            for yy in y..y + rows {
                done[yy * w + x..yy * w + x + run].fill(true);
            }
            if subs.len() == max {
                return None;
            }
            subs.push(Sub {
                value: v,
                x: x as u16,
                y: y as u16,
                w: run as u16,
                h: rows as u16,
            });
        }
    }
    Some(subs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cover_paints_back_the_area() {
        let w = 7u16;
        let h = 5u16;
        let values: Vec<u32> = (0..35u32)
            .map(|i| [0, 1, 1, 2][(i * i % 7 % 4) as usize])
            .collect();
        let bg = most_common(&values);
        let subs = cover(&values, w, h, bg, usize::MAX).unwrap();
        let mut painted = vec![bg; values.len()];
        for s in &subs {
            for y in s.y..s.y + s.h {
                for x in s.x..s.x + s.w {
                    painted[y as usize * w as usize + x as usize] = s.value;
                }
            }
        }
        assert_eq!(painted, values);
        assert!(cover(&values, w, h, bg, 1).is_none());
    }
}

//! What one viewer has not yet received, as a grid of tiles.
//!
//! A grid keeps the memory fixed however many updates pile up while a viewer does
//! not ask, and taking tiles in rows and merging equal runs gives few rectangles.
//! Whole tiles are sent even past a request's edge: RFB lets a server send more.

/// Tile side in pixels: two Hextile tiles, half a ZRLE tile.
pub(crate) const TILE: u16 = 32;

pub(crate) struct Dirty {
    width: u16,
    height: u16,
    cols: usize,
    tiles: Vec<bool>,
}

impl Dirty {
    /// Everything dirty: a new viewer has seen nothing.
    pub(crate) fn all(width: u16, height: u16) -> Dirty {
        let cols = (width as usize).div_ceil(TILE as usize);
        let rows = (height as usize).div_ceil(TILE as usize);
        Dirty {
            width,
            height,
            cols,
            tiles: vec![true; cols * rows],
        }
    }

    /// Nothing dirty.
    pub(crate) fn clean(width: u16, height: u16) -> Dirty {
        let mut d = Dirty::all(width, height);
        d.tiles.fill(false);
        d
    }

    /// Whether any tile is dirty.
    pub(crate) fn any_at_all(&self) -> bool {
        self.tiles.contains(&true)
    }

    /// Tile columns and rows that the area touches, clipped to the screen.
    fn span(&self, x: u16, y: u16, w: u16, h: u16) -> Option<(usize, usize, usize, usize)> {
        let x1 = (x as usize + w as usize).min(self.width as usize);
        let y1 = (y as usize + h as usize).min(self.height as usize);
        if x as usize >= x1 || y as usize >= y1 {
            return None;
        }
        let t = TILE as usize;
        Some((x as usize / t, (x1 - 1) / t, y as usize / t, (y1 - 1) / t))
    }

    pub(crate) fn mark(&mut self, x: u16, y: u16, w: u16, h: u16) {
        if let Some((c0, c1, r0, r1)) = self.span(x, y, w, h) {
            for r in r0..=r1 {
                self.tiles[r * self.cols + c0..=r * self.cols + c1].fill(true);
            }
        }
    }

    /// Whether any tile the area touches is dirty.
    pub(crate) fn any(&self, x: u16, y: u16, w: u16, h: u16) -> bool {
        self.span(x, y, w, h).is_some_and(|(c0, c1, r0, r1)| {
            (r0..=r1).any(|r| self.tiles[r * self.cols + c0..=r * self.cols + c1].contains(&true))
        })
    }

    /// Marks dirty where a copy of the area at (`sx`, `sy`) to (`dx`, `dy`) carries
    /// dirty tiles: a peer that copies what it holds gets stale pixels exactly there.
    pub(crate) fn mark_copied(&mut self, sx: u16, sy: u16, dx: u16, dy: u16, w: u16, h: u16) {
        let Some((c0, c1, r0, r1)) = self.span(sx, sy, w, h) else {
            return;
        };
        let t = TILE as i64;
        // All of the source's dirt first: marking the destination as we go would
        // carry dirt it just received again where the two overlap.
        let mut moved = Vec::new();
        for r in r0..=r1 {
            for c in c0..=c1 {
                if !self.tiles[r * self.cols + c] {
                    continue;
                }
                // The tile, clipped to the source, moved to the destination.
                let x0 = (c as i64 * t).max(sx as i64);
                let y0 = (r as i64 * t).max(sy as i64);
                let x1 = ((c as i64 + 1) * t).min(sx as i64 + w as i64);
                let y1 = ((r as i64 + 1) * t).min(sy as i64 + h as i64);
                let (mx, my) = (x0 - sx as i64 + dx as i64, y0 - sy as i64 + dy as i64);
                moved.push((mx as u16, my as u16, (x1 - x0) as u16, (y1 - y0) as u16));
            }
        }
        for (x, y, w, h) in moved {
            self.mark(x, y, w, h);
        }
    }

    /// Takes the dirty tiles the area touches, as rectangles (x, y, w, h) inside the
    /// screen, and marks them clean.
    pub(crate) fn take(&mut self, x: u16, y: u16, w: u16, h: u16) -> Vec<(u16, u16, u16, u16)> {
        let Some((c0, c1, r0, r1)) = self.span(x, y, w, h) else {
            return Vec::new();
        };
        // (first col, last col, first row, last row): runs in a row, extended down
        // while the next row has the same run.
        let mut done: Vec<(usize, usize, usize, usize)> = Vec::new();
        let mut open: Vec<(usize, usize, usize, usize)> = Vec::new();
        for r in r0..=r1 {
            let mut runs = Vec::new();
            let mut c = c0;
            while c <= c1 {
                if self.tiles[r * self.cols + c] {
                    let start = c;
                    while c <= c1 && self.tiles[r * self.cols + c] {
                        self.tiles[r * self.cols + c] = false;
                        c += 1;
                    }
                    runs.push((start, c - 1));
                } else {
                    c += 1;
                }
            }
            let mut next = Vec::new();
            for (a, b) in runs {
                match open.iter().position(|o| (o.0, o.1) == (a, b)) {
                    Some(i) => {
                        let mut o = open.swap_remove(i);
                        o.3 = r;
                        next.push(o);
                    }
                    None => next.push((a, b, r, r)),
                }
            }
            done.append(&mut open);
            open = next;
        }
        done.append(&mut open);
        let t = TILE as usize;
        done.into_iter()
            .map(|(a, b, r0, r1)| {
                let (x0, y0) = (a * t, r0 * t);
                let x1 = ((b + 1) * t).min(self.width as usize);
                let y1 = ((r1 + 1) * t).min(self.height as usize);
                (x0 as u16, y0 as u16, (x1 - x0) as u16, (y1 - y0) as u16)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_rectangles_cover_exactly_the_dirty_tiles_and_clean_them() {
        let mut d = Dirty::all(100, 70);
        assert_eq!(d.take(0, 0, 100, 70), vec![(0, 0, 100, 70)]);
        assert!(!d.any(0, 0, 100, 70));
        d.mark(40, 5, 1, 1); // tile (1, 0)
        d.mark(70, 40, 30, 30); // tiles (2..3, 1..2)
        d.mark(0, 40, 1, 1); // tile (0, 1)
        assert!(d.any(33, 0, 1, 1) && !d.any(0, 0, 31, 31));
        let mut got = d.take(0, 0, 100, 70);
        got.sort();
        assert_eq!(
            got,
            vec![(0, 32, 32, 32), (32, 0, 32, 32), (64, 32, 36, 38)]
        );
        assert!(!d.any(0, 0, 100, 70));
        // Only tiles the area touches are taken.
        d.mark(0, 0, 100, 70);
        assert_eq!(d.take(10, 10, 5, 5), vec![(0, 0, 32, 32)]);
        assert!(d.any(32, 0, 1, 1));
        assert!(d.take(100, 0, 5, 5).is_empty());
    }

    #[test]
    fn a_copy_carries_dirt_to_where_it_lands() {
        let mut d = Dirty::clean(100, 70);
        d.mark(40, 5, 1, 1); // tile (1, 0)
                             // Rows 0..30 of columns 30..70 move down by 36: only what came from tile
                             // (1, 0), columns 32..64, lands dirty (rows 36..66: tile rows 1 and 2), not
                             // columns 30..32 or 64..70.
        d.mark_copied(30, 0, 30, 36, 40, 30);
        assert_eq!(d.take(0, 0, 100, 70), vec![(32, 0, 32, 70)]);
        // Nothing dirty in the source: nothing to carry.
        d.mark_copied(0, 0, 50, 40, 20, 20);
        assert!(!d.any(0, 0, 100, 70));
    }
}

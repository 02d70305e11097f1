//! A framebuffer in one canonical pixel format, the common ground of every encoding.
//!
//! Decoders paint into it and encoders read from it, so a proxy can take a server's
//! updates in one encoding and pixel format and give each viewer its own.

use crate::RfbError;

/// `width × height` pixels of canonical `0x00RRGGBB`, row by row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framebuffer {
    width: u16,
    height: u16,
    pixels: Vec<u32>,
}

impl Framebuffer {
    /// A black framebuffer.
    pub fn new(width: u16, height: u16) -> Framebuffer {
        Framebuffer {
            width,
            height,
            pixels: vec![0; width as usize * height as usize],
        }
    }

    pub fn width(&self) -> u16 {
        self.width
    }

    pub fn height(&self) -> u16 {
        self.height
    }

    /// All pixels, row by row.
    pub fn pixels(&self) -> &[u32] {
        &self.pixels
    }

    /// Checks that the rectangle lies inside; the error names `message`.
    pub fn check(
        &self,
        message: &'static str,
        x: u16,
        y: u16,
        w: u16,
        h: u16,
    ) -> Result<(), RfbError> {
        if x as u32 + w as u32 > self.width as u32 || y as u32 + h as u32 > self.height as u32 {
            return Err(RfbError::OutOfBounds {
                message,
                x: x as u32,
                y: y as u32,
                width: w as u32,
                height: h as u32,
                fb_width: self.width,
                fb_height: self.height,
            });
        }
        Ok(())
    }

    /// The pixel at (x, y); the caller keeps it inside.
    pub fn get(&self, x: u16, y: u16) -> u32 {
        self.pixels[y as usize * self.width as usize + x as usize]
    }

    /// Writes `w × h` pixels (row by row) at (x, y).
    pub fn put_rect(
        &mut self,
        x: u16,
        y: u16,
        w: u16,
        h: u16,
        src: &[u32],
    ) -> Result<(), RfbError> {
        self.check("put_rect", x, y, w, h)?;
        if src.len() != w as usize * h as usize {
            return Err(RfbError::Corrupt {
                encoding: "put_rect",
                what: format!("{} pixels given for a {w}x{h} rectangle", src.len()),
            });
        }
        if w == 0 {
            return Ok(());
        }
        let fw = self.width as usize;
        for (row, line) in src.chunks_exact(w as usize).enumerate() {
            let at = (y as usize + row) * fw + x as usize;
            self.pixels[at..at + w as usize].copy_from_slice(line);
        }
        Ok(())
    }

    /// Fills a rectangle with one colour.
    pub fn fill_rect(&mut self, x: u16, y: u16, w: u16, h: u16, rgb: u32) -> Result<(), RfbError> {
        self.check("fill_rect", x, y, w, h)?;
        let fw = self.width as usize;
        for row in y as usize..y as usize + h as usize {
            let at = row * fw + x as usize;
            self.pixels[at..at + w as usize].fill(rgb);
        }
        Ok(())
    }

    /// Copies `w × h` pixels from (sx, sy) to (dx, dy); overlapping areas are copied as
    /// if through a temporary buffer, as CopyRect requires.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_rect(
        &mut self,
        sx: u16,
        sy: u16,
        dx: u16,
        dy: u16,
        w: u16,
        h: u16,
    ) -> Result<(), RfbError> {
        self.check("CopyRect source", sx, sy, w, h)?;
        self.check("CopyRect", dx, dy, w, h)?;
        let fw = self.width as usize;
        let (w, h) = (w as usize, h as usize);
        let copy_row = |pixels: &mut Vec<u32>, r: usize| {
            let from = (sy as usize + r) * fw + sx as usize;
            let to = (dy as usize + r) * fw + dx as usize;
            pixels.copy_within(from..from + w, to);
        };
        // Moving down, rows are copied bottom-up so no source row is overwritten before
        // it is read; copy_within handles overlap inside a row.
        if dy > sy {
            (0..h).rev().for_each(|r| copy_row(&mut self.pixels, r));
        } else {
            (0..h).for_each(|r| copy_row(&mut self.pixels, r));
        }
        Ok(())
    }

    /// Reads `w × h` pixels at (x, y), row by row.
    pub fn get_rect(&self, x: u16, y: u16, w: u16, h: u16) -> Result<Vec<u32>, RfbError> {
        self.check("get_rect", x, y, w, h)?;
        let fw = self.width as usize;
        let mut out = Vec::with_capacity(w as usize * h as usize);
        for row in y as usize..y as usize + h as usize {
            let at = row * fw + x as usize;
            out.extend_from_slice(&self.pixels[at..at + w as usize]);
        }
        Ok(out)
    }

    /// Changes the size, keeping the pixels of the area both sizes share and making
    /// new ones black.
    /// The picture as a viewer in `pf` sees it: each pixel through the format and
    /// back (fewer bits per channel lose the low ones).
    pub fn as_seen_in(&self, pf: &crate::PixelFormat) -> Framebuffer {
        let mut q = self.clone();
        for p in &mut q.pixels {
            *p = pf.to_rgb(pf.from_rgb(*p));
        }
        q
    }

    pub fn resize(&mut self, width: u16, height: u16) {
        let mut next = Framebuffer::new(width, height);
        let (w, h) = (self.width.min(width), self.height.min(height));
        let keep = self.get_rect(0, 0, w, h).expect("inside the old size");
        next.put_rect(0, 0, w, h, &keep)
            .expect("inside the new size");
        *self = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(w: u16, h: u16) -> Framebuffer {
        let mut fb = Framebuffer::new(w, h);
        let px: Vec<u32> = (0..w as u32 * h as u32).collect();
        fb.put_rect(0, 0, w, h, &px).unwrap();
        fb
    }

    /// CopyRect through an explicit temporary, the definition the fast path must match.
    fn copy_slow(fb: &mut Framebuffer, sx: u16, sy: u16, dx: u16, dy: u16, w: u16, h: u16) {
        let tmp = fb.get_rect(sx, sy, w, h).unwrap();
        fb.put_rect(dx, dy, w, h, &tmp).unwrap();
    }

    #[test]
    fn overlapping_copies_match_a_copy_through_a_temporary() {
        for (sx, sy, dx, dy) in [
            (0, 0, 1, 1),
            (1, 1, 0, 0),
            (2, 0, 0, 0),
            (0, 0, 2, 0),
            (0, 3, 0, 1),
            (0, 1, 0, 3),
            (3, 0, 0, 4),
        ] {
            let mut a = numbered(9, 8);
            let mut b = a.clone();
            a.copy_rect(sx, sy, dx, dy, 5, 4).unwrap();
            copy_slow(&mut b, sx, sy, dx, dy, 5, 4);
            assert_eq!(a, b, "copy {sx},{sy} -> {dx},{dy}");
        }
    }

    #[test]
    fn rectangles_outside_are_refused() {
        let mut fb = numbered(4, 4);
        assert!(fb.put_rect(3, 0, 2, 1, &[0, 0]).is_err());
        assert!(fb.copy_rect(0, 0, 0, 3, 1, 2).is_err());
        assert!(fb.get_rect(0, 4, 1, 1).is_err());
        assert!(fb.put_rect(0, 0, 2, 2, &[1, 2, 3]).is_err());
        assert!(fb.get_rect(4, 4, 0, 0).unwrap().is_empty());
    }

    #[test]
    fn resize_keeps_the_shared_area() {
        let mut fb = numbered(4, 3);
        fb.resize(2, 5);
        assert_eq!(
            fb.get_rect(0, 0, 2, 5).unwrap(),
            vec![0, 1, 4, 5, 8, 9, 0, 0, 0, 0]
        );
    }
}

//! Pixel formats (RFC 6143 §7.4) and conversion between them.
//!
//! Every peer picks its own pixel format, so a proxy converts: pixels are read from the
//! wire into the canonical `0x00RRGGBB` value of [`crate::Framebuffer`] and written
//! back in whatever true-colour format a viewer asked for. Colour maps are refused.

use bytes::{Buf, BufMut};

use crate::RfbError;

/// The 16-byte PIXEL_FORMAT structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PixelFormat {
    pub bits_per_pixel: u8,
    pub depth: u8,
    pub big_endian: bool,
    pub true_colour: bool,
    pub red_max: u16,
    pub green_max: u16,
    pub blue_max: u16,
    pub red_shift: u8,
    pub green_shift: u8,
    pub blue_shift: u8,
}

impl PixelFormat {
    /// Bytes on the wire.
    pub const LEN: usize = 16;

    /// 32 bits per pixel, depth 24, little-endian, red in bits 16-23: what most servers
    /// (TigerVNC among them) offer, and the layout of the canonical value.
    pub const RGB888: PixelFormat = PixelFormat {
        bits_per_pixel: 32,
        depth: 24,
        big_endian: false,
        true_colour: true,
        red_max: 255,
        green_max: 255,
        blue_max: 255,
        red_shift: 16,
        green_shift: 8,
        blue_shift: 0,
    };

    /// 16 bits per pixel, 5-6-5, little-endian.
    pub const RGB565: PixelFormat = PixelFormat {
        bits_per_pixel: 16,
        depth: 16,
        big_endian: false,
        true_colour: true,
        red_max: 31,
        green_max: 63,
        blue_max: 31,
        red_shift: 11,
        green_shift: 5,
        blue_shift: 0,
    };

    /// 8 bits per pixel, 3-3-2 (BGR233, red in the low bits).
    pub const BGR233: PixelFormat = PixelFormat {
        bits_per_pixel: 8,
        depth: 8,
        big_endian: false,
        true_colour: true,
        red_max: 7,
        green_max: 7,
        blue_max: 3,
        red_shift: 0,
        green_shift: 3,
        blue_shift: 6,
    };

    pub fn encode(&self, out: &mut impl BufMut) {
        out.put_u8(self.bits_per_pixel);
        out.put_u8(self.depth);
        out.put_u8(self.big_endian as u8);
        out.put_u8(self.true_colour as u8);
        out.put_u16(self.red_max);
        out.put_u16(self.green_max);
        out.put_u16(self.blue_max);
        out.put_u8(self.red_shift);
        out.put_u8(self.green_shift);
        out.put_u8(self.blue_shift);
        out.put_bytes(0, 3);
    }

    /// Reads the 16 bytes; the caller has checked that they are there. Any bytes make
    /// a `PixelFormat`; [`PixelFormat::validate`] says whether it can be used.
    pub(crate) fn read(buf: &mut &[u8]) -> PixelFormat {
        let pf = PixelFormat {
            bits_per_pixel: buf.get_u8(),
            depth: buf.get_u8(),
            big_endian: buf.get_u8() != 0,
            true_colour: buf.get_u8() != 0,
            red_max: buf.get_u16(),
            green_max: buf.get_u16(),
            blue_max: buf.get_u16(),
            red_shift: buf.get_u8(),
            green_shift: buf.get_u8(),
            blue_shift: buf.get_u8(),
        };
        buf.advance(3);
        pf
    }

    /// Checks that pixels in this format can be converted: 8, 16 or 32 bits, true
    /// colour, each channel's maximum of the form 2^n - 1 and inside the pixel.
    pub fn validate(&self) -> Result<(), RfbError> {
        let bpp = self.bits_per_pixel;
        if !matches!(bpp, 8 | 16 | 32) {
            return Err(RfbError::BadPixelFormat(format!(
                "bits-per-pixel {bpp} is not 8, 16 or 32"
            )));
        }
        if self.depth == 0 || self.depth > bpp {
            return Err(RfbError::BadPixelFormat(format!(
                "depth {} is not in 1..={bpp}",
                self.depth
            )));
        }
        if !self.true_colour {
            return Err(RfbError::BadPixelFormat(
                "colour maps are not supported (true-colour-flag is 0)".into(),
            ));
        }
        for (name, max, shift) in [
            ("red", self.red_max, self.red_shift),
            ("green", self.green_max, self.green_shift),
            ("blue", self.blue_max, self.blue_shift),
        ] {
            let bits = 16 - max.leading_zeros();
            if max == 0 || (max as u32 + 1) != 1 << bits {
                return Err(RfbError::BadPixelFormat(format!(
                    "{name}-max {max} is not of the form 2^n - 1"
                )));
            }
            if shift as u32 + bits > bpp as u32 {
                return Err(RfbError::BadPixelFormat(format!(
                    "{name} channel (shift {shift}, {bits} bits) exceeds {bpp} bits per pixel"
                )));
            }
        }
        Ok(())
    }

    /// Bytes per pixel on the wire.
    pub fn bytes_per_pixel(&self) -> usize {
        (self.bits_per_pixel as usize).div_ceil(8)
    }

    /// Reads one pixel value of [`PixelFormat::bytes_per_pixel`] bytes.
    pub fn read_value(&self, bytes: &[u8]) -> u32 {
        let mut v = 0u32;
        if self.big_endian {
            for &b in bytes {
                v = (v << 8) | b as u32;
            }
        } else {
            for &b in bytes.iter().rev() {
                v = (v << 8) | b as u32;
            }
        }
        v
    }

    /// Writes one pixel value in [`PixelFormat::bytes_per_pixel`] bytes.
    pub fn write_value(&self, value: u32, out: &mut impl BufMut) {
        match (self.bytes_per_pixel(), self.big_endian) {
            (1, _) => out.put_u8(value as u8),
            (2, true) => out.put_u16(value as u16),
            (2, false) => out.put_u16_le(value as u16),
            (_, true) => out.put_u32(value),
            (_, false) => out.put_u32_le(value),
        }
    }

    /// A pixel value in this format to canonical `0x00RRGGBB`. A format that fails
    /// [`PixelFormat::validate`] gives some colour, never a panic.
    pub fn to_rgb(&self, value: u32) -> u32 {
        let ch = |shift: u8, max: u16| {
            let v = value.checked_shr(shift as u32).unwrap_or(0) & max as u32;
            ((v * 255 + max as u32 / 2)
                .checked_div(max as u32)
                .unwrap_or(0))
                & 0xff
        };
        (ch(self.red_shift, self.red_max) << 16)
            | (ch(self.green_shift, self.green_max) << 8)
            | ch(self.blue_shift, self.blue_max)
    }

    /// Canonical `0x00RRGGBB` to a pixel value in this format (rounded to nearest).
    pub fn from_rgb(&self, rgb: u32) -> u32 {
        let ch = |c: u32, shift: u8, max: u16| {
            ((c * max as u32 + 127) / 255)
                .checked_shl(shift as u32)
                .unwrap_or(0)
        };
        ch((rgb >> 16) & 0xff, self.red_shift, self.red_max)
            | ch((rgb >> 8) & 0xff, self.green_shift, self.green_max)
            | ch(rgb & 0xff, self.blue_shift, self.blue_max)
    }

    /// Reads one pixel from the wire into canonical form.
    pub fn read_rgb(&self, bytes: &[u8]) -> u32 {
        self.to_rgb(self.read_value(bytes))
    }

    /// Writes canonical `0x00RRGGBB` as one pixel on the wire.
    pub fn write_rgb(&self, rgb: u32, out: &mut impl BufMut) {
        self.write_value(self.from_rgb(rgb), out)
    }
}

/// Converts a pixel value from one true-colour format to another.
pub fn convert_pixel(from: &PixelFormat, to: &PixelFormat, value: u32) -> u32 {
    if from == to {
        return value;
    }
    to.from_rgb(from.to_rgb(value))
}

/// Converts packed pixels (whole pixels only) from one true-colour format to another.
/// Formats that fail [`PixelFormat::validate`] give some bytes, never a panic.
pub fn convert_pixels(from: &PixelFormat, to: &PixelFormat, bytes: &[u8]) -> Vec<u8> {
    let n = from.bytes_per_pixel();
    if n == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(bytes.len() / n * to.bytes_per_pixel());
    for px in bytes.chunks_exact(n) {
        to.write_value(convert_pixel(from, to, from.read_value(px)), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_formats_are_valid_and_odd_ones_are_not() {
        for pf in [
            PixelFormat::RGB888,
            PixelFormat::RGB565,
            PixelFormat::BGR233,
        ] {
            pf.validate().unwrap();
        }
        let mut map = PixelFormat::BGR233;
        map.true_colour = false;
        assert!(map.validate().is_err());
        let mut wide = PixelFormat::RGB565;
        wide.red_shift = 12; // 5 bits from 12 run past bit 15
        assert!(wide.validate().is_err());
        let mut odd = PixelFormat::RGB888;
        odd.green_max = 200;
        assert!(odd.validate().is_err());
        let mut bpp = PixelFormat::RGB888;
        bpp.bits_per_pixel = 24;
        assert!(bpp.validate().is_err());
    }

    #[test]
    fn conversion_keeps_what_the_narrower_format_holds() {
        let mut be = PixelFormat::RGB888;
        be.big_endian = true;
        for rgb in [0x000000, 0xffffff, 0x123456, 0xff0080, 0x00ff00] {
            assert_eq!(
                PixelFormat::RGB888.to_rgb(PixelFormat::RGB888.from_rgb(rgb)),
                rgb
            );
            let v565 = PixelFormat::RGB565.from_rgb(rgb);
            // 565 → 888 → 565 is exact.
            let back = convert_pixel(
                &PixelFormat::RGB888,
                &PixelFormat::RGB565,
                convert_pixel(&PixelFormat::RGB565, &PixelFormat::RGB888, v565),
            );
            assert_eq!(back, v565);
        }
        assert_eq!(PixelFormat::RGB565.to_rgb(0xf800), 0xff0000);
        assert_eq!(PixelFormat::BGR233.to_rgb(0b11_000_000), 0x0000ff);
        let mut out = Vec::new();
        be.write_value(0x00112233, &mut out);
        assert_eq!(out, [0, 0x11, 0x22, 0x33]);
        assert_eq!(be.read_value(&out), 0x00112233);
        let le = convert_pixels(&be, &PixelFormat::RGB888, &out);
        assert_eq!(le, [0x33, 0x22, 0x11, 0]);
    }
}

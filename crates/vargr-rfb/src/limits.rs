//! Bounds on every length a peer sends, checked before anything is allocated or
//! waited for: a hostile peer cannot make a decoder hold more than these.

use crate::RfbError;

/// Upper bounds on lengths read from the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// ClientCutText and ServerCutText.
    pub max_cut_text: u32,
    /// ServerInit's desktop name.
    pub max_name: u32,
    /// Reason strings of a refused connection or failed authentication.
    pub max_reason: u32,
    /// Framebuffer width and height (ServerInit, DesktopSize).
    pub max_width: u16,
    pub max_height: u16,
    /// The encoded data of one rectangle (Raw pixels, RRE subrectangles, ZRLE's
    /// compressed bytes, Hextile tiles).
    pub max_rect_bytes: u64,
    /// A whole FramebufferUpdate: rectangles are refused once the update has passed
    /// this, so a partial update held while it arrives stays below this plus one
    /// rectangle.
    pub max_update_bytes: u64,
    /// SetEncodings' list.
    pub max_encodings: u16,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_cut_text: 1 << 20,
            max_name: 4096,
            max_reason: 4096,
            max_width: 16384,
            max_height: 16384,
            max_rect_bytes: 64 << 20,
            max_update_bytes: 256 << 20,
            max_encodings: 1024,
        }
    }
}

impl Limits {
    pub(crate) fn check_size(
        &self,
        message: &'static str,
        width: u16,
        height: u16,
    ) -> Result<(), RfbError> {
        for (field, v, max) in [
            ("framebuffer-width", width, self.max_width),
            ("framebuffer-height", height, self.max_height),
        ] {
            if v > max {
                return Err(RfbError::TooLong {
                    message,
                    field,
                    len: v as u64,
                    max: max as u64,
                });
            }
        }
        Ok(())
    }

    pub(crate) fn check_rect_bytes(
        &self,
        encoding: &'static str,
        field: &'static str,
        len: u64,
    ) -> Result<(), RfbError> {
        if len > self.max_rect_bytes {
            return Err(RfbError::TooLong {
                message: encoding,
                field,
                len,
                max: self.max_rect_bytes,
            });
        }
        Ok(())
    }
}

//! VNC authentication (RFC 6143 §7.2.2): the client encrypts the server's 16-byte
//! challenge with DES, keyed by the password.
//!
//! The key is the password's first 8 bytes, zero-padded, with the bits of every byte
//! reversed: the original implementation fed DES its key least significant bit first
//! and every compatible peer has done the same since.

use des::cipher::generic_array::GenericArray;
use des::cipher::{BlockEncrypt, KeyInit};
use des::Des;

/// The response to `challenge` for `password` (only its first 8 bytes count).
pub fn vnc_auth_response(password: &[u8], challenge: &[u8; 16]) -> [u8; 16] {
    let mut key = [0u8; 8];
    for (k, p) in key.iter_mut().zip(password) {
        *k = p.reverse_bits();
    }
    let des = Des::new_from_slice(&key).expect("DES takes an 8-byte key");
    let mut out = *challenge;
    for block in out.chunks_exact_mut(8) {
        des.encrypt_block(GenericArray::from_mut_slice(block));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer() {
        // Password "password", challenge 0..16. Expected value computed independently:
        // key bytes reversed ("password" → 0e 86 ce ce ee f6 4e 26), then DES-ECB with
        // that key on each 8-byte half (`openssl enc -des-ecb -nopad`).
        let challenge: [u8; 16] = core::array::from_fn(|i| i as u8);
        let r = vnc_auth_response(b"password", &challenge);
        assert_eq!(r, EXPECTED);
        // Bytes after the eighth do not count.
        assert_eq!(vnc_auth_response(b"password-and-more", &challenge), r);
        assert_ne!(vnc_auth_response(b"passwore", &challenge), r);
    }

    const EXPECTED: [u8; 16] = [
        0xb8, 0x66, 0x92, 0x41, 0x25, 0xc8, 0xee, 0xbb, 0x9d, 0xeb, 0xc1, 0xdb, 0x61, 0xc5, 0x38,
        0xe2,
    ];
}

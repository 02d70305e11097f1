//! Arbitrary bytes into the handshake's frame checks and into the opener of sealed frames
//! in every protection (none, MAC, AES-256-GCM): errors, never panics or
//! allocations beyond the frame limit; frames that parse come back unchanged through a
//! sealer and an opener.

pub fn run(data: &[u8]) {
    vargr_net::auth::fuzzing::handshake(data);
    vargr_net::seal::fuzzing::open_all(data);
}

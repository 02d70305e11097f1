//! Arbitrary deltas against arbitrary bases: an error or exactly the announced length,
//! never a panic, never more.

use vargr_dedup::delta;

pub fn run(data: &[u8]) {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let split = (usize::from(head) * 4).min(rest.len());
    let (base, d) = rest.split_at(split);
    let len = usize::from(head) * 37 % 3001;
    if let Ok(out) = delta::decode(base, d, len) {
        assert_eq!(out.len(), len);
        // What decodes re-encodes to something that decodes to the same bytes.
        let mut again = Vec::new();
        delta::encode(base, &out, &mut again);
        assert_eq!(delta::decode(base, &again, len).unwrap(), out);
    }
}

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::*;

fn random(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 61) as u8 + b' '
        })
        .collect()
}

/// Syncs `src` to `dest` over a socket pair, sender and receiver on their own threads.
fn sync(src: &Path, dest: &Path, cache: &Path) -> (SendReport, Result<RecvReport, SyncError>) {
    let (a, b) = UnixStream::pair().unwrap();
    let opts = RecvOptions {
        dest: dest.to_path_buf(),
        serve: false,
        cache_root: cache.join("receiver"),
        cache: Default::default(),
        receiver_name: "test-receiver".into(),
    };
    let rt = Transport {
        reader: Box::new(b.try_clone().unwrap()),
        writer: Box::new(b),
        peer: "sender".into(),
    };
    let receiver = std::thread::spawn(move || receive(rt, &opts));
    let st = Transport {
        reader: Box::new(a.try_clone().unwrap()),
        writer: Box::new(a),
        peer: "receiver".into(),
    };
    let opts = SendOptions {
        cache_root: cache.join("sender"),
        sender_name: "test-sender".into(),
        read_chunk: 64 << 10,
        ..SendOptions::default()
    };
    let sent = send(src, st, &opts, &mut |_| {}).unwrap();
    (sent, receiver.join().unwrap())
}

fn assert_same_tree(a: &Path, b: &Path) {
    let ma = Manifest::scan(a).unwrap();
    let mb = Manifest::scan(b).unwrap();
    assert_eq!(ma.entries, mb.entries);
    for e in ma.entries.iter().filter(|e| e.kind == Kind::File) {
        assert_eq!(
            std::fs::read(a.join(&e.path)).unwrap(),
            std::fs::read(b.join(&e.path)).unwrap(),
            "{}",
            e.path
        );
    }
}

#[test]
fn a_tree_arrives_whole_and_a_second_version_costs_little() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    let big = random(3 << 20, 5);
    std::fs::write(src.join("big.bin"), &big).unwrap();
    std::fs::write(src.join("sub/small.txt"), b"hello").unwrap();
    std::fs::write(src.join("sub/deeper/empty"), b"").unwrap();
    std::fs::set_permissions(
        src.join("sub/small.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::os::unix::fs::symlink("sub/small.txt", src.join("link")).unwrap();
    let dest = d.path().join("dest");
    let (sent, recv) = sync(&src, &dest, d.path());
    let recv = recv.unwrap();
    assert_same_tree(&src, &dest);
    assert_eq!((sent.files_sent, recv.files_written), (3, 3));
    assert_eq!(
        std::fs::metadata(dest.join("sub/small.txt"))
            .unwrap()
            .mode()
            & 0o777,
        0o640
    );

    // An edit in the middle of the big file: the second sync sends fingerprints for
    // the rest, and skips the files already in place.
    let mut v2 = big.clone();
    v2.splice(1_000_000..1_000_000, b"inserted text".iter().copied());
    std::fs::write(src.join("big.bin"), &v2).unwrap();
    let (sent2, recv2) = sync(&src, &dest, d.path());
    recv2.unwrap();
    assert_same_tree(&src, &dest);
    assert_eq!((sent2.files_sent, sent2.files_skipped), (1, 2));
    assert!(
        sent2.bytes_on_wire * 20 < sent.bytes_on_wire,
        "{} bytes for the edit vs {} for the first copy",
        sent2.bytes_on_wire,
        sent.bytes_on_wire
    );

    // Nothing changed: nothing but the manifest crosses.
    let (sent3, _) = sync(&src, &dest, d.path());
    assert_eq!((sent3.files_sent, sent3.files_skipped), (0, 3));
}

#[test]
fn files_changed_in_mtime_alone_are_not_rewritten_and_edits_of_the_same_size_are() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let names = ["same.bin", "edited-middle.bin", "edited-end.bin"];
    let data = random(700_000, 3);
    for n in names {
        std::fs::write(src.join(n), &data).unwrap();
    }
    let dest = d.path().join("dest");
    sync(&src, &dest, d.path()).1.unwrap();
    let inode = |n: &str| std::fs::metadata(dest.join(n)).unwrap().ino();
    let before: Vec<u64> = names.iter().map(|n| inode(n)).collect();

    // A new mtime on every file; two edits that keep the size.
    let mut middle = data.clone();
    middle[400_000] ^= 1;
    std::fs::write(src.join(names[1]), &middle).unwrap();
    let mut end = data.clone();
    *end.last_mut().unwrap() ^= 1;
    std::fs::write(src.join(names[2]), &end).unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    for n in names {
        std::fs::File::options()
            .write(true)
            .open(src.join(n))
            .unwrap()
            .set_modified(later)
            .unwrap();
    }
    let (sent, recv) = sync(&src, &dest, d.path());
    assert_eq!((sent.files_sent, recv.unwrap().files_written), (3, 3));
    assert_same_tree(&src, &dest);
    assert_eq!(
        inode(names[0]),
        before[0],
        "an unchanged file was rewritten"
    );
    assert_ne!(inode(names[1]), before[1]);
    assert_ne!(inode(names[2]), before[2]);
    assert!(std::fs::read_dir(&dest).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with("partial")));
}

#[test]
fn a_single_file_goes_into_a_directory_or_to_a_path() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("data.bin");
    std::fs::write(&f, random(100_000, 9)).unwrap();
    let into = d.path().join("into");
    std::fs::create_dir(&into).unwrap();
    sync(&f, &into, d.path()).1.unwrap();
    assert_eq!(
        std::fs::read(into.join("data.bin")).unwrap(),
        std::fs::read(&f).unwrap()
    );
    let to = d.path().join("new/name.bin");
    sync(&f, &to, d.path()).1.unwrap();
    assert_eq!(std::fs::read(&to).unwrap(), std::fs::read(&f).unwrap());
}

#[test]
fn a_stranger_is_refused_with_a_reason() {
    let (mut a, b) = UnixStream::pair().unwrap();
    use std::io::Write;
    a.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let d = tempfile::tempdir().unwrap();
    let t = Transport {
        reader: Box::new(b.try_clone().unwrap()),
        writer: Box::new(b),
        peer: "stranger".into(),
    };
    let e = receive(
        t,
        &RecvOptions {
            dest: d.path().join("x"),
            serve: false,
            cache_root: d.path().join("c"),
            cache: Default::default(),
            receiver_name: "r".into(),
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("bad magic"), "{e}");
}

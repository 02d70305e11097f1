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
    let (sent, received) = sync_with(src, dest, cache, |_, _| {});
    (sent.unwrap(), received)
}

/// [`sync`] with the receiver's options changed by `adjust`.
fn sync_with(
    src: &Path,
    dest: &Path,
    cache: &Path,
    adjust: impl FnOnce(&mut RecvOptions, &mut SendOptions),
) -> (Result<SendReport, SyncError>, Result<RecvReport, SyncError>) {
    let (a, b) = UnixStream::pair().unwrap();
    let mut opts = RecvOptions {
        dest: dest.to_path_buf(),
        serve: false,
        cache_root: cache.join("receiver"),
        cache: Default::default(),
        receiver_name: "test-receiver".into(),
        keep_special_bits: true,
        access: Access::ReadWrite,
    };
    let mut sopts = SendOptions {
        cache_root: cache.join("sender"),
        sender_name: "test-sender".into(),
        read_chunk: 64 << 10,
        ..SendOptions::default()
    };
    adjust(&mut opts, &mut sopts);
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
    let sent = send(src, st, &sopts, &mut |_| {});
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
            keep_special_bits: false,
            access: Access::ReadWrite,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("bad magic"), "{e}");
}

/// A file outside the destination that attacks try to reach, and its state to compare.
fn victim(dir: &Path) -> (std::path::PathBuf, (Vec<u8>, u32, i64)) {
    let v = dir.join("outside/victim");
    std::fs::create_dir_all(v.parent().unwrap()).unwrap();
    std::fs::write(&v, b"precious").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o644)).unwrap();
    let state = state_of(&v);
    (v, state)
}

/// Bytes (empty for a directory), mode and mtime, following links as an attack would.
fn state_of(p: &Path) -> (Vec<u8>, u32, i64) {
    let m = std::fs::metadata(p).unwrap();
    let bytes = if m.is_file() {
        std::fs::read(p).unwrap()
    } else {
        Vec::new()
    };
    (bytes, m.mode() & 0o7777, m.mtime())
}

fn set_mtime(p: &Path, secs_ago: u64) {
    let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago);
    std::fs::File::open(p).unwrap().set_modified(t).unwrap();
}

/// A link named like the receiver's temporary file, planted in the destination: the
/// old receiver created `.f.vargr-partial` with File::create, writing the sender's
/// bytes into the link's target.
#[test]
fn a_link_named_like_a_partial_file_in_the_destination_is_not_written_through() {
    let d = tempfile::tempdir().unwrap();
    let (victim, before) = victim(d.path());
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"the attacker's bytes").unwrap();
    let dest = d.path().join("dest");
    std::fs::create_dir_all(&dest).unwrap();
    std::os::unix::fs::symlink(&victim, dest.join(".f.vargr-partial")).unwrap();
    sync(&src, &dest, d.path()).1.unwrap();
    assert_eq!(state_of(&victim), before);
    assert_eq!(
        std::fs::read(dest.join("f")).unwrap(),
        b"the attacker's bytes"
    );
    assert!(!std::fs::symlink_metadata(dest.join("f"))
        .unwrap()
        .is_symlink());
    // The planted link is left alone (it is not ours to remove), and no temporary
    // file is left behind.
    assert_eq!(
        std::fs::read_link(dest.join(".f.vargr-partial")).unwrap(),
        victim
    );
    let left: Vec<_> = std::fs::read_dir(&dest)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

/// The same link sent by the source: the old receiver created it (links are synced)
/// and then wrote `f` through it.
#[test]
fn a_link_named_like_a_partial_file_in_the_source_arrives_as_a_link() {
    let d = tempfile::tempdir().unwrap();
    let (victim, before) = victim(d.path());
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"the attacker's bytes").unwrap();
    std::os::unix::fs::symlink(&victim, src.join(".f.vargr-partial")).unwrap();
    let dest = d.path().join("dest");
    sync(&src, &dest, d.path()).1.unwrap();
    assert_eq!(state_of(&victim), before);
    assert_same_tree(&src, &dest);
    assert_eq!(
        std::fs::read_link(dest.join(".f.vargr-partial")).unwrap(),
        victim
    );
}

/// `d -> outside` in a first sync, a directory `d/` in a second: the old receiver saw a
/// directory at `d` (following the link), wrote `d/x` into `outside` and set the mode
/// and mtime of `d` on `outside`.
#[test]
fn a_link_replaced_by_a_directory_does_not_lead_outside() {
    let d = tempfile::tempdir().unwrap();
    let outside = d.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o755)).unwrap();
    set_mtime(&outside, 86_400);
    let before = state_of(&outside);
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::os::unix::fs::symlink(&outside, src.join("d")).unwrap();
    let dest = d.path().join("dest");
    sync(&src, &dest, d.path()).1.unwrap();
    assert_eq!(std::fs::read_link(dest.join("d")).unwrap(), outside);

    std::fs::remove_file(src.join("d")).unwrap();
    std::fs::create_dir(src.join("d")).unwrap();
    std::fs::write(src.join("d/x"), b"planted").unwrap();
    std::fs::set_permissions(src.join("d/x"), std::fs::Permissions::from_mode(0o4777)).unwrap();
    std::fs::set_permissions(src.join("d"), std::fs::Permissions::from_mode(0o777)).unwrap();
    set_mtime(&src.join("d"), 7 * 86_400);
    sync(&src, &dest, d.path()).1.unwrap();
    assert!(!outside.join("x").exists(), "written through the link");
    assert_eq!(
        state_of(&outside),
        before,
        "mode or mtime set through the link"
    );
    // As rsync: the link is replaced by the directory.
    assert!(std::fs::symlink_metadata(dest.join("d")).unwrap().is_dir());
    assert_same_tree(&src, &dest);
}

/// Links in the tree are recreated as links, whatever they point at, and their mtime
/// is the link's own: the target's is untouched.
#[test]
fn links_arrive_as_links_and_their_targets_are_not_touched() {
    let d = tempfile::tempdir().unwrap();
    let (victim, before) = victim(d.path());
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/file"), b"x").unwrap();
    std::os::unix::fs::symlink(&victim, src.join("absolute")).unwrap();
    std::os::unix::fs::symlink("sub/file", src.join("relative")).unwrap();
    std::os::unix::fs::symlink("../../nowhere", src.join("dangling")).unwrap();
    let dest = d.path().join("dest");
    sync(&src, &dest, d.path()).1.unwrap();
    assert_same_tree(&src, &dest);
    for (name, target) in [
        ("absolute", victim.as_path()),
        ("relative", Path::new("sub/file")),
        ("dangling", Path::new("../../nowhere")),
    ] {
        assert!(std::fs::symlink_metadata(dest.join(name))
            .unwrap()
            .is_symlink());
        assert_eq!(std::fs::read_link(dest.join(name)).unwrap(), target);
    }
    assert_eq!(state_of(&victim), before);
}

/// A daemon client's path under the root through a link the root holds is refused,
/// naming the link; the old receiver joined the path and followed it.
#[test]
fn a_daemon_refuses_a_destination_through_a_link() {
    let d = tempfile::tempdir().unwrap();
    let outside = d.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let root = d.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("pub")).unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"bytes").unwrap();
    let (_, recv) = sync_with(&src, &root, d.path(), |r, s| {
        r.serve = true;
        s.dest = "pub/copy".into();
    });
    let e = recv.unwrap_err();
    assert!(matches!(e, SyncError::ThroughLink { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&root.join("pub").display().to_string()),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[test]
fn special_bits_are_stripped_unless_kept() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    std::fs::write(src.join("tool"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("tool"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    std::fs::set_permissions(src.join("dir"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    let stripped = d.path().join("stripped");
    sync_with(&src, &stripped, d.path(), |r, _| {
        r.keep_special_bits = false
    })
    .1
    .unwrap();
    assert_eq!(mode(&stripped.join("tool")), 0o755);
    assert_eq!(mode(&stripped.join("dir")), 0o777);
    let kept = d.path().join("kept");
    sync_with(&src, &kept, d.path(), |r, _| r.keep_special_bits = true)
        .1
        .unwrap();
    assert_eq!(mode(&kept.join("tool")), 0o6755);
    assert_eq!(mode(&kept.join("dir")), 0o1777);
}

#[test]
fn a_read_only_receiver_refuses_and_a_write_only_one_tells_nothing_of_its_files() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"bytes").unwrap();
    let dest = d.path().join("dest");
    let (sent, recv) = sync_with(&src, &dest, d.path(), |r, _| r.access = Access::ReadOnly);
    assert!(matches!(recv, Err(SyncError::ReadOnly)), "{recv:?}");
    let e = sent.unwrap_err().to_string();
    assert!(e.contains("read-only"), "the sender is told why: {e}");
    assert!(!dest.exists());

    let write_only = |r: &mut RecvOptions, _: &mut SendOptions| r.access = Access::WriteOnly;
    sync_with(&src, &dest, d.path(), write_only).1.unwrap();
    assert_same_tree(&src, &dest);
    // Unchanged, the file is still sent: the receiver did not say it has it.
    let (sent, _) = sync_with(&src, &dest, d.path(), write_only);
    assert_eq!(sent.unwrap().files_skipped, 0);
    let (sent, _) = sync_with(&src, &dest, d.path(), |_, _| {});
    assert_eq!(sent.unwrap().files_skipped, 1);
}

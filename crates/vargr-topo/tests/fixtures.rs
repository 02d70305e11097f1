//! Loads the files under tests/fixtures through the public API.

use std::path::{Path, PathBuf};

use vargr_topo::{HostFile, HostPolicy, Location, TopoError, Topology};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load(name: &str) -> Topology {
    Topology::load(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn load_err(name: &str) -> TopoError {
    match Topology::load(&fixture(name)) {
        Ok(_) => panic!("{name} should fail"),
        Err(e) => e,
    }
}

/// The error's location, with the file name reduced to its last component.
fn where_(e: &TopoError) -> (String, usize, usize) {
    let Location { file, line, col } = e.location().unwrap_or_else(|| panic!("no location: {e}"));
    let base = Path::new(file)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    (base, *line, *col)
}

#[test]
fn balanced_file_matches_level_list() {
    let t = load("balanced_1x4x16.top");
    assert_eq!(
        (t.len(), t.num_backends(), t.depth(), t.max_fanout()),
        (21, 16, 2, 4)
    );
    let g = Topology::generate("1x4x16").unwrap();
    // same shape, different names
    let shape = |t: &Topology| {
        t.nodes()
            .map(|n| (n.parent, n.children.clone(), n.backend_rank))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&t), shape(&g));
    assert_eq!(t.backend(15).unwrap().name(), "be16.cluster:0");
    assert_eq!(t.root().host, "fe.cluster");
}

#[test]
fn comments_and_whitespace() {
    let t = load("commented.top");
    let names: Vec<String> = t.nodes().map(|n| n.name()).collect();
    assert_eq!(names, ["fe:0", "node1:0", "node1:1", "node2:0", "node2:1"]);
    let ranks: Vec<String> = t.backends().iter().map(|n| n.name()).collect();
    assert_eq!(ranks, ["node2:0", "node2:1", "node1:1"]);
    assert_eq!(load("cluster.toml"), t);
    let w = load("weird_whitespace.top");
    assert_eq!(
        w,
        Topology::parse_mrnet(
            "fe:0 => cn:0 cn:1 ; cn:0 => be:0 be:1 ; cn:1 => be:2 be:3 ;",
            "x"
        )
        .unwrap()
    );
    let lone = load("lone_front_end.top");
    assert_eq!((lone.len(), lone.num_backends()), (1, 0));
}

#[test]
fn fixtures_round_trip() {
    for name in [
        "balanced_1x4x16.top",
        "commented.top",
        "weird_whitespace.top",
        "cluster.toml",
        "lone_front_end.top",
    ] {
        let t = load(name);
        assert_eq!(
            Topology::parse_mrnet(&t.to_mrnet(), "m").unwrap(),
            t,
            "{name}"
        );
        assert_eq!(
            Topology::parse_toml(&t.to_toml(), "t").unwrap(),
            t,
            "{name}"
        );
    }
}

#[test]
fn broken_files_report_file_line_and_column() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("broken_duplicate.top", 3, 14, "duplicate node node1:0 (first seen at 2:9)"),
        ("broken_cycle.top", 4, 12, "cycle: a:0 is listed as a child of b:0"),
        ("broken_unreachable.top", 4, 4, "unreachable node x:0"),
        ("broken_order.top", 2, 1, "node b:0 is defined before it is attached to the tree (it is listed as a child at 3:8)"),
        ("broken_missing_semi.top", 2, 1, "expected `;` to end the statement of fe:0 at 1:1, found `a:0 =>`"),
        ("broken_missing_arrow.top", 2, 5, "expected `=>` or `;` after a:0, found `b:0`"),
        ("broken_bad_rank.top", 2, 14, "bad rank \"one\" in \"b:one\""),
        ("broken_duplicate.toml", 7, 14, "duplicate node b:0 (first seen at 3:21)"),
    ];
    for &(name, line, col, msg) in cases {
        let e = load_err(name);
        assert_eq!(where_(&e), (name.to_string(), line, col), "{e}");
        let shown = e.to_string();
        assert!(
            shown.ends_with(&format!("{name}:{line}:{col}: {msg}")) || shown.contains(msg),
            "{shown}"
        );
        assert!(shown.contains(&format!("{name}:{line}:{col}: ")), "{shown}");
    }
    let e = load_err("broken_empty.top");
    assert!(matches!(e, TopoError::Empty { .. }));
    assert!(e
        .to_string()
        .ends_with("broken_empty.top: empty topology: no statements found"));
    let e = load_err("broken_syntax.toml");
    assert!(matches!(e, TopoError::Toml { at: Some(_), .. }), "{e}");
    assert!(e.to_string().contains("broken_syntax.toml:3:"), "{e}");
    assert!(!e.to_string().contains('\n'), "one line: {e}");
}

#[test]
fn load_generates_specs_and_reports_missing_files() {
    let t = Topology::load(Path::new("kary:2@5")).unwrap();
    assert_eq!(t, Topology::generate("kary:2@5").unwrap());
    let e = Topology::load(Path::new("kary:1@5")).unwrap_err();
    assert!(matches!(e, TopoError::Spec { .. }));
    let e = Topology::load(&fixture("no_such_file.top")).unwrap_err();
    assert!(matches!(&e, TopoError::NotFound { .. }), "{e}");
    assert!(e.to_string().ends_with("no_such_file.top: no such file, and not a topology spec (flat:N, kary:K@N, kary:K^D, knomial:K@N, binomial@N, or a level list such as 1x4x16)"), "{e}");
    // a directory exists but cannot be read as a file
    let e = Topology::load(&fixture("")).unwrap_err();
    assert!(matches!(&e, TopoError::Io { .. }), "{e}");
}

#[test]
fn load_prefers_an_existing_file_named_like_a_spec() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flat:3");
    std::fs::write(&path, "fe:0 => be:0 ;").unwrap();
    assert_eq!(Topology::load(&path).unwrap().num_backends(), 1);
    let upper = dir.path().join("T.TOML");
    std::fs::write(&upper, "[[node]]\nname = \"fe:0\"\nchildren = [\"b:0\"]\n").unwrap();
    assert_eq!(Topology::load(&upper).unwrap().len(), 2);
}

#[test]
fn hostfiles_and_assignment() {
    let hosts = HostFile::load(&fixture("hosts.txt")).unwrap();
    assert_eq!(hosts.total_slots(), 5);
    load("commented.top").check_hosts(&hosts).unwrap();
    let e = load("balanced_1x4x16.top").check_hosts(&hosts).unwrap_err();
    assert!(
        matches!(&e, TopoError::UnknownHost { node, id: 0, .. } if node == "fe.cluster:0"),
        "{e}"
    );

    let mut g = Topology::generate("flat:4").unwrap();
    g.assign_hosts(&hosts, HostPolicy::BySlots).unwrap();
    let names: Vec<String> = g.nodes().map(|n| n.name()).collect();
    assert_eq!(names, ["fe:0", "node1:0", "node1:1", "node2:0", "node2:1"]);
    g.check_hosts(&hosts).unwrap();

    let mut big = Topology::generate("flat:5").unwrap();
    assert!(matches!(
        big.assign_hosts(&hosts, HostPolicy::BySlots),
        Err(TopoError::NotEnoughSlots { .. })
    ));

    let e = HostFile::load(&fixture("broken_hosts.txt")).unwrap_err();
    assert_eq!(where_(&e), ("broken_hosts.txt".into(), 2, 7));
    let e = HostFile::load(&fixture("missing_hosts.txt")).unwrap_err();
    assert!(matches!(e, TopoError::Io { .. }));
}

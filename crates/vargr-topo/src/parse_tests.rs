//! Parser tests: MRNet and TOML inputs, every error with exact line:col.

use crate::{LineCol, Location, TopoError, Topology};

fn mrnet(text: &str) -> Topology {
    Topology::parse_mrnet(text, "topo.txt").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn mrnet_err(text: &str) -> TopoError {
    match Topology::parse_mrnet(text, "topo.txt") {
        Ok(t) => panic!("should fail:\n{text}\n{t:?}"),
        Err(e) => e,
    }
}

fn toml_err(text: &str) -> TopoError {
    match Topology::parse_toml(text, "t.toml") {
        Ok(t) => panic!("should fail:\n{text}\n{t:?}"),
        Err(e) => e,
    }
}

fn at(file: &str, line: usize, col: usize) -> Location {
    Location {
        file: file.into(),
        line,
        col,
    }
}

fn names(t: &Topology) -> Vec<String> {
    t.nodes().map(|n| n.name()).collect()
}

#[test]
fn basic_file() {
    let t = mrnet("fe:0 => cn:0 cn:1 ;\ncn:0 => be:0 be:1 ;\ncn:1 => be:2 be:3 ;\n");
    assert_eq!(
        names(&t),
        ["fe:0", "cn:0", "cn:1", "be:0", "be:1", "be:2", "be:3"]
    );
    assert_eq!((t.num_backends(), t.depth()), (4, 2));
    assert_eq!(t.node(5).unwrap().backend_rank, Some(2));
}

#[test]
fn whitespace_comments_and_layout_do_not_matter() {
    let plain = mrnet("fe:0 => cn:0 cn:1 ; cn:0 => be:0 ; cn:1 => be:1 ;");
    for text in [
        "fe:0=>cn:0 cn:1;cn:0=>be:0;cn:1=>be:1;",
        "# header\nfe:0 =>\n  cn:0   # first\n\tcn:1\n;\n\n// c++ style\ncn:0 => be:0 ; cn:1 => be:1 ; # two\n",
        "\r\nfe:0\r\n=>\r\ncn:0\r\ncn:1\r\n;\r\ncn:0 => be:0 ;//x\r\ncn:1 => be:1;",
        "fe:0 => cn:0 cn:1 ; # ; => not:0 ;\ncn:0 => be:0 ; cn:1 => be:1 ;#",
        "fe:0 => cn:00 cn:1 ; cn:0 => be:0 ; cn:1 => be:1 ;",
    ] {
        assert_eq!(mrnet(text), plain, "{text}");
    }
}

#[test]
fn host_names_and_lone_front_end() {
    let t = mrnet("node-1.cluster_a:0 => node-2.cluster_a:7 ;");
    assert_eq!(names(&t), ["node-1.cluster_a:0", "node-2.cluster_a:7"]);
    let t = mrnet("fe:0 ;");
    assert_eq!((t.len(), t.num_backends(), t.depth()), (1, 0, 0));
    // empty child list is tolerated like `fe:0 ;`
    assert_eq!(mrnet("fe:0 => ;"), t);
    // a leaf may be given an empty statement
    assert_eq!(mrnet("fe:0 => be:0 ; be:0 ;"), mrnet("fe:0 => be:0 ;"));
}

#[test]
fn duplicate_child() {
    let e = mrnet_err("fe:0 => cn:0 ;\ncn:0 => node1:0 node2:0 ;\nnode2:0 =>   node1:0 ;\n");
    assert_eq!(
        e.to_string(),
        "topo.txt:3:14: duplicate node node1:0 (first seen at 2:9)"
    );
    assert!(matches!(
        e,
        TopoError::DuplicateNode {
            first: LineCol { line: 2, col: 9 },
            ..
        }
    ));
    // twice in one list
    let e = mrnet_err("fe:0 => a:0 b:0 a:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:1:17: duplicate node a:0 (first seen at 1:9)"
    );
    // same node written two ways
    let e = mrnet_err("fe:0 => a:1 a:01 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:1:13: duplicate node a:1 (first seen at 1:9)"
    );
}

#[test]
fn duplicate_definition() {
    let e = mrnet_err("fe:0 => a:0 ;\na:0 => b:0 ;\n  a:0 => c:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:3:3: duplicate node a:0 (first seen at 2:1)"
    );
    let e = mrnet_err("fe:0 => a:0 ; fe:0 => b:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:1:15: duplicate node fe:0 (first seen at 1:1)"
    );
}

#[test]
fn cycles() {
    let e = mrnet_err("fe:0 => a:0 ;\na:0 => fe:0 ;");
    assert_eq!(e.location(), Some(&at("topo.txt", 2, 8)));
    assert_eq!(
        e.to_string(),
        "topo.txt:2:8: cycle: fe:0 is listed as a child of a:0, which is fe:0 or one of its descendants"
    );
    let e = mrnet_err("fe:0 => a:0 ;\na:0 => b:0 ;\nb:0 => c:0 a:0 ;");
    assert!(
        matches!(&e, TopoError::Cycle { node, parent, .. } if node == "a:0" && parent == "b:0")
    );
    assert_eq!(e.location(), Some(&at("topo.txt", 3, 12)));
    let e = mrnet_err("fe:0 => fe:0 ;");
    assert_eq!(e.location(), Some(&at("topo.txt", 1, 9)));
    let e = mrnet_err("fe:0 => a:0 ; a:0 => a:0 ;");
    assert!(matches!(e, TopoError::Cycle { .. }), "{e}");
}

#[test]
fn unreachable_and_order() {
    let e = mrnet_err("fe:0 => a:0 ;\n\nx:0 => y:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:3:1: unreachable node x:0: it is never listed as a child, so it is not connected to the root fe:0"
    );
    let e = mrnet_err("fe:0 => a:0 ;\n b:0 => c:0 ;\na:0 => b:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:2:2: node b:0 is defined before it is attached to the tree (it is listed as a child at 3:8); \
         list a parent's statement before its children's"
    );
    // two disconnected cycles are unreachable, not an infinite loop
    let e = mrnet_err("fe:0 => a:0 ; x:0 => y:0 ; y:0 => x:0 ;");
    assert!(matches!(e, TopoError::DefinedBeforeAttached { .. }), "{e}");
}

#[test]
fn missing_arrow() {
    let e = mrnet_err("fe:0 a:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:1:6: expected `=>` or `;` after fe:0, found `a:0`"
    );
    let e = mrnet_err("fe:0 => a:0 ;\na:0 = b:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:2:5: expected `=>` or `;` after a:0, found `=`"
    );
    let e = mrnet_err("fe:0 -> a:0 ;");
    assert_eq!(e.location(), Some(&at("topo.txt", 1, 6)));
    let e = mrnet_err("fe:0");
    assert_eq!(
        e.to_string(),
        "topo.txt:1:5: expected `=>` or `;` after fe:0, found end of file"
    );
}

#[test]
fn missing_semicolon() {
    let e = mrnet_err("fe:0 => a:0 b:0\na:0 => c:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:2:1: expected `;` to end the statement of fe:0 at 1:1, found `a:0 =>`"
    );
    let e = mrnet_err("fe:0 => a:0 ;\n  a:0 => b:0 # no semicolon\n");
    assert_eq!(
        e.to_string(),
        "topo.txt:3:1: expected `;` to end the statement of a:0 at 2:3, found end of file"
    );
    let e = mrnet_err("fe:0 => => a:0 ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:1:9: expected host:rank after fe:0 =>, found `=>`"
    );
    let e = mrnet_err("fe:0 => a:0 ;\n; b:0");
    assert_eq!(
        e.to_string(),
        "topo.txt:2:1: expected host:rank at the start of a statement, found `;`"
    );
}

#[test]
fn bad_rank_and_bad_names() {
    let e = mrnet_err("fe:0 => node:x ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:1:14: bad rank \"x\" in \"node:x\": a rank is a non-negative integer"
    );
    let e = mrnet_err("fe:0 => a:0 ;\na:0 =>\n\tnode: ;");
    assert!(matches!(&e, TopoError::BadRank { rank, .. } if rank.is_empty()));
    assert_eq!(e.location(), Some(&at("topo.txt", 3, 7)));
    let e = mrnet_err("fe:-1 => a:0 ;");
    assert_eq!(e.location(), Some(&at("topo.txt", 1, 4)));
    let e = mrnet_err("fe:0 => a:4294967296 ;");
    assert!(matches!(e, TopoError::BadRank { .. }));
    let e = mrnet_err("fe:0 => node ;");
    assert_eq!(
        e.to_string(),
        "topo.txt:1:9: expected host:rank, found `node`"
    );
    let e = mrnet_err("fe:0 => :3 ;");
    assert!(matches!(e, TopoError::Syntax { .. }));
    // columns count characters, not bytes
    let e = mrnet_err("# é è\nfe:0 => b:0 ; b:0 => ü:0 ;");
    assert_eq!(e.location(), Some(&at("topo.txt", 2, 22)));
}

#[test]
fn empty_files() {
    for text in ["", "   \n\t\n", "# only a comment\n// and another\n"] {
        let e = mrnet_err(text);
        assert_eq!(
            e.to_string(),
            "topo.txt: empty topology: no statements found"
        );
    }
}

#[test]
fn toml_basic_and_equivalent_to_mrnet() {
    let text = r#"
# a comment
[[node]]
name = "fe:0"
children = ["cn:0", 'cn:1']

[[node]]
name = "cn:0"
children = ["be:0", "be:1"]

[[node]]
name = "cn:1"
children = [
    "be:2",   # trailing comments work
]
"#;
    let t = Topology::parse_toml(text, "t.toml").unwrap();
    assert_eq!(
        t,
        mrnet("fe:0 => cn:0 cn:1 ; cn:0 => be:0 be:1 ; cn:1 => be:2 ;")
    );
    let lone = Topology::parse_toml("[[node]]\nname = \"fe:0\"\n", "t.toml").unwrap();
    assert_eq!(lone.len(), 1);
}

#[test]
fn toml_tree_errors_point_at_names() {
    let e = toml_err("[[node]]\nname = \"fe:0\"\nchildren = [\"a:0\", \"a:0\"]\n");
    assert_eq!(
        e.to_string(),
        "t.toml:3:21: duplicate node a:0 (first seen at 3:14)"
    );
    let e = toml_err("[[node]]\nname = \"fe:0\"\nchildren = [\"a:0\"]\n[[node]]\nname = \"a:0\"\nchildren = [\"fe:0\"]\n");
    assert!(matches!(e, TopoError::Cycle { .. }));
    assert_eq!(e.location(), Some(&at("t.toml", 6, 14)));
    let e = toml_err("[[node]]\nname = \"fe:0\"\nchildren = [\"a:0\"]\n[[node]]\nname = \"x:0\"\n");
    assert!(matches!(e, TopoError::Unreachable { .. }));
    assert_eq!(e.location(), Some(&at("t.toml", 5, 9)));
    let e = toml_err("[[node]]\nname = \"fe:0\"\nchildren = [\"a:zz\"]\n");
    assert_eq!(e.location(), Some(&at("t.toml", 3, 16)));
    assert!(matches!(e, TopoError::BadRank { .. }));
}

#[test]
fn toml_syntax_and_shape_errors() {
    let e = toml_err("[[node]]\nname = \"fe:0\"\nchildren = [\"a:0\"\n");
    assert!(
        matches!(
            &e,
            TopoError::Toml {
                at: Some(LineCol { line: 3 | 4, .. }),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().starts_with("t.toml:"), "{e}");
    let e = toml_err("[[node]]\nname = \"fe:0\"\nkids = [\"a:0\"]\n");
    assert!(
        e.to_string()
            .starts_with("t.toml:3:1: unknown field `kids`"),
        "{e}"
    );
    let e = toml_err("[[node]]\nchildren = [\"a:0\"]\n");
    assert!(e.to_string().contains("missing field `name`"), "{e}");
    let e = toml_err("[[node]]\nname = 3\n");
    assert!(e.to_string().starts_with("t.toml:2:8: "), "{e}");
    for text in ["", "# nothing\n"] {
        assert_eq!(
            toml_err(text).to_string(),
            "t.toml: empty topology: no statements found"
        );
    }
}

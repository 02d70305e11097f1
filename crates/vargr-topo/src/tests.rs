//! Tests of the tree queries, serialisation and rendering.

use super::*;

fn gen(spec: &str) -> Topology {
    Topology::generate(spec).unwrap()
}

#[test]
fn queries_on_a_small_tree() {
    let t = gen("kary:2^2");
    assert_eq!(t.root().id, 0);
    assert_eq!(t.root().parent, None);
    assert_eq!(t.root().role(), Role::FrontEnd);
    assert_eq!(t.len(), 7);
    assert!(!t.is_empty());
    assert_eq!(
        t.nodes().map(|n| n.id).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    let be: Vec<(u32, Option<u32>)> = t
        .backends()
        .iter()
        .map(|n| (n.id, n.backend_rank))
        .collect();
    assert_eq!(
        be,
        vec![(3, Some(0)), (4, Some(1)), (5, Some(2)), (6, Some(3))]
    );
    assert_eq!(
        t.internal().iter().map(|n| n.id).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(t.role(1), Some(Role::CommNode));
    assert_eq!(t.role(6), Some(Role::BackEnd));
    assert_eq!(t.role(7), None);
    assert_eq!(t.node(7), None);
    assert_eq!(t.backend(2).map(|n| n.id), Some(5));
    assert_eq!(t.backend(4), None);
    assert_eq!(t.backends_under(0), vec![0, 1, 2, 3]);
    assert_eq!(t.backends_under(2), vec![2, 3]);
    assert_eq!(t.backends_under(5), vec![2]);
    assert_eq!(t.backends_under(99), Vec::<u32>::new());
    assert_eq!(
        t.dfs(0).map(|n| n.id).collect::<Vec<_>>(),
        vec![0, 1, 3, 4, 2, 5, 6]
    );
    assert_eq!(t.node(4).unwrap().name(), "localhost:4");
}

#[test]
fn backend_ranks_follow_depth_first_order_not_ids() {
    // Uneven: fe -> a (leaf), b (-> c, d); ids BFS: fe0 a1 b2 c3 d4
    let t = Topology::parse_mrnet("fe:0 => b:0 a:0 ; b:0 => c:0 d:0 ;", "t").unwrap();
    let ranks: Vec<(String, u32)> = t
        .backends()
        .iter()
        .map(|n| (n.name(), n.backend_rank.unwrap()))
        .collect();
    assert_eq!(
        ranks,
        vec![("c:0".into(), 0), ("d:0".into(), 1), ("a:0".into(), 2)]
    );
    assert_eq!(t.node(1).unwrap().name(), "b:0");
    assert_eq!(t.node(2).unwrap().backend_rank, Some(2));
}

#[test]
fn subtree_keeps_ids_parents_and_ranks() {
    let t = gen("kary:3^3");
    let s = t.subtree(2).unwrap();
    s.validate().unwrap();
    assert_eq!(s.root().id, 2);
    assert_eq!(s.root().parent, Some(0));
    assert_eq!(s.len(), 13);
    assert_eq!(s.num_backends(), 9);
    assert_eq!(s.depth(), 2);
    for n in s.nodes() {
        assert_eq!(Some(n), t.node(n.id));
    }
    let ranks: Vec<u32> = s
        .backends()
        .iter()
        .map(|n| n.backend_rank.unwrap())
        .collect();
    assert_eq!(ranks, (9..18).collect::<Vec<_>>());
    assert_eq!(s.backends_under(2), t.backends_under(2));
    assert_eq!(s.backend(9).map(|n| n.id), t.backend(9).map(|n| n.id));
    assert_eq!(s.backend(0), None);
    assert_eq!(s.internal().len(), 3);
    // sub-tree of a sub-tree, and of a leaf
    let ss = s.subtree(s.root().children[1]).unwrap();
    assert_eq!(ss, t.subtree(s.root().children[1]).unwrap());
    let leaf = t.subtree(39).unwrap();
    assert_eq!((leaf.len(), leaf.num_backends(), leaf.depth()), (1, 1, 0));
    assert_eq!(leaf.root().role(), Role::BackEnd);
    assert!(t.subtree(40).is_none());
    assert_eq!(t.subtree(0).unwrap(), t);
    // a sub-tree prints and re-parses (renumbered from 0, parent dropped)
    let again = Topology::parse_mrnet(&s.to_mrnet(), "s").unwrap();
    assert_eq!((again.len(), again.num_backends()), (13, 9));
    let lone = Topology::parse_mrnet(&leaf.to_mrnet(), "l").unwrap();
    assert_eq!((lone.len(), lone.num_backends()), (1, 0));
}

#[test]
fn serde_round_trip_and_validation() {
    for spec in ["binomial@9", "1x3x9"] {
        let t = gen(spec);
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.starts_with("{\"nodes\":["));
        assert_eq!(serde_json::from_str::<Topology>(&json).unwrap(), t);
        let s = t.subtree(t.root().children[1]).unwrap();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Topology>(&json).unwrap(), s);
    }
    let good = serde_json::to_value(gen("flat:2")).unwrap();
    let broken = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        f(&mut v);
        serde_json::from_value::<Topology>(v)
            .unwrap_err()
            .to_string()
    };
    assert!(broken(&|v| v["nodes"][1]["backend_rank"] = 5.into()).contains("expected 0"));
    assert!(broken(&|v| v["nodes"][1]["parent"] = 2.into()).contains("names parent"));
    assert!(
        broken(&|v| v["nodes"][0]["children"] = serde_json::json!([1, 1])).contains("listed twice")
    );
    assert!(
        broken(&|v| v["nodes"][0]["children"] = serde_json::json!([2, 1]))
            .contains("breadth-first")
    );
    assert!(broken(&|v| v["nodes"][2]["host"] = "a b".into()).contains("bad host name"));
    assert!(broken(&|v| v["nodes"][2]["rank"] = 1.into()).contains("used by two nodes"));
    assert!(broken(&|v| v["nodes"][0]["backend_rank"] = 0.into()).contains("not a leaf"));
    assert!(broken(&|v| v["nodes"] = serde_json::json!([])).contains("no nodes"));
    // nodes out of order are sorted before checking
    let mut v = good.clone();
    v["nodes"].as_array_mut().unwrap().reverse();
    assert_eq!(
        serde_json::from_value::<Topology>(v).unwrap(),
        gen("flat:2")
    );
}

#[test]
fn round_trips_through_text_formats() {
    for spec in [
        "flat:1",
        "flat:20",
        "kary:3@10",
        "kary:2^4",
        "1x2x6",
        "binomial@13",
        "knomial:4@30",
    ] {
        let t = gen(spec);
        let m = t.to_mrnet();
        assert_eq!(Topology::parse_mrnet(&m, "m").unwrap(), t, "{spec}\n{m}");
        let s = t.to_toml();
        assert_eq!(Topology::parse_toml(&s, "s").unwrap(), t, "{spec}\n{s}");
    }
    let lone = Topology::parse_mrnet("fe:0 ;", "x").unwrap();
    assert_eq!(lone.to_mrnet().lines().last(), Some("fe:0 ;"));
    assert_eq!(Topology::parse_toml(&lone.to_toml(), "x").unwrap(), lone);
}

#[test]
fn to_mrnet_text() {
    assert_eq!(
        gen("kary:2^2").to_mrnet(),
        "# vargr topology: 7 nodes, 4 back-ends, depth 2\n\
         localhost:0 => localhost:1 localhost:2 ;\n\
         localhost:1 => localhost:3 localhost:4 ;\n\
         localhost:2 => localhost:5 localhost:6 ;\n"
    );
    let wide = gen("flat:10").to_mrnet();
    assert!(wide.contains("localhost:0 =>\n    localhost:1 "), "{wide}");
    assert!(
        wide.contains("\n    localhost:9 localhost:10 ;\n"),
        "{wide}"
    );
}

#[test]
fn to_toml_text() {
    assert_eq!(
        gen("flat:2").to_toml(),
        "# vargr topology: 3 nodes, 2 back-ends, depth 1\n\n\
         [[node]]\nname = \"localhost:0\"\nchildren = [\"localhost:1\", \"localhost:2\"]\n"
    );
}

#[test]
fn to_dot_styles_roles() {
    let d = gen("1x2x4").to_dot();
    assert!(d.starts_with("digraph vargr {"));
    assert!(
        d.contains("n0 [label=\"localhost:0\\nfront-end\", shape=doubleoctagon"),
        "{d}"
    );
    assert!(
        d.contains("n1 [label=\"localhost:1\\ncommnode\", shape=box"),
        "{d}"
    );
    assert!(
        d.contains("n6 [label=\"localhost:6\\nback-end 3\", shape=ellipse"),
        "{d}"
    );
    assert!(d.contains("    n2 -> n6;\n"));
    assert_eq!(d.matches("->").count(), 6);
    assert!(d.ends_with("}\n"));
}

#[test]
fn draw_small_tree_fully() {
    let t = Topology::parse_mrnet(
        "fe:0 => cn:0 cn:1 ; cn:0 => be:0 be:1 ; cn:1 => be:2 ;",
        "t",
    )
    .unwrap();
    assert_eq!(
        t.draw(),
        "fe:0 [front-end]\n\
         ├── cn:0 [commnode]\n\
         │   ├── be:0 [back-end 0]\n\
         │   └── be:1 [back-end 1]\n\
         └── cn:1 [commnode]\n    \
             └── be:2 [back-end 2]\n"
    );
}

#[test]
fn draw_collapses_wide_leaf_runs() {
    let d = gen("flat:100").draw();
    let lines: Vec<&str> = d.lines().collect();
    assert_eq!(lines.len(), 9, "{d}");
    assert_eq!(lines[7], "├── localhost:7 [back-end 6]");
    assert_eq!(lines[8], "└── ... 93 more back-ends (BE 7-99)");
    let d = gen("flat:8").draw();
    assert_eq!(d.lines().count(), 9);
    assert!(!d.contains("..."));
    let d = gen("flat:9").draw_with_width(3);
    assert!(d.ends_with("└── ... 7 more back-ends (BE 2-8)\n"), "{d}");
}

#[test]
fn draw_collapses_identical_subtrees_in_big_trees() {
    let t = gen("kary:4^8"); // 87381 nodes
    let d = t.draw();
    assert!(d.lines().count() < 40, "{d}");
    assert!(
        d.contains("│   │   │   │   │   │   │   └── localhost:21848 [back-end 3]\n"),
        "{d}"
    );
    assert!(
        d.contains("... 3 more identical sub-trees, 16384 back-ends each (BE 16384-65535)"),
        "{d}"
    );
    // never a summary line standing for a single leaf
    let d = gen("kary:8^4").draw();
    assert!(d.contains("└── localhost:592 [back-end 7]\n"), "{d}");
    assert!(!d.contains(" 1 more back-end"), "{d}");
    // uneven shapes: a run for each shape
    let d = gen("1x4x8").draw_with_width(3);
    assert_eq!(
        d,
        "localhost:0 [front-end]\n\
         ├── localhost:1 [commnode]\n\
         │   ├── localhost:5 [back-end 0]\n\
         │   └── localhost:6 [back-end 1]\n\
         └── ... 3 more identical sub-trees, 2 back-ends each (BE 2-7)\n"
    );
    let d = gen("kary:4@17").draw_with_width(2);
    assert!(d.contains("│   └── ... 2 more children (2 commnodes, 0 back-ends), 7 back-ends in all (BE 4-10)\n"), "{d}");
    // many different shapes beyond the width limit
    let mut text = String::from("fe:0 =>");
    for i in 0..12 {
        text.push_str(&format!(" c{i}:0"));
    }
    text.push_str(" ;");
    for i in 0..12 {
        text.push_str(&format!(" c{i}:0 =>"));
        for j in 0..=i {
            text.push_str(&format!(" b{i}x{j}:0"));
        }
        text.push_str(" ;");
    }
    let d = Topology::parse_mrnet(&text, "t")
        .unwrap()
        .draw_with_width(4);
    assert!(
        d.contains(
            "└── ... 9 more children (9 commnodes, 0 back-ends), 72 back-ends in all (BE 6-77)"
        ),
        "{d}"
    );
}

#[test]
fn draw_stops_at_the_depth_limit() {
    let levels = vec!["1"; DRAW_MAX_DEPTH + 10].join("x") + "x2";
    let t = gen(&levels);
    let d = t.draw();
    assert_eq!(d.lines().count(), DRAW_MAX_DEPTH + 2);
    assert!(
        d.lines()
            .last()
            .unwrap()
            .ends_with("└── ... deeper levels not drawn: 2 back-ends below (BE 0-1)"),
        "{d}"
    );
}

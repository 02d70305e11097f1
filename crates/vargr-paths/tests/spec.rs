//! Path specifications: parsing, the errors (with the path, the stage and the line),
//! merging into exact trees, and what a tree builds into.

use vargr_paths::{NodeKind, PathError, PathSpec};

const GSUM: &str = include_str!("../../../examples/paths/gsum.toml");

fn parse(text: &str) -> Result<PathSpec, PathError> {
    PathSpec::parse(text, "t.toml")
}

fn err(text: &str) -> String {
    parse(text)
        .and_then(|s| s.merge().map(|_| s))
        .unwrap_err()
        .to_string()
}

const ELEMENT: &str = "[element]\nname = \"E\"\nhost = \"fe\"\n";

#[test]
fn the_seeds_global_sum_merges_per_host_and_draws_exactly() {
    let spec = parse(GSUM).unwrap();
    assert_eq!(spec.paths.len(), 2);
    assert_eq!(spec.paths[0].line, 11);
    let tree = spec.merge().unwrap();
    assert_eq!(
        tree.draw(),
        "PI-SUM1 @ p0:0 (element) reduce:sum\n\
         ├── n1:2 reduce:sum  <= codec:fixed:lz4\n\
         │   ├── n1:0 (back-end)\n\
         │   └── n1:1 (back-end)\n\
         └── n2:2 reduce:sum\n\
         \x20   ├── n2:0 (back-end)\n\
         \x20   └── n2:1 (back-end)\n"
    );
    assert_eq!(tree.nodes[0].paths, [1, 2]);
    let built = tree.build().unwrap();
    assert_eq!(
        built.topology.to_mrnet(),
        "# vargr topology: 7 nodes, 4 back-ends, depth 2\np0:0 => n1:2 n2:2 ;\nn1:2 => n1:0 n1:1 ;\nn2:2 => n2:0 n2:1 ;\n"
    );
    // Node ids are breadth-first: n1:2 is 1, its link carries the codec.
    assert_eq!(built.links[&1], ["codec:fixed:lz4"]);
    assert!(built.links[&2].is_empty() && built.links[&3].is_empty());
    assert_eq!(
        built.filters.values().collect::<Vec<_>>(),
        ["sum", "sum", "sum"]
    );
    let json: serde_json::Value = serde_json::from_str(&tree.to_json()).unwrap();
    assert_eq!(json["nodes"][1]["link"][0], "codec:fixed:lz4");
    assert!(tree
        .to_dot()
        .contains("n1 -> n0 [label=\"codec:fixed:lz4\"]"));
}

#[test]
fn paths_share_only_what_they_agree_on_from_the_element() {
    // Two paths through r1 with the same link to fe share r1; a third with another
    // link stage gets a node of its own on r1; a back-end on fe links straight to it.
    let text = format!(
        "{ELEMENT}\
         [[path]]\nfrom = \"a:0\"\nstages = [\"remote:r1\", \"reduce:max\", \"xor:1\", \"remote:fe\"]\n\
         [[path]]\nfrom = \"b:0-1\"\nstages = [\"upper\", \"remote:r1\", \"reduce:max\", \"xor:1\", \"remote:fe\"]\n\
         [[path]]\nfrom = \"c:0\"\nstages = [\"remote:r1\", \"reduce:max\", \"remote:fe\"]\n\
         [[path]]\nfrom = \"fe:5\"\nstages = [\"py:show\"]\n"
    );
    let tree = parse(&text).unwrap().merge().unwrap();
    assert_eq!(
        tree.draw(),
        "E @ fe:0 (element)\n\
         ├── r1:0 reduce:max  <= xor:1\n\
         │   ├── a:0 (back-end)\n\
         │   ├── b:0 (back-end)  <= upper\n\
         │   └── b:1 (back-end)  <= upper\n\
         ├── r1:1 reduce:max\n\
         │   └── c:0 (back-end)\n\
         └── fe:5 (back-end) py:show\n"
    );
    let built = tree.build().unwrap();
    assert_eq!(built.filters[&0], "identity");
    let fe5 = built.topology.nodes().find(|n| n.name() == "fe:5").unwrap();
    assert_eq!(built.first[&fe5.backend_rank.unwrap()], ["show"]);
    assert_eq!(
        tree.nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Host)
            .count(),
        2
    );
}

#[test]
fn errors_name_the_path_the_stage_and_the_line() {
    let at = |stages: &str| {
        err(&format!(
            "{ELEMENT}\n[[path]]\nfrom = \"a:0\"\nstages = [\n  \"remote:fe\",\n]\n\n[[path]]\nfrom = \"b:0\"\nstages = [\n  {stages}\n]\n"
        ))
    };
    let e = at("\"codec:fixed:lz4\", \"remote:fe\", \"reduce:sum\", \"xor:1\"");
    assert!(
        e.starts_with(
            "t.toml:14: path 2 (from \"b:0\"), stage \"xor:1\": a link stage needs a link"
        ),
        "{e}"
    );
    let e = at("\"upper\", \"reduce:sum\", \"remote:fe\"");
    assert!(
        e.contains("t.toml:14: path 2")
            && e.contains("stage \"reduce:sum\"")
            && e.contains("list it first"),
        "{e}"
    );
    let e = at("\"remote:\"");
    assert!(e.contains("stage \"remote:\"") && e.contains("host"), "{e}");
    let e = at("\"remote:elsewhere\"");
    assert!(e.contains("path 2") && e.contains("add remote:fe"), "{e}");
    let e = at("\"remote:fe\", \"py:x\", \"reduce:sum\"");
    assert!(
        e.contains("stage \"py:x\"") && e.contains("an end of a path"),
        "{e}"
    );
    let e = at("\"bad name!\", \"remote:fe\"");
    assert!(
        e.contains("stage \"bad name!\"") && e.contains("letters"),
        "{e}"
    );
    // Different things at the element cannot both be the root.
    let e = at("\"remote:fe\", \"reduce:sum\"");
    assert!(
        e.contains("paths 1 and 2") && e.contains("element E"),
        "{e}"
    );
    // The same back-end twice.
    let e = err(&format!(
        "{ELEMENT}[[path]]\nfrom = \"a:0-3\"\nstages = [\"remote:fe\"]\n[[path]]\nfrom = \"a:3\"\nstages = [\"remote:fe\"]\n"
    ));
    assert!(
        e.contains("t.toml:8: path 2") && e.contains("a:3 already starts path 1"),
        "{e}"
    );
    // Sources, TOML and the element.
    let e = err(&format!("{ELEMENT}[[path]]\nfrom = \"a\"\n"));
    assert!(e.contains("path 1") && e.contains("HOST:RANK"), "{e}");
    let e = err(&format!("{ELEMENT}[[path]]\nfrom = \"a:0\"\nstagez = []\n"));
    assert!(e.starts_with("t.toml:6:1") && e.contains("stagez"), "{e}");
    let e = err("[element]\nname = \"E\"\nhost = \"\"\n[[path]]\nfrom = \"a:0\"\n");
    assert!(e.contains("[element]: host"), "{e}");
}

#[test]
fn stage_checks_name_the_path_and_line_and_allow_other_programs_stages() {
    let text = format!(
        "{ELEMENT}[[path]]\nfrom = \"a:0\"\nstages = [\"mystage\", \"remote:fe\"]\n\
         [[path]]\nfrom = \"b:0\"\nstages = [\n \"emu:rtt=10ms\",\n \"codec:zip\",\n \"remote:fe\"]\n"
    );
    let spec = parse(&text).unwrap();
    let e = spec.check_stages(true).unwrap_err().to_string();
    assert!(
        e.starts_with("t.toml:11: path 2 (from \"b:0\"), stage \"codec:zip\""),
        "{e}"
    );
    let ok = parse(&format!(
        "{ELEMENT}[[path]]\nfrom = \"a:0\"\nstages = [\"mystage\", \"codec:off\", \"remote:fe\"]\n"
    ))
    .unwrap();
    assert_eq!(ok.check_stages(true).unwrap(), ["mystage"]);
    let e = ok.check_stages(false).unwrap_err().to_string();
    assert!(
        e.contains("stage \"mystage\"") && e.contains("unknown stage"),
        "{e}"
    );
}

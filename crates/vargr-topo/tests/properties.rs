//! Property tests: random specs and random trees stay valid and round-trip.

use proptest::prelude::*;
use vargr_topo::{HostEntry, HostFile, HostPolicy, Spec, Topology};

fn spec_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u32..400).prop_map(|n| format!("flat:{n}")),
        (2u32..9, 1u32..400).prop_map(|(k, n)| format!("kary:{k}@{n}")),
        (2u32..6, 1u32..5).prop_map(|(k, d)| format!("kary:{k}^{d}")),
        (2u32..7, 1u32..400).prop_map(|(k, n)| format!("knomial:{k}@{n}")),
        (1u32..400).prop_map(|n| format!("binomial@{n}")),
        prop::collection::vec(1u32..5, 1..5).prop_map(|mults| {
            let mut levels = vec![1u32];
            for m in mults {
                levels.push(levels.last().unwrap() * m);
            }
            levels
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("x")
        }),
    ]
}

/// Independent check of the tree invariants through the public API only.
fn assert_valid_tree(t: &Topology) {
    t.validate().unwrap();
    let n = t.len();
    // ids 0..n in order
    assert!(t.nodes().map(|x| x.id as usize).eq(0..n));
    // every non-root node has exactly one parent that lists it
    let mut listed = vec![0usize; n];
    for x in t.nodes() {
        for &c in &x.children {
            listed[c as usize] += 1;
            assert_eq!(t.node(c).unwrap().parent, Some(x.id));
        }
    }
    assert_eq!(listed[0], 0);
    assert!(listed[1..].iter().all(|&k| k == 1));
    // breadth-first: a queue walk from the root visits ids in order
    let mut queue = std::collections::VecDeque::from([0u32]);
    let mut seen = Vec::new();
    while let Some(id) = queue.pop_front() {
        seen.push(id);
        queue.extend(&t.node(id).unwrap().children);
    }
    assert!(seen.iter().map(|&i| i as usize).eq(0..n));
    // back-end ranks 0..N-1, unique, exactly on the leaves, DFS order
    let mut ranks: Vec<u32> = t.nodes().filter_map(|x| x.backend_rank).collect();
    ranks.sort_unstable();
    assert!(ranks.iter().map(|&r| r as usize).eq(0..t.num_backends()));
    assert!(t
        .nodes()
        .all(|x| x.backend_rank.is_some() == (x.children.is_empty() && x.parent.is_some())));
    let dfs: Vec<u32> = t.dfs(0).filter_map(|x| x.backend_rank).collect();
    assert!(dfs.iter().map(|&r| r as usize).eq(0..t.num_backends()));
    assert!(t
        .backends()
        .iter()
        .map(|b| b.backend_rank.unwrap() as usize)
        .eq(0..t.num_backends()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn generated_trees_are_valid_and_round_trip(spec in spec_strategy()) {
        let t = Topology::generate(&spec).unwrap();
        assert_valid_tree(&t);
        let parsed = Spec::parse(&spec).unwrap();
        prop_assert_eq!(parsed.num_backends(), t.num_backends() as u64);
        prop_assert_eq!(parsed.node_count(), t.len() as u64);
        prop_assert_eq!(Topology::generate(&parsed.to_string()).unwrap(), t.clone());
        prop_assert_eq!(Topology::parse_mrnet(&t.to_mrnet(), "m").unwrap(), t.clone());
        prop_assert_eq!(Topology::parse_toml(&t.to_toml(), "t").unwrap(), t.clone());
        let json = serde_json::to_string(&t).unwrap();
        prop_assert_eq!(serde_json::from_str::<Topology>(&json).unwrap(), t);
    }

    #[test]
    fn subtrees_partition_backends(spec in spec_strategy(), pick in any::<prop::sample::Index>()) {
        let t = Topology::generate(&spec).unwrap();
        let id = pick.index(t.len()) as u32;
        let s = t.subtree(id).unwrap();
        s.validate().unwrap();
        prop_assert_eq!(s.root().id, id);
        let under = t.backends_under(id);
        let ranks: Vec<u32> = s.backends().iter().map(|b| b.backend_rank.unwrap()).collect();
        prop_assert_eq!(&ranks, &under);
        // contiguous ranges, and children's ranges concatenate to the parent's
        prop_assert!(under.windows(2).all(|w| w[1] == w[0] + 1));
        let node = t.node(id).unwrap();
        if !node.children.is_empty() {
            let joined: Vec<u32> = node.children.iter().flat_map(|&c| t.backends_under(c)).collect();
            prop_assert_eq!(joined, under);
        }
    }

    #[test]
    fn random_trees_parse_and_round_trip(parents in prop::collection::vec(any::<prop::sample::Index>(), 0..200)) {
        // node i+1's parent is one of nodes 0..=i; statements in node order
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); parents.len() + 1];
        for (i, p) in parents.iter().enumerate() {
            children[p.index(i + 1)].push(i + 1);
        }
        let mut text = String::new();
        for (i, kids) in children.iter().enumerate() {
            if i == 0 || !kids.is_empty() {
                text.push_str(&format!("h{}:{} =>", i % 7, i));
                for k in kids {
                    text.push_str(&format!(" h{}:{}", k % 7, k));
                }
                text.push_str(" ;\n");
            }
        }
        let t = Topology::parse_mrnet(&text, "r").unwrap();
        assert_valid_tree(&t);
        prop_assert_eq!(t.len(), parents.len() + 1);
        prop_assert_eq!(t.num_backends(), children.iter().skip(1).filter(|k| k.is_empty()).count());
        prop_assert_eq!(Topology::parse_mrnet(&t.to_mrnet(), "m").unwrap(), t.clone());
        prop_assert_eq!(Topology::parse_toml(&t.to_toml(), "t").unwrap(), t.clone());
        let _ = t.draw();
        let _ = t.to_dot();
    }

    #[test]
    fn host_assignment_keeps_trees_valid(spec in spec_strategy(), slots in prop::collection::vec(1u32..50, 1..6)) {
        let hosts = HostFile::new(
            "h",
            slots.iter().enumerate().map(|(i, &s)| HostEntry { host: format!("host{i}"), slots: s, site: None }).collect(),
        ).unwrap();
        let mut t = Topology::generate(&spec).unwrap();
        t.assign_hosts(&hosts, HostPolicy::RoundRobin).unwrap();
        assert_valid_tree(&t);
        prop_assert_eq!(&t.root().host, "host0");
        t.check_hosts(&hosts).unwrap();
        prop_assert_eq!(Topology::parse_mrnet(&t.to_mrnet(), "m").unwrap(), t.clone());
        let mut u = Topology::generate(&spec).unwrap();
        match u.assign_hosts(&hosts, HostPolicy::BySlots) {
            Ok(()) => {
                prop_assert!(hosts.total_slots() >= u.len() as u64);
                assert_valid_tree(&u);
                for e in hosts.entries() {
                    prop_assert!(u.nodes().filter(|n| n.host == e.host).count() <= e.slots as usize);
                }
            }
            Err(_) => prop_assert!(hosts.total_slots() < u.len() as u64),
        }
    }

    #[test]
    fn parser_never_panics(text in "[a-c0-2:=>;# \n/]{0,60}") {
        let _ = Topology::parse_mrnet(&text, "fuzz");
        let _ = Topology::parse_toml(&text, "fuzz");
        let _ = HostFile::parse(&text, "fuzz");
        let _ = Topology::generate(&text);
    }
}

//! Hostfile parsing and host assignment tests.

use super::*;
use crate::Node;

fn hosts(text: &str) -> HostFile {
    HostFile::parse(text, "hosts").unwrap_or_else(|e| panic!("{e}"))
}

fn err(text: &str) -> String {
    HostFile::parse(text, "hosts").unwrap_err().to_string()
}

fn list(h: &HostFile) -> Vec<(&str, u32)> {
    h.entries()
        .iter()
        .map(|e| (e.host.as_str(), e.slots))
        .collect()
}

#[test]
fn parses_open_mpi_and_mpich_styles() {
    let h = hosts(
        "# cluster\n\nnode01 slots=4\nnode02:2   # mpich\n  node03\nnode04 slots=2 max_slots=8\n\
         node05 max-slots=3\nnode01 slots=1\n",
    );
    assert_eq!(
        list(&h),
        vec![
            ("node01", 5),
            ("node02", 2),
            ("node03", 1),
            ("node04", 2),
            ("node05", 1)
        ]
    );
    assert_eq!(h.total_slots(), 11);
    assert_eq!(h.name(), "hosts");
    assert!(h.contains("node03"));
    assert!(!h.contains("node06"));
    assert_eq!(
        list(&hosts("a\tslots=2\r\nb\r\n")),
        vec![("a", 2), ("b", 1)]
    );
}

#[test]
fn hostfile_errors_are_located() {
    assert_eq!(
        err("a\nnode02 slots=x\n"),
        "hosts:2:8: bad slot count \"x\": expected slots=N with N a positive integer"
    );
    assert_eq!(
        err("node02:0"),
        "hosts:1:8: bad slot count \"0\" in \"node02:0\": expected a positive integer"
    );
    assert_eq!(
        err("  a cpus=2"),
        "hosts:1:5: unknown hostfile attribute \"cpus=2\": accepted are slots=N, max_slots=N and site=NAME"
    );
    assert_eq!(
        err("a:2 slots=3"),
        "hosts:1:5: slots given twice for host a"
    );
    assert_eq!(
        err("\n\nbad/host"),
        "hosts:3:1: bad host name \"bad/host\": use letters, digits, '.', '-' and '_'"
    );
    assert_eq!(
        err("a max_slots=-1"),
        "hosts:1:3: bad max_slots \"-1\": expected a positive integer"
    );
    assert_eq!(err("# nothing\n\n"), "hosts: hostfile lists no hosts");
}

#[test]
fn round_robin_places_front_end_first_and_renumbers() {
    let mut t = Topology::generate("kary:2^2").unwrap();
    t.assign_hosts(&hosts("a slots=1\nb\nc\n"), HostPolicy::RoundRobin)
        .unwrap();
    let placed: Vec<String> = t.nodes().map(Node::name).collect();
    assert_eq!(placed, ["a:0", "b:0", "c:0", "a:1", "b:1", "c:1", "a:2"]);
    t.validate().unwrap();
    // round robin ignores slots and oversubscribes
    let mut t = Topology::generate("flat:5").unwrap();
    t.assign_hosts(&hosts("only"), HostPolicy::RoundRobin)
        .unwrap();
    assert!(t.nodes().all(|n| n.host == "only" && n.rank == n.id));
}

#[test]
fn by_slots_fills_hosts_in_order() {
    let mut t = Topology::generate("flat:5").unwrap();
    t.assign_hosts(&hosts("fe\nw1 slots=2\nw2 slots=8\n"), HostPolicy::BySlots)
        .unwrap();
    let placed: Vec<String> = t.nodes().map(Node::name).collect();
    assert_eq!(placed, ["fe:0", "w1:0", "w1:1", "w2:0", "w2:1", "w2:2"]);
    t.validate().unwrap();
    let again = Topology::parse_mrnet(&t.to_mrnet(), "t").unwrap();
    assert_eq!(again, t);

    let mut t = Topology::generate("flat:5").unwrap();
    let e = t
        .assign_hosts(&hosts("a:2\nb:3\n"), HostPolicy::BySlots)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "not enough slots in hostfile hosts: the topology has 6 nodes, the hosts offer 5 slots"
    );
    assert_eq!(
        t,
        Topology::generate("flat:5").unwrap(),
        "unchanged on error"
    );
}

#[test]
fn check_hosts_names_node_and_host() {
    let t = Topology::parse_mrnet("fe:0 => n1:0 n2:0 ; n2:0 => n3:5 ;", "t").unwrap();
    t.check_hosts(&hosts("fe\nn1\nn2\nn3\n")).unwrap();
    let e = t.check_hosts(&hosts("fe\nn1\nn3\n")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown host: node n2:0 (id 2) is on host \"n2\", which is not listed in hostfile hosts"
    );
    assert!(matches!(e, TopoError::UnknownHost { id: 2, .. }));
    let g = Topology::generate("flat:2").unwrap();
    assert!(g.check_hosts(&hosts("localhost")).is_ok());
}

#[test]
fn policy_names_and_constructor() {
    assert_eq!(
        "Round-Robin".parse::<HostPolicy>(),
        Ok(HostPolicy::RoundRobin)
    );
    assert_eq!("by-slots".parse::<HostPolicy>(), Ok(HostPolicy::BySlots));
    assert!("random"
        .parse::<HostPolicy>()
        .unwrap_err()
        .contains("round-robin or by-slots"));
    assert_eq!(HostPolicy::default(), HostPolicy::RoundRobin);
    let e = HostEntry {
        host: "h".into(),
        slots: 2,
        site: None,
    };
    assert_eq!(
        HostFile::new("x", vec![e.clone()]).unwrap().total_slots(),
        2
    );
    assert!(HostFile::new("x", vec![]).is_err());
    let bad = HostEntry {
        host: "h h".into(),
        slots: 2,
        site: None,
    };
    assert!(HostFile::new("x", vec![bad]).is_err());
}

#[test]
fn sites_are_read_and_checked() {
    let h = hosts("a1 slots=2 site=west\na2 site=west\nb1:4 site=east\nc1\n");
    let sites: Vec<Option<&str>> = h.entries().iter().map(|e| e.site.as_deref()).collect();
    assert_eq!(sites, vec![Some("west"), Some("west"), Some("east"), None]);
    let e = err("a1 site=we/st\n");
    assert!(e.contains("hosts:1:4") && e.contains("bad site"), "{e}");
    let e = err("a1 site=west\na1 site=east\n");
    assert!(e.contains("hosts:2:1") && e.contains("two sites"), "{e}");
}

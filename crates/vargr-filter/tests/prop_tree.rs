//! Property: reducing over any tree, with nodes releasing their children's results in
//! several partial waves (as time-out synchronization does), equals the flat reduction.

mod common;

use common::*;
use proptest::prelude::*;
use vargr_filter::{apply_guarded, FilterContext};
use vargr_wire::{Packet, Value};

#[derive(Debug, Clone)]
enum T {
    Leaf(i32),
    /// Children, and a seed choosing how many partial waves the node releases.
    Node(Vec<T>, u8),
}

fn tree() -> impl Strategy<Value = T> {
    let leaf = any::<i32>().prop_map(T::Leaf);
    let sub = leaf.prop_recursive(3, 48, 4, |inner| {
        (prop::collection::vec(inner, 1..5), any::<u8>()).prop_map(|(c, s)| T::Node(c, s))
    });
    prop::collection::vec(sub, 1..6).prop_map(|c| T::Node(c, 0))
}

fn leaves(t: &T, out: &mut Vec<i32>) {
    match t {
        T::Leaf(v) => out.push(*v),
        T::Node(c, _) => c.iter().for_each(|c| leaves(c, out)),
    }
}

/// Runs `spec` over the tree; `leaf` turns a leaf value into its back-end packet.
fn reduce(spec: &str, t: &T, leaf: &dyn Fn(i32) -> Packet) -> Vec<Packet> {
    fn go(spec: &str, t: &T, root: bool, leaf: &dyn Fn(i32) -> Packet) -> Vec<Packet> {
        match t {
            T::Leaf(v) => vec![leaf(*v)],
            T::Node(children, seed) => {
                let inputs: Vec<Packet> = children
                    .iter()
                    .flat_map(|c| go(spec, c, false, leaf))
                    .collect();
                let waves = if root {
                    1
                } else {
                    1 + *seed as usize % inputs.len()
                };
                let size = inputs.len().div_ceil(waves);
                let c = FilterContext {
                    node_id: 1,
                    stream: STREAM,
                    is_root: root,
                    num_inputs: children.len(),
                };
                let mut f = filter(spec);
                inputs
                    .chunks(size)
                    .flat_map(|w| apply_guarded(f.as_mut(), &c, w.to_vec()).unwrap())
                    .collect()
            }
        }
    }
    go(spec, t, true, leaf)
}

fn single(out: Vec<Packet>) -> Vec<Value> {
    assert_eq!(out.len(), 1);
    out.into_iter().next().unwrap().values
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn int_reductions_match_flat(t in tree()) {
        let mut v = Vec::new();
        leaves(&t, &mut v);
        let int = |x: i32| pkt("%d", vec![Value::Int(x)]);
        prop_assert_eq!(single(reduce("sum", &t, &int)), vec![Value::Int(v.iter().fold(0i32, |a, b| a.wrapping_add(*b)))]);
        prop_assert_eq!(single(reduce("min", &t, &int)), vec![Value::Int(*v.iter().min().unwrap())]);
        prop_assert_eq!(single(reduce("max", &t, &int)), vec![Value::Int(*v.iter().max().unwrap())]);

        let uc = |x: i32| pkt("%uc %ald", vec![Value::UChar(x as u8), Value::LongArray(vec![x as i64, -(x as i64) * 3])]);
        let sum_uc = v.iter().fold(0u8, |a, b| a.wrapping_add(*b as u8));
        let sum_l: i64 = v.iter().map(|x| *x as i64).sum();
        prop_assert_eq!(single(reduce("sum", &t, &uc)), vec![Value::UChar(sum_uc), Value::LongArray(vec![sum_l, -3 * sum_l])]);
        let max_uc = v.iter().map(|x| *x as u8).max().unwrap();
        let max_l = v.iter().map(|x| *x as i64).max().unwrap();
        let min_l = v.iter().map(|x| *x as i64).min().unwrap();
        prop_assert_eq!(single(reduce("max", &t, &uc)), vec![Value::UChar(max_uc), Value::LongArray(vec![max_l, -3 * min_l])]);
    }

    #[test]
    fn float_reductions_and_avg_match_flat(t in tree()) {
        let mut v = Vec::new();
        leaves(&t, &mut v);
        // Integer-valued doubles: every partial sum is exact, whatever the tree.
        let dbl = |x: i32| pkt("%lf %af", vec![Value::Double(x as f64), Value::FloatArray(vec![(x % 1000) as f32])]);
        let sum: f64 = v.iter().map(|x| *x as f64).sum();
        let sum_f: f32 = v.iter().map(|x| (x % 1000) as f32).sum();
        prop_assert_eq!(single(reduce("sum", &t, &dbl)), vec![Value::Double(sum), Value::FloatArray(vec![sum_f])]);
        let min = v.iter().map(|x| *x as f64).fold(f64::INFINITY, f64::min);
        prop_assert_eq!(single(reduce("min", &t, &dbl))[0].clone(), Value::Double(min));
        let avg = single(reduce("avg", &t, &dbl));
        prop_assert_eq!(avg[0].clone(), Value::Double(sum / v.len() as f64));
        let int = |x: i32| pkt("%ld", vec![Value::Long(x as i64)]);
        let mean = v.iter().map(|x| *x as i64).sum::<i64>() as f64 / v.len() as f64;
        prop_assert_eq!(single(reduce("avg", &t, &int)), vec![Value::Long(mean as i64)]);
        let n = single(reduce("concat", &t, &int));
        prop_assert_eq!(n, vec![Value::LongArray(v.iter().map(|x| *x as i64).collect())]);
    }
}

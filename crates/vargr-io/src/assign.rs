//! Which aggregator writes which file domain: the linear assignment of LA-Two-Phase.
//!
//! Why: ROMIO gives file domain i to the i-th aggregator whatever data it holds, so most
//! of a domain's bytes may have to cross the network to reach it. LA-Two-Phase counts
//! how much of each domain every aggregator's node already holds and picks the
//! one-to-one assignment with the most data in place: a linear assignment problem. The
//! seed solves it with Jonker and Volgenant's algorithm (the `lapjv` crate); Kuhn and
//! Munkres' Hungarian algorithm (`pathfinding`) is the alternative, and both are checked
//! against every permutation on small cases in the tests.

use std::str::FromStr;

/// How the assignment is solved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Solver {
    /// Jonker–Volgenant shortest augmenting paths (the seed's choice).
    #[default]
    JonkerVolgenant,
    /// Kuhn–Munkres (Hungarian) on integer weights.
    Hungarian,
}

impl FromStr for Solver {
    type Err = String;
    fn from_str(s: &str) -> Result<Solver, String> {
        match s {
            "jv" | "jonker-volgenant" => Ok(Solver::JonkerVolgenant),
            "hungarian" | "kuhn-munkres" => Ok(Solver::Hungarian),
            _ => Err(format!(
                "unknown assignment solver {s:?} (jonker-volgenant or hungarian)"
            )),
        }
    }
}

/// The assignment of rows to columns (`result[row] = column`, a permutation) that
/// maximises the total weight of a square matrix given row by row.
pub fn maximise(weights: &[Vec<u64>], solver: Solver) -> Result<Vec<usize>, String> {
    let n = weights.len();
    if let Some((i, row)) = weights.iter().enumerate().find(|(_, r)| r.len() != n) {
        return Err(format!(
            "row {i} has {} weights in a {n}×{n} matrix",
            row.len()
        ));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    match solver {
        Solver::JonkerVolgenant => {
            // lapjv minimises: costs are the distance from the largest weight. Weights
            // are byte counts, far below f64's exact range for any real file.
            let top = weights.iter().flatten().copied().max().unwrap_or(0);
            let costs: Vec<f64> = weights
                .iter()
                .flatten()
                .map(|&w| (top - w) as f64)
                .collect();
            let m = lapjv::Matrix::from_shape_vec((n, n), costs).map_err(|e| e.to_string())?;
            let (rows, _) = lapjv::lapjv(&m).map_err(|e| e.to_string())?;
            Ok(rows)
        }
        Solver::Hungarian => {
            let w: Vec<Vec<i64>> = weights
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|&x| i64::try_from(x).unwrap_or(i64::MAX / (n as i64 + 1)))
                        .collect()
                })
                .collect();
            let m = pathfinding::matrix::Matrix::from_rows(w).map_err(|e| e.to_string())?;
            Ok(pathfinding::kuhn_munkres::kuhn_munkres(&m).1)
        }
    }
}

/// Total weight of an assignment.
pub fn total(weights: &[Vec<u64>], assignment: &[usize]) -> u64 {
    assignment
        .iter()
        .enumerate()
        .map(|(r, &c)| weights[r][c])
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(weights: &[Vec<u64>]) -> u64 {
        fn go(w: &[Vec<u64>], row: usize, used: &mut Vec<bool>) -> u64 {
            if row == w.len() {
                return 0;
            }
            let mut best = 0;
            for c in 0..w.len() {
                if !used[c] {
                    used[c] = true;
                    best = best.max(w[row][c] + go(w, row + 1, used));
                    used[c] = false;
                }
            }
            best
        }
        go(weights, 0, &mut vec![false; weights.len()])
    }

    fn is_permutation(a: &[usize]) -> bool {
        let mut s = a.to_vec();
        s.sort_unstable();
        s.iter().enumerate().all(|(i, &x)| i == x)
    }

    #[test]
    fn the_seeds_example() {
        // Shaped like the seed's example (Figure 3.8): three file domains (rows), four
        // processes (columns), blocks of each domain each process holds, and a row of
        // zeros to make the matrix square; the best pattern puts domain 0 on process 2,
        // 1 on 3 and 2 on 1.
        let w = vec![
            vec![1, 1, 4, 0],
            vec![1, 1, 0, 3],
            vec![2, 4, 0, 1],
            vec![0, 0, 0, 0],
        ];
        for s in [Solver::JonkerVolgenant, Solver::Hungarian] {
            let a = maximise(&w, s).unwrap();
            assert_eq!(&a[..3], &[2, 3, 1], "{s:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn both_solvers_find_the_best_assignment(
            n in 1usize..7,
            seed in proptest::collection::vec(0u64..1000, 49),
            sparse in proptest::bool::ANY,
        ) {
            let w: Vec<Vec<u64>> = (0..n)
                .map(|i| (0..n).map(|j| {
                    let x = seed[i * 7 + j];
                    if sparse && x % 3 != 0 { 0 } else { x }
                }).collect())
                .collect();
            let best = brute(&w);
            for s in [Solver::JonkerVolgenant, Solver::Hungarian] {
                let a = maximise(&w, s).unwrap();
                proptest::prop_assert!(is_permutation(&a));
                proptest::prop_assert_eq!(total(&w, &a), best, "{:?}", s);
            }
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(maximise(&[vec![1, 2], vec![3]], Solver::JonkerVolgenant).is_err());
        assert_eq!(
            maximise(&[], Solver::Hungarian).unwrap(),
            Vec::<usize>::new()
        );
    }
}

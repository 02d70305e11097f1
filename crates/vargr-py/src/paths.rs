//! `vargr.Paths`: a path specification (vargr-paths), checked, merged and built, for a
//! `Network(paths.topology, ..., paths=paths)` whose links get the paths' stages.
//! python/vargr/paths.py runs the Python stages at the paths' ends.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use vargr_paths::{Built, PathSpec, PathTree};

use crate::errors::{self, Kind};
use crate::tbon::PyTopology;

#[pyclass(frozen, module = "vargr", name = "Paths")]
pub struct PyPaths {
    tree: PathTree,
    pub built: Built,
}

fn err(e: vargr_paths::PathError) -> PyErr {
    errors::new_err(Kind::Topology, e.to_string())
}

#[pymethods]
impl PyPaths {
    /// A path specification from a file (str or os.PathLike) or TOML text. Its C stage
    /// plugins are loaded and every link stage is made once, so a bad one fails here
    /// (`TopologyError`, naming the path, the stage and the line).
    #[new]
    fn new(source: &Bound<'_, PyAny>) -> PyResult<PyPaths> {
        let spec = match source.extract::<String>() {
            Ok(text) if text.contains('\n') || text.contains("[element]") => {
                PathSpec::parse(&text, "<paths text>").map_err(err)?
            }
            _ => {
                let path: std::path::PathBuf = source.extract()?;
                PathSpec::load(&path).map_err(err)?
            }
        };
        spec.check_stages(false).map_err(err)?;
        let tree = spec.merge().map_err(err)?;
        let built = tree.build().map_err(err)?;
        Ok(PyPaths { tree, built })
    }

    /// The tree topology the paths run as (the element's host is the front-end).
    #[getter]
    fn topology(&self) -> PyTopology {
        PyTopology {
            inner: self.built.topology.clone(),
        }
    }

    /// The element's name.
    #[getter]
    fn element(&self) -> String {
        self.tree.element.name.clone()
    }

    /// Python stages at the element, in order (names).
    #[getter]
    fn last(&self) -> Vec<String> {
        self.built.last.clone()
    }

    /// Python stages at the back-ends: back-end rank -> names, in order.
    #[getter]
    fn first(&self) -> BTreeMap<u32, Vec<String>> {
        self.built.first.clone()
    }

    /// Each link's stages, by the node id of its child end.
    #[getter]
    fn links(&self) -> BTreeMap<u32, Vec<String>> {
        self.built.links.clone()
    }

    /// The reduction of each internal node (node id -> filter spec).
    #[getter]
    fn filters(&self) -> BTreeMap<u32, String> {
        self.built.filters.clone()
    }

    /// The merged tree, drawn as text.
    fn draw(&self) -> String {
        self.tree.draw()
    }

    fn to_json(&self) -> String {
        self.tree.to_json()
    }

    fn to_dot(&self) -> String {
        self.tree.to_dot()
    }

    fn __repr__(&self) -> String {
        format!(
            "Paths(element={:?}, paths={}, backends={})",
            self.tree.element.name,
            self.tree.nodes[0].paths.len(),
            self.built.topology.num_backends()
        )
    }
}

//! Point-to-point requests for Python: the handle a non-blocking send or receive
//! returns, completed by `wait`, `test` or `Request.wait_any`. `vargr.MPI` builds
//! mpi4py's `Request` on it; the communicator methods that make them are in `coll.rs`.
//!
//! Messages cross as `(source, tag, bytes)` tuples: unpickling or copying into the
//! caller's buffer is the Python layer's business, which knows which the call wants.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use vargr_coll::{Received, Request};

use crate::coll::PyComm;
use crate::errors::{self, Kind};

/// A received message as Python sees it: `(source, tag, data)`.
pub type Message<'py> = (usize, u64, Bound<'py, PyBytes>);

pub fn message<'py>(py: Python<'py>, m: &Received) -> Message<'py> {
    (m.source, m.tag, PyBytes::new(py, &m.data))
}

/// A non-blocking send or receive of one communicator.
#[pyclass(frozen, module = "vargr", name = "Request")]
pub struct PyRequest {
    comm: Py<PyComm>,
    /// `None` once completed or cancelled.
    req: Mutex<Option<Request>>,
}

impl PyRequest {
    pub fn new(comm: Py<PyComm>, req: Request) -> PyRequest {
        PyRequest {
            comm,
            req: Mutex::new(Some(req)),
        }
    }

    fn take(&self) -> Option<Request> {
        self.req.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn put(&self, r: Request) {
        *self.req.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    }
}

fn spent() -> PyErr {
    errors::new_err(
        Kind::Collective,
        "this request was already completed or cancelled",
    )
}

#[pymethods]
impl PyRequest {
    /// Whether the request is still to be completed.
    #[getter]
    fn active(&self) -> bool {
        self.req.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Waits for completion: `(source, tag, data)` for a receive, None for a send.
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Option<Message<'py>>> {
        let r = self.take().ok_or_else(spent)?;
        let comm = self.comm.get();
        let m = comm.run(py, move |c| c.wait(r))?;
        Ok(m.as_ref().map(|m| message(py, m)))
    }

    /// Completes the request if it can without waiting: `(True, message or None)`, or
    /// `(False, None)` with the request still active.
    fn test<'py>(&self, py: Python<'py>) -> PyResult<(bool, Option<Message<'py>>)> {
        let r = self.take().ok_or_else(spent)?;
        let comm = self.comm.get();
        let (r, got) = comm.run(py, move |c| {
            let got = c.test(&r);
            Ok((r, got))
        })?;
        match got {
            Ok(Some(m)) => {
                let out = (!r.is_send()).then(|| message(py, &m));
                Ok((true, out))
            }
            Ok(None) => {
                self.put(r);
                Ok((false, None))
            }
            Err(e) => Err(errors::coll(e)),
        }
    }

    /// Withdraws a receive not yet matched; True if it was withdrawn.
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        let Some(r) = self.take() else {
            return Ok(false);
        };
        if r.is_send() {
            return Ok(false);
        }
        self.comm.get().run(py, move |c| c.cancel(r))
    }

    /// Waits until one of `requests` (all of one communicator, all active) completes:
    /// `(index, message or None)`.
    #[staticmethod]
    fn wait_any<'py>(
        py: Python<'py>,
        requests: Vec<Bound<'py, PyRequest>>,
    ) -> PyResult<(usize, Option<Message<'py>>)> {
        let Some(first) = requests.first() else {
            return Err(errors::new_err(Kind::Collective, "wait_any of no requests"));
        };
        let comm = first.get().comm.clone_ref(py);
        let mut taken = Vec::with_capacity(requests.len());
        for r in &requests {
            if !r.get().comm.is(&comm) {
                for (r, t) in requests.iter().zip(taken) {
                    r.get().put(t);
                }
                return Err(errors::new_err(
                    Kind::Collective,
                    "wait_any: the requests belong to different communicators",
                ));
            }
            match r.get().take() {
                Some(t) => taken.push(t),
                None => {
                    for (r, t) in requests.iter().zip(taken) {
                        r.get().put(t);
                    }
                    return Err(spent());
                }
            }
        }
        let (taken, got) = comm.get().run(py, move |c| {
            let got = c.wait_any(&taken);
            Ok((taken, got))
        })?;
        let done = got.as_ref().ok().map(|(i, _)| *i);
        for (k, (r, t)) in requests.iter().zip(taken).enumerate() {
            if Some(k) != done {
                r.get().put(t);
            }
        }
        let (i, m) = got.map_err(errors::coll)?;
        Ok((i, m.as_ref().map(|m| message(py, m))))
    }

    fn __repr__(&self) -> String {
        format!(
            "<vargr.Request {}>",
            if self.active() { "active" } else { "done" }
        )
    }
}

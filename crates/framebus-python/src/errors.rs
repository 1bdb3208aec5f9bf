//! The one conversion point from core errors to Python exceptions. Every exception class lives in
//! `framebus.errors` and subclasses the builtin a user would catch (FileNotFoundError,
//! TimeoutError, ValueError, ...), so `except TimeoutError` just works.

use framebus::pipe::PipeError;
use framebus::Error;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyTuple, PyType};

/// A core error on its way to Python (the orphan rule forbids `From<Error> for PyErr` here).
pub struct CoreError(pub Error);

impl From<Error> for CoreError {
    fn from(e: Error) -> Self {
        CoreError(e)
    }
}

impl From<CoreError> for PyErr {
    fn from(e: CoreError) -> PyErr {
        Python::attach(|py| to_pyerr(py, e.0))
    }
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The class `framebus.errors.<name>`.
pub fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let module = ERRORS.get_or_try_init(py, || PyModule::import(py, "framebus.errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

fn raise<A>(py: Python<'_>, class: &str, args: A) -> PyErr
where
    A: for<'py> IntoPyObject<'py, Target = PyTuple> + Send + Sync + 'static,
{
    match error_class(py, class) {
        Ok(cls) => PyErr::from_type(cls, args),
        Err(e) => e,
    }
}

/// Maps a core error to the matching Python exception.
pub fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    match &e {
        Error::InvalidName { .. } | Error::InvalidArgument(_) => raise(py, "InvalidArgumentError", (msg,)),
        Error::NotFound { .. } => raise(py, "StreamNotFoundError", (libc::ENOENT, msg)),
        Error::AlreadyExists { .. } | Error::SpecMismatch { .. } => raise(py, "StreamExistsError", (libc::EEXIST, msg)),
        Error::PermissionDenied { errno, .. } => raise(py, "StreamPermissionError", (*errno, msg)),
        Error::NoSpace { errno, .. } => raise(py, "InsufficientSpaceError", (*errno, msg)),
        Error::IncompatibleVersion { .. } => raise(py, "IncompatibleStreamError", (msg,)),
        Error::Corrupt { .. } => raise(py, "CorruptStreamError", (msg,)),
        Error::NotReady { .. } => raise(py, "StreamNotReadyError", (msg,)),
        Error::Timeout { .. } | Error::NoFreeSlot { .. } => raise(py, "StreamTimeoutError", (msg,)),
        Error::TooManyReaders { .. } => raise(py, "TooManyReadersError", (msg,)),
        Error::LockState { .. } => raise(py, "LockNotHeldError", (msg,)),
        Error::Empty { .. } => PyRuntimeError::new_err(msg),
        Error::LoanOpen { .. } => raise(py, "LoanOpenError", (msg,)),
        Error::Ended { .. } => raise(py, "StreamEndedError", (msg,)),
        Error::SequenceExhausted { .. } => raise(py, "SequenceExhaustedError", (msg,)),
        Error::Interrupted => PyKeyboardInterrupt::new_err(()),
        Error::Io { source, .. } => raise(py, "FramebusOSError", (source.raw_os_error().unwrap_or(0), msg)),
    }
}

/// A pipe error on its way to Python.
pub struct PipeFailure(pub PipeError);

impl From<PipeFailure> for PyErr {
    fn from(e: PipeFailure) -> PyErr {
        Python::attach(|py| pipe_to_pyerr(py, e.0))
    }
}

/// Maps a pipe error: EPIPE -> PipeBrokenError (BrokenPipeError), other system errors ->
/// PipeError (OSError) with their errno, timeouts -> PipeTimeoutError (TimeoutError).
pub fn pipe_to_pyerr(py: Python<'_>, e: PipeError) -> PyErr {
    let msg = e.to_string();
    match &e {
        PipeError::Timeout { .. } => raise(py, "PipeTimeoutError", (msg,)),
        PipeError::InvalidArgument(_) => raise(py, "InvalidArgumentError", (msg,)),
        PipeError::Interrupted => PyKeyboardInterrupt::new_err(()),
        _ if e.is_broken_pipe() => raise(py, "PipeBrokenError", (libc::EPIPE, msg)),
        _ => raise(py, "PipeError", (e.errno().unwrap_or(0), msg)),
    }
}

/// Signal checks for blocking waits: runs with the GIL detached, re-attaches at most every
/// 100 ms to run Python's signal handlers, and keeps the exception one of them raised.
#[derive(Default)]
pub struct SignalCheck {
    pub pending: Option<PyErr>,
}

impl SignalCheck {
    /// The `check` callback of core waits: false stops the wait. `closed` tells whether the
    /// handle was closed meanwhile (a wait on a closed handle stops with StreamClosedError).
    pub fn check(&mut self, closed: impl Fn() -> Option<PyErr>) -> bool {
        if let Some(e) = closed() {
            self.pending = Some(e);
            return false;
        }
        match Python::attach(|py| py.check_signals()) {
            Ok(()) => true,
            Err(e) => {
                self.pending = Some(e);
                false
            }
        }
    }

    /// Converts a pipe result, preferring the exception raised by a signal handler.
    pub fn finish_pipe<T>(self, result: Result<T, PipeError>) -> PyResult<T> {
        match (self.pending, result) {
            (Some(e), Err(_)) => Err(e),
            (_, r) => r.map_err(|e| PipeFailure(e).into()),
        }
    }

    /// Converts a core result, preferring the exception raised by a signal handler.
    pub fn finish<T>(self, result: Result<T, Error>) -> PyResult<T> {
        match (self.pending, result) {
            (Some(e), Err(_)) => Err(e),
            (_, r) => r.map_err(|e| CoreError(e).into()),
        }
    }
}

//! The one conversion point from core errors to Python exceptions. Every exception class lives in
//! `framebus.errors` and subclasses the builtin a user would catch (FileNotFoundError,
//! TimeoutError, ValueError, ...), so `except TimeoutError` just works.

use framebus::pipe::PipeError;
use framebus::Error;
use pyo3::exceptions::PyKeyboardInterrupt;
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

/// Every exception (and warning) class the bindings raise: its name in `framebus.errors` is
/// said here once, and tests/test_errors.py checks that each exists there and subclasses the
/// root (`_native.ERROR_KINDS` lists them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidArgument,
    InvalidFrame,
    StreamNotFound,
    StreamExists,
    StreamPermission,
    InsufficientSpace,
    IncompatibleStream,
    CorruptStream,
    StreamNotReady,
    StreamTimeout,
    StreamClosed,
    StreamEnded,
    StreamReplaced,
    StreamEmpty,
    LockNotHeld,
    LoanOpen,
    SequenceExhausted,
    TooManyReaders,
    FramebusOS,
    Pipe,
    PipeBroken,
    PipeTimeout,
    Device,
    DeviceUnavailable,
    LockRecoveredWarning,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 25] = [
        ErrorKind::InvalidArgument,
        ErrorKind::InvalidFrame,
        ErrorKind::StreamNotFound,
        ErrorKind::StreamExists,
        ErrorKind::StreamPermission,
        ErrorKind::InsufficientSpace,
        ErrorKind::IncompatibleStream,
        ErrorKind::CorruptStream,
        ErrorKind::StreamNotReady,
        ErrorKind::StreamTimeout,
        ErrorKind::StreamClosed,
        ErrorKind::StreamEnded,
        ErrorKind::StreamReplaced,
        ErrorKind::StreamEmpty,
        ErrorKind::LockNotHeld,
        ErrorKind::LoanOpen,
        ErrorKind::SequenceExhausted,
        ErrorKind::TooManyReaders,
        ErrorKind::FramebusOS,
        ErrorKind::Pipe,
        ErrorKind::PipeBroken,
        ErrorKind::PipeTimeout,
        ErrorKind::Device,
        ErrorKind::DeviceUnavailable,
        ErrorKind::LockRecoveredWarning,
    ];

    /// The class's name in `framebus.errors`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "InvalidArgumentError",
            ErrorKind::InvalidFrame => "InvalidFrameError",
            ErrorKind::StreamNotFound => "StreamNotFoundError",
            ErrorKind::StreamExists => "StreamExistsError",
            ErrorKind::StreamPermission => "StreamPermissionError",
            ErrorKind::InsufficientSpace => "InsufficientSpaceError",
            ErrorKind::IncompatibleStream => "IncompatibleStreamError",
            ErrorKind::CorruptStream => "CorruptStreamError",
            ErrorKind::StreamNotReady => "StreamNotReadyError",
            ErrorKind::StreamTimeout => "StreamTimeoutError",
            ErrorKind::StreamClosed => "StreamClosedError",
            ErrorKind::StreamEnded => "StreamEndedError",
            ErrorKind::StreamReplaced => "StreamReplacedError",
            ErrorKind::StreamEmpty => "StreamEmptyError",
            ErrorKind::LockNotHeld => "LockNotHeldError",
            ErrorKind::LoanOpen => "LoanOpenError",
            ErrorKind::SequenceExhausted => "SequenceExhaustedError",
            ErrorKind::TooManyReaders => "TooManyReadersError",
            ErrorKind::FramebusOS => "FramebusOSError",
            ErrorKind::Pipe => "PipeError",
            ErrorKind::PipeBroken => "PipeBrokenError",
            ErrorKind::PipeTimeout => "PipeTimeoutError",
            ErrorKind::Device => "DeviceError",
            ErrorKind::DeviceUnavailable => "DeviceUnavailableError",
            ErrorKind::LockRecoveredWarning => "LockRecoveredWarning",
        }
    }

    /// The class `framebus.errors.<name>`.
    pub fn class(self, py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
        let module = ERRORS.get_or_try_init(py, || PyModule::import(py, "framebus.errors").map(Bound::unbind))?;
        Ok(module.bind(py).getattr(self.name())?.cast_into::<PyType>()?)
    }

    /// An exception of this kind with `args` (a message, or an errno and a message for the
    /// OSError kinds).
    pub fn err<A>(self, py: Python<'_>, args: A) -> PyErr
    where
        A: for<'py> IntoPyObject<'py, Target = PyTuple> + Send + Sync + 'static,
    {
        match self.class(py) {
            Ok(cls) => PyErr::from_type(cls, args),
            Err(e) => e,
        }
    }
}

/// Maps a core error to the matching Python exception. Values a caller may act on ride on the
/// exception as attributes (`stream`, `path`, `reason`, `existing_spec`, `requested_spec`), so
/// no code needs to take a message apart.
pub fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let err = exception(py, &e);
    let value = err.value(py);
    let mut fields: Vec<(&str, &str)> = Vec::new();
    match &e {
        Error::NotFound { name, path }
        | Error::AlreadyExists { name, path }
        | Error::NotReady { name, path, .. }
        | Error::IncompatibleVersion { name, path, .. } => {
            fields.extend([("stream", name.as_str()), ("path", path.as_str())]);
        }
        Error::Corrupt { name, path, reason } => {
            fields.extend([("stream", name.as_str()), ("path", path.as_str()), ("reason", reason.as_str())])
        }
        Error::NotSegment { name, path, kind } => fields.extend([("stream", name.as_str()), ("path", path.as_str()), ("reason", *kind)]),
        Error::SpecMismatch { name, existing, requested } => {
            fields.extend([("stream", name.as_str()), ("existing_spec", existing.as_str()), ("requested_spec", requested.as_str())]);
        }
        Error::NoSpace { name, path, .. } => fields.extend([("stream", name.as_str()), ("path", path.as_str())]),
        // What a reader of an empty stream may act on: nothing was ever written ("empty"), or
        // the newest frame went with a write that was given up ("lost").
        Error::Empty { name } => fields.extend([("stream", name.as_str()), ("reason", "empty")]),
        Error::NewestLost { name } => fields.extend([("stream", name.as_str()), ("reason", "lost")]),
        Error::Timeout { name, .. }
        | Error::NoFreeSlot { name, .. }
        | Error::LockBusy { name, .. }
        | Error::Ended { name }
        | Error::Replaced { name, .. }
        | Error::TooManyReaders { name, .. }
        | Error::Released { name }
        | Error::Device { name: Some(name), .. }
        | Error::DeviceUnavailable { name: Some(name), .. }
        | Error::WrongMemory { name, .. } => {
            fields.push(("stream", name.as_str()));
        }
        _ => {}
    }
    for (key, text) in fields {
        if let Err(e) = value.setattr(key, text) {
            return e;
        }
    }
    // A GPU door error rides on the exception as values (`framebus doctor` decides from them):
    // the driver's code (or framebus's own, negative), its name, and the call that failed.
    if let Some(door) = e.door_error() {
        let set = value
            .setattr("code", door.code)
            .and_then(|()| value.setattr("code_name", door.name.as_str()))
            .and_then(|()| value.setattr("call", door.call));
        if let Err(e) = set {
            return e;
        }
    }
    err
}

fn exception(py: Python<'_>, e: &Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::InvalidName { .. } | Error::InvalidArgument(_) => ErrorKind::InvalidArgument.err(py, (msg,)),
        Error::InvalidFrameTable { .. } => ErrorKind::InvalidFrame.err(py, (msg,)),
        Error::NotFound { .. } => ErrorKind::StreamNotFound.err(py, (libc::ENOENT, msg)),
        Error::AlreadyExists { .. } | Error::SpecMismatch { .. } => ErrorKind::StreamExists.err(py, (libc::EEXIST, msg)),
        Error::PermissionDenied { errno, .. } => ErrorKind::StreamPermission.err(py, (*errno, msg)),
        Error::NoSpace { errno, .. } => ErrorKind::InsufficientSpace.err(py, (*errno, msg)),
        Error::IncompatibleVersion { .. } => ErrorKind::IncompatibleStream.err(py, (msg,)),
        Error::Corrupt { .. } | Error::NotSegment { .. } => ErrorKind::CorruptStream.err(py, (msg,)),
        Error::NotReady { .. } => ErrorKind::StreamNotReady.err(py, (msg,)),
        Error::Timeout { .. } | Error::NoFreeSlot { .. } | Error::LockBusy { .. } => ErrorKind::StreamTimeout.err(py, (msg,)),
        Error::TooManyReaders { .. } => ErrorKind::TooManyReaders.err(py, (msg,)),
        Error::LockState { .. } => ErrorKind::LockNotHeld.err(py, (msg,)),
        Error::Empty { .. } | Error::NewestLost { .. } => ErrorKind::StreamEmpty.err(py, (msg,)),
        Error::LoanOpen { .. } => ErrorKind::LoanOpen.err(py, (msg,)),
        Error::Ended { .. } => ErrorKind::StreamEnded.err(py, (msg,)),
        Error::Replaced { .. } => ErrorKind::StreamReplaced.err(py, (msg,)),
        Error::SequenceExhausted { .. } => ErrorKind::SequenceExhausted.err(py, (msg,)),
        Error::Device { .. } => ErrorKind::Device.err(py, (msg,)),
        Error::DeviceUnavailable { .. } => ErrorKind::DeviceUnavailable.err(py, (msg,)),
        Error::WrongMemory { .. } => ErrorKind::InvalidArgument.err(py, (msg,)),
        Error::Released { .. } => ErrorKind::StreamClosed.err(py, (msg,)),
        Error::Interrupted => PyKeyboardInterrupt::new_err(()),
        Error::Io { source, .. } => ErrorKind::FramebusOS.err(py, (source.raw_os_error().unwrap_or(0), msg)),
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
        PipeError::Timeout { .. } => ErrorKind::PipeTimeout.err(py, (msg,)),
        PipeError::InvalidArgument(_) => ErrorKind::InvalidArgument.err(py, (msg,)),
        PipeError::Interrupted => PyKeyboardInterrupt::new_err(()),
        _ if e.is_broken_pipe() => ErrorKind::PipeBroken.err(py, (libc::EPIPE, msg)),
        _ => ErrorKind::Pipe.err(py, (e.errno().unwrap_or(0), msg)),
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

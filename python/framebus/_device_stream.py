"""The ``DeviceStream`` class: a handle on a stream whose frames live in one GPU's memory.

It is a :class:`framebus.Stream` (waits, the write lock, the end of the stream, iteration,
pickling, ``with`` blocks, ``close``/``unlink`` are the same) whose frame methods are the
native ``DeviceStream``'s: they take a CUDA ``stream=`` (an int handle, ``torch.cuda.Stream``,
``cupy.cuda.Stream``) and hand out device memory: ``write`` copies device-to-device (or uploads
a NumPy array), ``view``/``wait_view``/``view_seq`` return a zero-copy ``DeviceFrame``,
``read``/``read_new`` copy into ``out=`` or a new ``DeviceArray``, ``loan`` returns a
``DeviceLoan``. ``framebus.create(..., device=...)`` and ``framebus.open`` of a device stream
reached through its GPU return one; docs/gpu.md describes the ordering between processes.
"""

from __future__ import annotations

from . import _native
from ._stream import DEVICE_CLASSES, Stream, _ReadOnlyStream

__all__ = ["DeviceStream"]


class DeviceStream(Stream, _native.DeviceStream):
    """A handle on a device stream (see the module documentation; the native methods are
    documented in ``framebus/_native.pyi``). Everything a host ``Stream`` handle does that
    does not touch frames works the same here."""

    def __repr__(self) -> str:
        if self.closed:
            return f"<framebus.DeviceStream {self.name!r} closed>"
        return (
            f"<framebus.DeviceStream {self.name!r} shape={self.shape} dtype={self.dtype} device={self.device} "
            f"slots={self.slots} mode={self.mode} seq={self.write_sequence} attached={self.attached}>"
        )


class _ReadOnlyDeviceStream(_ReadOnlyStream, DeviceStream):
    """A read-only handle on a device stream (``open(..., readonly=True)``): refuses what
    writes or changes the stream, as a read-only host handle does."""


DEVICE_CLASSES.update(plain=DeviceStream, readonly=_ReadOnlyDeviceStream)

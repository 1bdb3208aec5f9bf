"""iceoryx2's Python bindings: a publish-subscribe service of byte slices (publisher loans a
sample, the frame is copied in, or only its header is written for "render in place"; the
subscriber gets a view of the sample), plus an event service the writer notifies after each send
so readers block instead of polling. Lossless = no safe overflow + RetryUntilDelivered."""

from __future__ import annotations

import ctypes
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import numpy as np

from ..harness import HEADER_WORDS
from . import Reader, Spec, Transport, Writer, as_frame, byte_view


def _service(spec: Spec) -> Any:
    import iceoryx2 as iox2

    iox2.set_log_level(iox2.LogLevel.Error)
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    builder = (
        node.service_builder(iox2.ServiceName.new(f"framebus-bench/{spec.name}"))
        .publish_subscribe(iox2.Slice[ctypes.c_uint8])
        .max_subscribers(max(spec.readers, 2))
        .subscriber_max_buffer_size(spec.slots)
        .history_size(0)
        .enable_safe_overflow(not spec.lossless)
    )
    service = builder.open_or_create()
    event = node.service_builder(iox2.ServiceName.new(f"framebus-bench/{spec.name}/ev")).event().open_or_create()
    return iox2, node, service, event


class _IoxWriter(Writer):
    def __init__(self, spec: Spec) -> None:
        iox2, self.node, self.service, self.event = _service(spec)
        self.spec = spec
        strategy = iox2.BackpressureStrategy.RetryUntilDelivered if spec.lossless else iox2.BackpressureStrategy.DiscardData
        self.pub = self.service.publisher_builder().initial_max_slice_len(spec.nbytes).backpressure_strategy(strategy).create()
        self.notifier = self.event.notifier_builder().create()

    def connect(self, timeout: float = 10.0) -> None:
        import time

        deadline = time.monotonic() + timeout
        while self.service.dynamic_config.number_of_subscribers < self.spec.readers:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.service.dynamic_config.number_of_subscribers} of {self.spec.readers} subscribers attached")
            time.sleep(0.005)
        self.pub.update_connections()

    def _loan(self) -> Any:
        sample = self.pub.loan_slice_uninit(self.spec.nbytes)
        return sample, as_frame(sample.payload().as_memory_view(), self.spec)

    def _publish(self, sample: Any) -> None:
        sample.assume_init().send()
        self.notifier.notify()

    def send(self, src: np.ndarray) -> None:
        sample, arr = self._loan()
        np.copyto(arr, src)
        self._publish(sample)

    def send_inplace(self, src: np.ndarray) -> None:
        sample, arr = self._loan()
        byte_view(arr)[: HEADER_WORDS * 8] = byte_view(src)[: HEADER_WORDS * 8]
        self._publish(sample)

    @contextmanager
    def loan(self) -> Iterator[np.ndarray]:
        sample, arr = self._loan()
        yield arr
        self._publish(sample)

    def close(self) -> None:
        for attr in ("notifier", "pub", "event", "service", "node"):
            obj = getattr(self, attr, None)
            if obj is not None and hasattr(obj, "delete"):
                obj.delete()
            setattr(self, attr, None)


class _IoxReader(Reader):
    def __init__(self, spec: Spec) -> None:
        iox2, self.node, self.service, self.event = _service(spec)
        self.spec = spec
        self.Duration = iox2.Duration
        self.sub = self.service.subscriber_builder().buffer_size(spec.slots).create()
        self.listener = self.event.listener_builder().create()
        self.sample: Any = None

    def recv(self, timeout: float) -> Optional[np.ndarray]:
        import time

        deadline = time.perf_counter() + timeout
        while True:
            sample = self.sub.receive()
            if sample is not None:
                if not self.spec.lossless:  # latest: skip to the newest sample
                    while True:
                        newer = self.sub.receive()
                        if newer is None:
                            break
                        sample.delete()
                        sample = newer
                self.sample = sample
                return as_frame(sample.payload().as_memory_view(), self.spec)
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            self.listener.timed_wait(self.Duration.from_secs_f64(min(left, 0.1)))

    def done(self) -> None:
        if self.sample is not None:
            self.sample.delete()
            self.sample = None

    def close(self) -> None:
        self.done()
        for attr in ("listener", "sub", "event", "service", "node"):
            obj = getattr(self, attr, None)
            if obj is not None and hasattr(obj, "delete"):
                obj.delete()
            setattr(self, attr, None)


class Iceoryx2(Transport):
    """iceoryx2 publish-subscribe (loan + copy-in, subscriber view) with event wake-ups."""

    key = "iceoryx2"
    label = "iceoryx2 loan + view"
    family = "iceoryx2"
    loans = True
    views = True

    @classmethod
    def unavailable(cls) -> Optional[str]:
        try:
            import iceoryx2  # noqa: F401
        except ImportError:
            return "iceoryx2 is not installed (pip install './benches[peers]')"
        return None

    def writer(self) -> Writer:
        return _IoxWriter(self.spec)

    def reader(self, index: int = 0) -> Reader:
        return _IoxReader(self.spec)

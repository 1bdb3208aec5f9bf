"""A queue between Zenoh's callback thread and an end's worker thread: the callback puts, the
worker polls with a timeout and takes. Used by the Zenoh engine's transports and by
``framebus.ros2``'s image subscriber."""

from __future__ import annotations

import collections
import threading
from typing import Any, Deque


class Inbox:
    """Items (samples, or what was read of them) handed over by Zenoh's callback thread to an
    end's worker thread, oldest first. Thread-safe; unbounded (the sender's window bounds it)."""

    def __init__(self) -> None:
        self._items: Deque[Any] = collections.deque()
        self._cond = threading.Condition()

    def put(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def poll(self, timeout_ms: int) -> bool:
        """Whether an item is waiting, after waiting up to ``timeout_ms`` for one."""
        if self._items:
            return True
        with self._cond:
            if timeout_ms > 0:
                self._cond.wait_for(lambda: bool(self._items), timeout_ms / 1000)
            return bool(self._items)

    def pop(self) -> Any:
        """The oldest item; IndexError when none is waiting."""
        return self._items.popleft()

    def take(self) -> Any:
        """The oldest item, or None when none is waiting."""
        try:
            return self._items.popleft()
        except IndexError:
            return None

"""Communication: allocators that give each worker channels to every other worker."""
from .allocator import Allocator, Puller, Pusher
from .thread import ProcessHub, ThreadAllocator

__all__ = ["Allocator", "ProcessHub", "Puller", "Pusher", "ThreadAllocator"]

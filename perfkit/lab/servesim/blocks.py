"""The KV cache's blocks for :mod:`perfkit.lab.servesim.core`: the pool (a free count, and with prefix
caching vLLM's cached blocks and LRU free queue) and the names of a prompt's shareable blocks. The
rules are in :mod:`.core`'s docstring ("KV cache", "prefix caching")."""

from __future__ import annotations

from collections import deque
from typing import Any


def shared_block_keys(prefix: tuple[Any, ...], prompt: int, bs: int) -> list[Any]:
    """The keys of a prompt's shareable blocks: ``block_keys`` as given (one per block of ``bs``
    tokens), else ``(prefix_key, index)`` per whole block of the first ``prefix_tokens``."""
    key, tokens, given = prefix
    if given is not None:
        return list(given[: prompt // bs])
    if key is not None and tokens > 0:
        return [(key, i) for i in range(min(tokens, prompt) // bs)]
    return []


class Pool:
    """KV blocks: a free count, and with prefix caching the cached blocks and vLLM's LRU free queue.

    The queue holds runs of anonymous free blocks (ints) and cached blocks ``(key, generation)``;
    a cached block taken back by a hit leaves a stale entry behind (its generation moved on)."""

    def __init__(self, total: int, caching: bool) -> None:
        self.total = total
        self.free = total  # unreferenced blocks, evictable cached ones included
        self.caching = caching
        self.queue: deque[Any] = deque([total]) if caching else deque()
        self.cache: dict[Any, list[Any]] = {}  # key -> [ref_count, generation, in_free_queue]

    def take(self, n: int) -> None:
        """Allocate ``n`` (<= free) blocks, evicting the least recently freed cached ones as needed."""
        self.free -= n
        if not self.caching:
            return
        q, cache = self.queue, self.cache
        while n > 0:
            e = q[0]
            if type(e) is int:
                if e > n:
                    q[0] = e - n
                    return
                q.popleft()
                n -= e
                continue
            q.popleft()
            entry = cache.get(e[0])
            if entry is not None and entry[2] and entry[1] == e[1]:
                del cache[e[0]]
                n -= 1

    def give(self, anonymous: int, hashed: list[Any]) -> None:
        """Return a request's blocks: its own ones, then its cached ones tail first (vLLM frees in reverse)."""
        self.free += anonymous
        if not self.caching:
            return
        q = self.queue
        if anonymous:
            if q and type(q[-1]) is int:
                q[-1] += anonymous
            else:
                q.append(anonymous)
        for key in reversed(hashed):
            entry = self.cache[key]
            entry[0] -= 1
            if entry[0] == 0:
                entry[1] += 1
                entry[2] = True
                q.append((key, entry[1]))
                self.free += 1
        if len(q) > 4 * (len(self.cache) + 64):  # drop stale entries now and then
            self.queue = deque(e for e in q if type(e) is int or self._live(e))

    def _live(self, e: tuple[Any, int]) -> bool:
        entry = self.cache.get(e[0])
        return entry is not None and entry[2] and entry[1] == e[1]

    def lookup(self, keys: list[Any], limit: int) -> tuple[int, int]:
        """Leading cached blocks among ``keys[:limit]``, and how many of them sit in the free queue."""
        hits = evictable = 0
        cache = self.cache
        for key in keys[:limit]:
            entry = cache.get(key)
            if entry is None:
                break
            hits += 1
            evictable += entry[2]
        return hits, evictable

    def touch(self, key: Any) -> None:
        entry = self.cache[key]
        if entry[2]:
            entry[2] = False
            self.free -= 1
        entry[0] += 1

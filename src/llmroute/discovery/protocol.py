"""The contract of an endpoint source."""

from __future__ import annotations

from typing import Protocol

Endpoint = tuple[str, "int | None"]
"""``(host, port)``: an address or host name, and its port (None: the template's)."""


class EndpointSource(Protocol):
    """Where a discovery entry's endpoints come from. ``kind`` names it in metrics
    (``dns``, ``kubernetes``)."""

    kind: str

    async def endpoints(self) -> frozenset[Endpoint]:
        """The endpoints now (possibly none). Raises DiscoveryError when the source cannot
        be read (the caller keeps its last known set)."""
        ...

    async def close(self) -> None:
        """Release the source's clients (nothing to do for most)."""
        ...

"""Forward TCP connections from a listening address to a target ``host:port``, bytes unchanged.

The Ray dashboard opt-in (compose/dashboard.yml) runs it in a container of its own, on the
cluster's internal network and on a published one, so that the Ray head itself never joins a
network with a route out::

    python -m deploy.node.tcp_forward --listen 0.0.0.0:8265 --to ray-head:8265
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

CHUNK_BYTES = 65536


def host_port(text: str) -> tuple[str, int]:
    """``host:port`` as a pair; raises ``ValueError`` on anything else."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{text!r}: expected host:port")
    return host, int(port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until either side ends, then close ``writer``."""
    try:
        while data := await reader.read(CHUNK_BYTES):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    """Accept connections on ``listen`` forever, each piped both ways to a new connection to ``target``."""

    async def forward(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection(*target)
        except OSError:  # the head is not (yet) listening: the client sees the connection close
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, target_writer), _pipe(target_reader, client_writer))

    server = await asyncio.start_server(forward, *listen)
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``--listen`` and ``--to``, then forward until stopped."""
    parser = argparse.ArgumentParser(prog="python -m deploy.node.tcp_forward", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=host_port, required=True, help="address to accept on, host:port")
    parser.add_argument("--to", type=host_port, required=True, help="address to forward to, host:port")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.listen, args.to))


if __name__ == "__main__":
    main()

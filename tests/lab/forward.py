"""A byte forwarder between a TCP port and a unix socket, the lab's bridge across namespaces.

The remote libvirt host's client namespace (`<netns>-rc`) has no route to the host's loopback,
where the lab's kube-apiserver listens, and the lab changes nothing in the host's own network. A
unix socket is a file, visible from every network namespace, so two of these carry the API server
into that namespace:

    host namespace:  forward.py unix <lab dir>/remote/apiserver.sock tcp 127.0.0.1 <api port>
    <netns>-rc:      forward.py tcp 127.0.0.1 <api port> unix <lab dir>/remote/apiserver.sock

The first listens on the unix socket and connects to the API server; the second, started with
`ip netns exec`, listens on 127.0.0.1:<api port> inside the client namespace and connects to the
unix socket. TLS passes through untouched, so the lab's admin kubeconfig works unchanged there.

Standard library only. `--ready FILE` is created once the listener accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _serve(args: argparse.Namespace) -> None:
    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if args.to_kind == "unix":
            return await asyncio.open_unix_connection(args.to[0])
        return await asyncio.open_connection(args.to[0], int(args.to[1]))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await connect()
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await w.wait_closed()

    if args.from_kind == "unix":
        path = Path(args.listen[0])
        path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(handle, path=str(path))
        path.chmod(0o600)
    else:
        server = await asyncio.start_server(handle, args.listen[0], int(args.listen[1]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.ready:
        Path(args.ready).touch()
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("from_kind", choices=["unix", "tcp"])
    parser.add_argument("rest", nargs="+", help="listen address, then `unix PATH` or `tcp H P`")
    parser.add_argument("--ready", help="a file to create once listening")
    args = parser.parse_args()
    width = 1 if args.from_kind == "unix" else 2
    args.listen, tail = args.rest[:width], args.rest[width:]
    if not tail or tail[0] not in ("unix", "tcp") or len(tail) != (2 if tail[0] == "unix" else 3):
        parser.error("expected: <unix PATH | tcp HOST PORT> <unix PATH | tcp HOST PORT>")
    args.to_kind, args.to = tail[0], tail[1:]
    if len(args.listen) != width:
        parser.error("incomplete listen address")
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()

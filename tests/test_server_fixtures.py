"""The test servers themselves: a port taken between free_port() and the server's bind."""

import socket

import pytest
from servers import (
    INFLUXD,
    VICTORIA_METRICS,
    InfluxdServer,
    VictoriaMetricsServer,
    _http,
    find_binary,
)


def _taken(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


@pytest.mark.slow
def test_a_first_start_moves_off_a_port_taken_since_it_was_chosen(tmp_path):
    for cls, binary, package, path, ok in (
        (VictoriaMetricsServer, VICTORIA_METRICS, "victoria-metrics", "/health", 200),
        (InfluxdServer, INFLUXD, "influxdb", "/ping", 204),
    ):
        server = cls(find_binary(binary, package), tmp_path / package)
        chosen = server.port
        holder = _taken(chosen)
        try:
            server.start()
            try:
                assert server.port != chosen and server.url.endswith(f":{server.port}")
                assert _http("GET", f"{server.url}{path}")[0] == ok
                # A restart keeps the port it has: an outage test's agent still points at it.
                server.stop()
                server.start()
                assert _http("GET", f"{server.url}{path}")[0] == ok
            finally:
                server.stop()
        finally:
            holder.close()

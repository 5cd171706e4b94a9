"""A local Spark Connect server for tests (:mod:`.server`)."""

from cdc_sink_testkit.connect.server import ConnectServer, ConnectStartError, start_connect_server

__all__ = ["ConnectServer", "ConnectStartError", "start_connect_server"]

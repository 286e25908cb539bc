"""A stand-in inference server, run as a real process by the tests: no GPU can run vLLM or
Triton here, so this speaks their /metrics exactly (vLLM's through prometheus_client with
vLLM's family names and labels, as vllm/engine/metrics.py declares them; Triton's in
prometheus-cpp's text as its docs/user_guide/metrics.md shows) and holds "GPU workers": child
processes that the simulator is told run on GPUs (@proc=GPU:PID).

    python inference_server.py KIND STATE_FILE [--workers N] [--other-port] [--engines N] [--drip-after N]

KIND is vllm, sglang (prometheus_client, python/sglang/srt/metrics/collector.py's names),
triton or tgi (the router's metrics-exporter-prometheus text, and its GET /info). Once listening it writes STATE_FILE (JSON: pid, port, workers,
other_port, restarts). POST /work?n=N counts N requests' worth of work; GET /state answers the
counters. SIGHUP is a restart: the process execs itself (same pid, the workers stay), its
counters start again from zero on the same port. --other-port also listens on a port that
answers HTTP but no /metrics, and counts how often it is asked (GET /asked on the main port).
--engines N (vLLM): N data-parallel engines, vLLM V1's `engine` label on each family, the work
shared among them; POST /restart_engine?engine=E starts engine E's counters again from zero
(GET /state still answers what all engines served).
--drip-after N: after N answers to /metrics, each later one drips a byte every 0.25 s (a
hostile or hung server found through discovery).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

MODEL = {
    "vllm": "meta-llama/Llama-3.1-8B-Instruct",
    "sglang": "Qwen/Qwen2.5-7B-Instruct",
    "triton": "resnet50",
    "tgi": "bigcode/starcoder2-3b",
}


class Counts:
    def __init__(self, kind: str, engines: int = 0):
        self.kind = kind
        self.engines: list[str | None] = [str(e) for e in range(engines)] or [None]
        self.lock = threading.Lock()
        self.values = {"requests": 0, "tokens_in": 0, "tokens_out": 0, "inferences": 0, "executions": 0}
        if kind == "vllm":
            from prometheus_client import CollectorRegistry, Counter

            self.registry = CollectorRegistry()
            labels = ["model_name"] + (["engine"] if engines else [])
            self.prompt = Counter(
                "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=self.registry
            )
            self.generation = Counter(
                "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=self.registry
            )
            self.success = Counter(
                "vllm:request_success",
                "Count of successfully processed requests.",
                labels + ["finished_reason"],
                registry=self.registry,
            )
            from prometheus_client import Gauge

            self.running = Gauge(
                "vllm:num_requests_running",
                "Number of requests currently running on GPU.",
                labels,
                registry=self.registry,
            )
            for engine in self.engines:
                self.running.labels(*self._labels(engine)).set(0)
                self.make_children(engine)

        elif kind == "sglang":
            from prometheus_client import CollectorRegistry, Counter

            self.registry = CollectorRegistry()
            labels = ["model_name", "engine_type"]
            self.prompt = Counter(
                "sglang:prompt_tokens_total", "Number of prefill tokens processed.", labels, registry=self.registry
            )
            self.generation = Counter(
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
                labels,
                registry=self.registry,
            )
            self.requests = Counter(
                "sglang:num_requests_total", "Number of requests processed.", labels, registry=self.registry
            )

    def _labels(self, engine) -> tuple:
        return (MODEL["vllm"],) if engine is None else (MODEL["vllm"], engine)

    def make_children(self, engine) -> None:
        # vLLM's V1 logger makes each labelled child at start, so a fresh server (engine) shows zeros.
        for counter in (self.prompt, self.generation):
            counter.labels(*self._labels(engine))
        for reason in ("stop", "length", "abort"):
            self.success.labels(*self._labels(engine), reason)

    def restart_engine(self, engine: str) -> None:
        with self.lock:
            for counter in (self.prompt, self.generation):
                counter.remove(*self._labels(engine))
            for reason in ("stop", "length", "abort"):
                self.success.remove(*self._labels(engine), reason)
            self.make_children(engine)

    def work(self, n: int) -> None:
        with self.lock:
            if self.kind in ("sglang", "tgi"):
                if self.kind == "sglang":
                    labels = (MODEL["sglang"], "unified")
                    self.requests.labels(*labels).inc(n)
                    self.prompt.labels(*labels).inc(50 * n)
                    self.generation.labels(*labels).inc(20 * n)
                self.values["requests"] += n
                self.values["tokens_in"] += 50 * n
                self.values["tokens_out"] += 20 * n
            elif self.kind == "vllm":
                for i, engine in enumerate(self.engines):  # the requests dealt out over the engines
                    m = n // len(self.engines) + (i < n % len(self.engines))
                    labels = self._labels(engine)
                    # vLLM labels each finished request by why it stopped: the reader adds them up.
                    stops = m // 2
                    self.success.labels(*labels, "stop").inc(stops)
                    self.success.labels(*labels, "length").inc(m - stops)
                    self.prompt.labels(*labels).inc(100 * m)
                    self.generation.labels(*labels).inc(37 * m)
                self.values["requests"] += n
                self.values["tokens_in"] += 100 * n
                self.values["tokens_out"] += 37 * n
            else:
                self.values["requests"] += n
                self.values["inferences"] += 8 * n  # batches of 8
                self.values["executions"] += n

    def exposition(self) -> bytes:
        if self.kind == "tgi":
            v, n = self.values, self.values["requests"]
            return (
                "# TYPE tgi_request_count counter\n"
                f"tgi_request_count {n}\n"
                "# TYPE tgi_request_success counter\n"
                f"tgi_request_success {n}\n"
                "# TYPE tgi_request_generated_tokens histogram\n"
                f'tgi_request_generated_tokens_bucket{{le="1"}} 0\n'
                f'tgi_request_generated_tokens_bucket{{le="+Inf"}} {n}\n'
                f"tgi_request_generated_tokens_sum {v['tokens_out']}\n"
                f"tgi_request_generated_tokens_count {n}\n"
                "# TYPE tgi_request_input_length histogram\n"
                f'tgi_request_input_length_bucket{{le="+Inf"}} {n}\n'
                f"tgi_request_input_length_sum {v['tokens_in']}\n"
                f"tgi_request_input_length_count {n}\n"
                "# TYPE tgi_queue_size gauge\n"
                "tgi_queue_size 0\n"
            ).encode()
        if self.kind in ("vllm", "sglang"):
            from prometheus_client import generate_latest

            return generate_latest(self.registry)
        v, model = self.values, MODEL["triton"]
        return (
            "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n"
            "# TYPE nv_inference_request_success counter\n"
            f'nv_inference_request_success{{model="{model}",version="1"}} {v["requests"]}\n'
            "# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes\n"
            "# TYPE nv_inference_request_failure counter\n"
            f'nv_inference_request_failure{{model="{model}",version="1"}} 0\n'
            "# HELP nv_inference_count Number of inferences performed (does not include cached requests)\n"
            "# TYPE nv_inference_count counter\n"
            f'nv_inference_count{{model="{model}",version="1"}} {v["inferences"]}\n'
            "# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)\n"
            "# TYPE nv_inference_exec_count counter\n"
            f'nv_inference_exec_count{{model="{model}",version="1"}} {v["executions"]}\n'
            "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n"
            "# TYPE nv_gpu_utilization gauge\n"
            'nv_gpu_utilization{gpu_uuid="GPU-00000000-0000-0000-0000-000000000000"} 0.5\n'
        ).encode()


def main() -> None:
    kind, state_file = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    workers_n = int(args[args.index("--workers") + 1]) if "--workers" in args else 1
    drip_after = int(args[args.index("--drip-after") + 1]) if "--drip-after" in args else None
    metrics_asked = [0]
    restarted = os.environ.get("FAKE_SERVER_STATE")
    state = json.loads(restarted) if restarted else None
    counts = Counts(kind, int(args[args.index("--engines") + 1]) if "--engines" in args else 0)
    asked_other = [state.get("asked", 0) if state else 0]  # kept across a restart

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code: int, body: bytes, ctype: str = "text/plain; version=0.0.4; charset=utf-8"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _drip(self, body: bytes) -> None:
            import time

            # HTTP/1.1 with a length: the answer the client's deadline is tested against elsewhere
            # (tests/servers.py); an HTTP/1.0 one is the HTTP layer's own case (issue 46, item 3).
            self.protocol_version, self.close_connection = "HTTP/1.1", True
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.25)
            except OSError:
                pass  # the client gave up

        def do_GET(self):
            path = urlsplit(self.path).path
            if path == "/metrics":
                metrics_asked[0] += 1
                if drip_after is not None and metrics_asked[0] > drip_after:
                    return self._drip(counts.exposition())
                self._send(200, counts.exposition())
            elif path == "/info" and kind == "tgi":
                info = {"model_id": MODEL["tgi"], "model_dtype": "torch.float16", "version": "2.4.1"}
                self._send(200, json.dumps(info).encode(), "application/json")
            elif path == "/state":
                self._send(
                    200, json.dumps(dict(counts.values, restarts=state["restarts"])).encode(), "application/json"
                )
            elif path == "/asked":
                self._send(200, json.dumps({"asked": asked_other[0]}).encode(), "application/json")
            else:
                self._send(404, b"not found\n")

        def do_POST(self):
            parts = urlsplit(self.path)
            if parts.path == "/work":
                counts.work(int(parse_qs(parts.query).get("n", ["1"])[0]))
                self._send(200, json.dumps(counts.values).encode(), "application/json")
            elif parts.path == "/restart_engine":
                counts.restart_engine(parse_qs(parts.query)["engine"][0])
                self._send(200, json.dumps(counts.values).encode(), "application/json")
            else:
                self._send(404, b"not found\n")

    class Other(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            asked_other[0] += 1
            body = b"<html>an admin page, not metrics</html>\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    ThreadingHTTPServer.allow_reuse_address = True
    other = None
    if state is None:
        if "--other-port" in args:
            # The other port first, and below the main one: discovery asks ports in order, so
            # it meets the port that is not a server before the one that is.
            other = ThreadingHTTPServer(("127.0.0.1", 0), Other)
        for _ in range(100):
            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            if other is None or server.server_address[1] > other.server_address[1]:
                break
            server.server_close()
        workers = [
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]).pid for _ in range(workers_n)
        ]
        state = {"pid": os.getpid(), "port": server.server_address[1], "workers": workers, "restarts": 0}
        if other is not None:
            state["other_port"] = other.server_address[1]
    else:
        state["restarts"] += 1
        server = ThreadingHTTPServer(("127.0.0.1", state["port"]), Handler)
        if "other_port" in state:
            other = ThreadingHTTPServer(("127.0.0.1", state["other_port"]), Other)
    if other is not None:
        threading.Thread(target=other.serve_forever, daemon=True).start()

    def restart(*_):
        os.environ["FAKE_SERVER_STATE"] = json.dumps(dict(state, asked=asked_other[0]))
        server.socket.close()
        if other is not None:
            other.socket.close()
        os.execv(sys.executable, [sys.executable, *sys.argv])

    def stop(*_):
        for pid in state["workers"]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(0)

    signal.signal(signal.SIGHUP, restart)
    signal.signal(signal.SIGTERM, stop)
    tmp = state_file + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, state_file)
    try:
        server.serve_forever()
    except OSError:
        pass


if __name__ == "__main__":
    socket.setdefaulttimeout(10)
    main()

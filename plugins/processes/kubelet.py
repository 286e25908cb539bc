"""Which pod holds which GPU: the kubelet's pod-resources API (gRPC v1 `List`).

The kubelet serves `v1.PodResourcesLister/List` on a unix socket
(/var/lib/kubelet/pod-resources/kubelet.sock): per pod (name, namespace) and container, the
device ids each device plugin gave it. NVIDIA's device plugin names GPUs by UUID (MIG
devices by MIG UUID), so a GPU's UUID finds the namespace, pod and container that hold it,
whether or not a process of theirs runs on it yet.

grpcio is an optional extra (gpuagent's `k8s` extra), imported only when the socket
exists; the messages are described here in code (the five of the v1 API that `List` needs,
same field numbers as k8s.io/kubelet/pkg/apis/podresources/v1/api.proto), so no generated
module and no protoc run are needed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("gpuagent.collector.processes")

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
METHOD = "/v1.PodResourcesLister/List"

KUBELET_REFUSED = "kubelet_refused"
KUBELET_TIMEOUT = "kubelet_timeout"


@dataclass(frozen=True)
class PodDevice:
    namespace: str
    pod: str
    container: str
    resource: str

    def tags(self) -> dict[str, str]:
        return {
            "k8s_namespace": self.namespace,
            "k8s_pod": self.pod,
            "k8s_container": self.container,
        }


# (message, [(field name, number, type, label, message type)]) of podresources v1.
_STRING, _MESSAGE = 9, 11
_OPTIONAL, _REPEATED = 1, 3
_MESSAGES: tuple[tuple[str, list[tuple[str, int, int, int, str | None]]], ...] = (
    ("ListPodResourcesRequest", []),
    ("ListPodResourcesResponse", [("pod_resources", 1, _MESSAGE, _REPEATED, "PodResources")]),
    (
        "PodResources",
        [
            ("name", 1, _STRING, _OPTIONAL, None),
            ("namespace", 2, _STRING, _OPTIONAL, None),
            ("containers", 3, _MESSAGE, _REPEATED, "ContainerResources"),
        ],
    ),
    (
        "ContainerResources",
        [
            ("name", 1, _STRING, _OPTIONAL, None),
            ("devices", 2, _MESSAGE, _REPEATED, "ContainerDevices"),
        ],
    ),
    (
        "ContainerDevices",
        [
            ("resource_name", 1, _STRING, _OPTIONAL, None),
            ("device_ids", 2, _STRING, _REPEATED, None),
        ],
    ),
)

_classes: dict[str, Any] | None = None


def message_classes() -> dict[str, Any]:  # Any: protobuf's message classes are built at run time
    """The v1 messages `List` uses, built once from descriptors (protobuf comes with grpcio)."""
    global _classes
    if _classes is None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        fd = descriptor_pb2.FileDescriptorProto(name="gpuagent/podresources_v1.proto", package="v1", syntax="proto3")
        for name, fields in _MESSAGES:
            msg = fd.message_type.add(name=name)
            for fname, number, ftype, label, mtype in fields:
                f = msg.field.add(name=fname, number=number, type=ftype, label=label)
                if mtype:
                    f.type_name = f".v1.{mtype}"
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fd)
        _classes = {
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}")) for name, _ in _MESSAGES
        }
    return _classes


class PodResources:
    """`List` once per collection; device id -> PodDevice. Missing socket: not on Kubernetes."""

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = 2.0):
        self.socket = socket
        self.timeout = timeout
        self._grpc = None
        self._no_grpc_logged = False
        self.error: str | None = None  # the reason of the last failed List, counted by the caller

    def available(self) -> bool:
        return bool(self.socket) and os.path.exists(self.socket)

    def _import(self):
        if self._grpc is None:
            try:
                import grpc  # noqa: PLC0415 (optional extra, only on Kubernetes nodes)

                message_classes()
            except ImportError as exc:
                if not self._no_grpc_logged:
                    self._no_grpc_logged = True
                    log.warning(
                        "kubelet pod-resources socket %s found but %s; pod names are left out "
                        "(gpuagent's k8s extra: pip install '.[k8s]' in its checkout)",
                        self.socket,
                        exc,
                    )
                return None
            self._grpc = grpc
        return self._grpc

    def devices(self) -> dict[str, PodDevice] | None:
        """Device id -> holder; None when the kubelet is not there or not asked (no grpcio),
        or answered with an error (then ``self.error`` says which)."""
        self.error = None
        if not self.available():
            return None
        grpc = self._import()
        if grpc is None:
            return None
        classes = message_classes()
        request = classes["ListPodResourcesRequest"]()
        response_cls = classes["ListPodResourcesResponse"]
        try:
            with grpc.insecure_channel(f"unix://{self.socket}") as channel:
                call = channel.unary_unary(
                    METHOD,
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=response_cls.FromString,
                )
                response = call(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            self.error = KUBELET_TIMEOUT if code == grpc.StatusCode.DEADLINE_EXCEEDED else KUBELET_REFUSED
            log.debug("kubelet pod-resources List at %s failed: %s", self.socket, code)
            return None
        out: dict[str, PodDevice] = {}
        for pod in response.pod_resources:
            for container in pod.containers:
                for dev in container.devices:
                    for device_id in dev.device_ids:
                        out[device_id] = PodDevice(pod.namespace, pod.name, container.name, dev.resource_name)
        return out

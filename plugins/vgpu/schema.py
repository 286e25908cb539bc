"""What the vgpu plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_VGPU,
        (
            gauge(
                "virtualization_mode",
                str,
                help="`none` (bare metal), `passthrough`, `vgpu` (inside a VM), `host_vgpu`, `host_vsga`",
                source="`nvmlDeviceGetVirtualizationMode`",
            ),
            gauge(
                "host_vgpu_mode",
                str,
                help="`sriov` or `non_sriov` (where NVML reports it)",
                source="`nvmlDeviceGetHostVgpuMode`",
            ),
            gauge(
                "supported_types",
                int,
                unit="types",
                help="static: vGPU types the GPU supports (host modes only)",
                source="`nvmlDeviceGetSupportedVgpus`",
            ),
            gauge(
                "creatable_types",
                int,
                unit="types",
                help="vGPU types that can be created now",
                source="`nvmlDeviceGetCreatableVgpus`",
            ),
            gauge(
                "active_instances",
                int,
                unit="instances",
                help="running vGPU instances",
                source="`nvmlDeviceGetActiveVgpus`",
            ),
        ),
        part="gpu",
    ),
    Measurement(
        measurements.GPU_VGPU,
        (
            gauge("vgpu_type_id", int, source="`nvmlVgpuInstanceGetType`"),
            gauge("vgpu_type_name", str, help="same as the `vgpu_type` tag", source="`nvmlVgpuTypeGetName`"),
            gauge("vgpu_uuid", str, source="`nvmlVgpuInstanceGetUUID`"),
            gauge("vm_id", str, help="the VM's domain id or UUID", source="`nvmlVgpuInstanceGetVmID`"),
            gauge("vm_id_type", str, help="`domain_id` or `uuid`", source="`nvmlVgpuInstanceGetVmID`"),
            gauge(
                "fb_used_bytes",
                int,
                unit="bytes",
                help="frame buffer used by the instance",
                source="`nvmlVgpuInstanceGetFbUsage`",
            ),
            gauge(
                "fb_total_bytes",
                int,
                unit="bytes",
                help="frame buffer of its type",
                source="`nvmlVgpuTypeGetFramebufferSize`",
            ),
            gauge(
                "licensed", bool, source="`nvmlVgpuInstanceGetLicenseInfo_v2`, else `nvmlVgpuInstanceGetLicenseStatus`"
            ),
            gauge(
                "license_state",
                str,
                help="`licensed`, `unlicensed`, `unlicensed_restricted`, `unlicensed_unrestricted`, `uninitialized`, `unknown` (where the driver reports it)",
                source="`nvmlVgpuInstanceGetLicenseInfo_v2`",
            ),
            gauge(
                "sm_util_pct",
                int,
                unit="%",
                help="newest utilisation sample since the previous run (absent when none is newer)",
                source="`nvmlDeviceGetVgpuUtilization`",
            ),
            gauge(
                "mem_util_pct",
                int,
                unit="%",
                help="frame buffer (memory controller) utilisation",
                source="`nvmlDeviceGetVgpuUtilization`",
            ),
            gauge("enc_util_pct", int, unit="%", help="encoder", source="`nvmlDeviceGetVgpuUtilization`"),
            gauge("dec_util_pct", int, unit="%", help="decoder", source="`nvmlDeviceGetVgpuUtilization`"),
        ),
        tags=("vgpu_instance", "vgpu_type"),
        part="vgpu_instance",
    ),
)

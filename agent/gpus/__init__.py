"""The NVML layer: opening the library, one GPU's identity and error policy, per-cycle reads,
GPM, NVLinks, CUDA attributes and the published figures of known models."""

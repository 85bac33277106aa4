"""The fields only one kind of hardware reads: an override of one a workload's hardware does
not read changes nothing, and warns (``scenario._warn_unread``, the rule a section's fields
follow under its choice: ``config.overrides.unread_overrides``).

Each entry is written from the code that reads the field:

- ``cuda_graphs``: a GPU's launches (``engine.for_hardware.gpu_settings``, the GPU engine's
  graph launch); SN40L's engine never reads it;
- ``stack.decode_attention_split``: how a GPU deals decode attention out to thread blocks
  (``gpu_settings`` too); SN40L streams the cache through its own stages;
- ``kernel_looping``: read only where the fusion level is ``full`` (``compiler.fusion.
  kernel_graphs`` loops a layer kernel; split ones never loop), on either kind: so not at
  ``auto`` on a GPU (partial there), nor at ``none`` or ``partial`` on SN40L.
"""

from __future__ import annotations

GPU_ONLY: dict[str, str] = {
    "cuda_graphs": "CUDA graphs launch a GPU's kernels",
    "stack.decode_attention_split": "it deals a GPU's decode attention out to thread blocks",
}
"""The override paths only a GPU reads, each with why, in words."""

LOOPING = "kernel_looping"
"""The field only fusion ``full`` reads (its layer kernels are what it loops)."""


def device_words(gpu: bool, name: str) -> str:
    """The workload's device in a sentence: ``a GPU (dgx-h100)``, ``SN40L (sn40l-8)``."""
    return f"{'a GPU' if gpu else 'SN40L'} ({name})"


def unread_on_device(gpu: bool, fusion: str, level: str) -> dict[str, str]:
    """The override paths the workload's device does not read (``gpu``: a GPU, else SN40L;
    ``fusion`` the workload's level as written, ``level`` it resolved for the device), each
    with why, in words that follow the device: ``kernel_looping`` -> ``at fusion auto
    (partial here): it loops fusion full's layer kernels``."""
    unread = {} if gpu else {path: f": {why}" for path, why in GPU_ONLY.items()}
    if level != "full":
        at = f"fusion {fusion}" if fusion == level else f"fusion {fusion} ({level} here)"
        unread[LOOPING] = f" at {at}: kernel looping loops fusion full's layer kernels"
    return unread

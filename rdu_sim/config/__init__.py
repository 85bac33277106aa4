"""Validated, typed configuration: hardware, model architectures, workloads, unit parsing."""

from rdu_sim.config.architecture import (
    ConfigJsonKeys,
    ConfigJsonModel,
    DeepSeekArchitecture,
    GqaMoeArchitecture,
    LlamaArchitecture,
    ModelArchitecture,
)
from rdu_sim.config.errors import ConfigError, ConfigIssue
from rdu_sim.config.hardware import HardwareConfig, SocketConfig, SystemConfig
from rdu_sim.config.loader import load_model, read_yaml, validate
from rdu_sim.config.workload import DTYPE_BYTES, KVConfig, ServingConfig, WorkloadConfig

__all__ = [
    "DTYPE_BYTES",
    "ConfigError",
    "ConfigIssue",
    "ConfigJsonKeys",
    "ConfigJsonModel",
    "DeepSeekArchitecture",
    "GqaMoeArchitecture",
    "HardwareConfig",
    "KVConfig",
    "LlamaArchitecture",
    "ModelArchitecture",
    "ServingConfig",
    "SocketConfig",
    "SystemConfig",
    "WorkloadConfig",
    "load_model",
    "read_yaml",
    "validate",
]

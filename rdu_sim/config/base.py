"""The base of every config model: strict (unknown keys are errors), immutable, typed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Refuses unknown fields (so a typo like `hbm_bandwith` is an error) and never mutates."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

"""The base of every configuration section (`quantgate.config` and `quantgate.data_config`)."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base for config sections: frozen, and unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

"""DxDispatch models (microsoft/DirectML, ``DxDispatch/``) run on dmlops: the model's JSON read into resources,
operator descs and commands; the commands run through the operator API; what DxDispatch prints, printed."""

from .fields import ModelError
from .model import read_model
from .runner import DEFAULT_MAX_BYTES, run_model

__all__ = ["DEFAULT_MAX_BYTES", "ModelError", "read_model", "run_model"]

"""gradwire: communication-efficient data-parallel training for PyTorch.

Two ways in, each a couple of lines in a plain PyTorch program:

    # DDP with gradwire's codecs (int8 with error feedback, PowerSGD, top-k, ... or "auto")
    state, hook = gradwire.ddp.hook("int8")
    model.register_comm_hook(state, hook)

    # DiLoCo: local steps, the model averaged every inner_steps (auto: chosen for the
    # link), in two streamed fragments of 4-bit outer gradients
    with gradwire.DiLoCo(model, optimizer, link_bits_per_s=10e6) as diloco:
        ...                                                   # diloco.step() for optimizer.step()

Every failure gradwire reports is a gradwire.Error (a RuntimeError): ConfigError (a bad
option, an unknown codec), MismatchError (ranks that disagree), PayloadError (bytes that
are not what they should be), TimeoutError (a peer that did not answer in time). Logging
goes to the "gradwire" logger.
"""
from gradwire._C import (  # noqa: F401
    ConfigError,
    Error,
    MismatchError,
    PayloadError,
    SystemError,
    TimeoutError,
    __version__,
    canonical_codec,
    codec_names,
)
from gradwire import ddp, timeline  # noqa: F401
from gradwire.diloco import DiLoCo  # noqa: F401

__all__ = [
    "__version__",
    "Error",
    "ConfigError",
    "MismatchError",
    "PayloadError",
    "SystemError",
    "TimeoutError",
    "canonical_codec",
    "codec_names",
    "ddp",
    "DiLoCo",
    "timeline",
]

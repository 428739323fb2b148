"""perfsuite: timing, traffic and parity of the speculative-decoding draft step's top-k selection."""

import os as _os

__version__ = "0.1.0"

if _os.environ.get("PERFSUITE_SIMULATED_GPU", "").strip():  # before anything asks torch.cuda or Triton
    from perfsuite import simulated_gpu as _simulated_gpu

    try:
        _simulated_gpu.install_from_env()
    except (ValueError, RuntimeError) as _exc:
        raise SystemExit(f"perfsuite: {_simulated_gpu.ENV}: {_exc}") from None

"""The performance model's calibration (``calibrate``): kernels, runners and the fit."""
